"""The REST endpoints of what a team holds besides its work: quotas and usage, volumes and datasets, secrets
and registry credentials. Split out of jobs.api.views, whose error mapping (raise_for, ERROR_RESPONSES) these
share; jobs.urls registers their routes beside the job and notebook endpoints."""

from django.conf import settings
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Case, Exists, IntegerField, OuterRef, Prefetch, Value, When
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import roles
from accounts.models import Membership, Team
from accounts.permissions import IsAdminOrReadOnly, IsAuthenticatedWithTokenScope
from jobs import access, actions, checkpoints
from jobs.api.views import ERROR_RESPONSES, SERVICE_ERRORS, JobViewSet, raise_for
from jobs.filtersets import (
    QuotaFilterSet,
    RegistryCredentialFilterSet,
    TeamSecretFilterSet,
    TeamVolumeFilterSet,
)
from jobs.models import Dataset, Quota, QuotaClusterCap, RegistryCredential, TeamSecret, TeamVolume
from jobs.storage import secrets, volumes
from jobs.teams import shares
from jobs.teams.api.serializers import (
    DatasetSerializer,
    MemberSharesSerializer,
    MemberWeightsSerializer,
    QuotaSerializer,
    RegistryCredentialSerializer,
    RegistryRotateSerializer,
    SecretRotateSerializer,
    TeamSecretSerializer,
    TeamVolumeSerializer,
)
from jobs.teams.forms import PeopleUsageForm, UsageRangeForm
from jobs.usage import (
    energy_figures,
    held_units,
    member_usage_rows,
    months_back,
    people_scope,
    people_usage,
    team_totals,
    teams_usage_rows,
    usage_totals,
    write_people_csv,
    write_usage_csv,
)


@extend_schema_view(
    list=extend_schema(summary="List quotas", description="Your teams' quotas (admins: all) with units in use."),
    retrieve=extend_schema(summary="One quota"),
    create=extend_schema(summary="Grant a team a quota for a resource class (admins)"),
    update=extend_schema(summary="Change a quota (admins)"),
    partial_update=extend_schema(summary="Change a quota (admins)"),
    destroy=extend_schema(summary="Remove a quota (admins)"),
)
@extend_schema(tags=["teams"])
class QuotaViewSet(viewsets.ModelViewSet):
    queryset = Quota.objects.none()
    serializer_class = QuotaSerializer
    permission_classes = [IsAdminOrReadOnly]
    filterset_class = QuotaFilterSet
    ordering_fields = ["id", "guaranteed", "limit", "used", "updated"]

    def get_queryset(self):
        user = self.request.user
        teams = None
        if not user.is_staff:  # user.pk: None for an anonymous caller, who is refused before the rows are read
            teams = list(Membership.objects.filter(user=user.pk).values_list("team_id", flat=True))
        # ``used`` is what the team holds as jobs.usage.held_units counts it (the quota bars, the wait reasons and
        # the metrics say the same), put on each row as a value so that ``ordering=used`` still sorts in SQL.
        held = held_units(team_ids=teams)
        used = Case(
            *(When(team_id=team, resource_class_id=rc, then=Value(n)) for (team, rc), n in sorted(held.items())),
            default=Value(0),
            output_field=IntegerField(),
        )
        caps = Prefetch("cluster_caps", queryset=QuotaClusterCap.objects.select_related("cluster"))
        qs = Quota.objects.select_related("team", "resource_class", "updated_by").prefetch_related(caps)
        qs = qs.annotate(used=used)
        if not user.is_staff:
            qs = qs.filter(Exists(Membership.objects.filter(user=user, team=OuterRef("team"))))
            qs = qs.filter(resource_class__hidden=False)  # issue 16 finding 8: hidden classes are for admins
        return qs.order_by("team__slug", "resource_class__key")

    def _save(self, serializer, instance=None):
        data = serializer.validated_data
        team = data.get("team", getattr(instance, "team", None))
        rc = data.get("resource_class", getattr(instance, "resource_class", None))
        budget = data.get("monthly_gpu_hours", getattr(instance, "monthly_gpu_hours", None))
        try:
            quota = actions.set_quota(
                self.request.user,
                team,
                rc,
                data.get("guaranteed", getattr(instance, "guaranteed", 0)),
                data.get("limit", getattr(instance, "limit", 0)),
                budget,
                quota_id=instance.pk if instance is not None else None,
                cluster_caps=data.get("cluster_caps"),
            )
        except Quota.DoesNotExist as error:  # removed by a racing DELETE: never created again under a new id
            raise exceptions.NotFound(str(error)) from error
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._fresh(quota.pk)

    def _fresh(self, pk: int) -> Quota:
        quota = self.get_queryset().filter(pk=pk).first()
        if quota is None:  # removed by a DELETE that committed just after this change
            raise exceptions.NotFound(f"Quota #{pk} no longer exists: it was removed.")
        return quota

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        quota = self._save(serializer)
        return Response(self.get_serializer(quota).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        serializer = self.get_serializer(instance, data=request.data, partial=kwargs.pop("partial", False))
        serializer.is_valid(raise_exception=True)
        return Response(self.get_serializer(self._save(serializer, instance)).data)

    def destroy(self, request, *args, **kwargs):
        quota = get_object_or_404(self.get_queryset(), pk=kwargs["pk"])
        if not actions.delete_quota(request.user, quota):  # a racing DELETE removed it first
            raise exceptions.NotFound(f"Quota #{quota.pk} no longer exists: it was removed.")
        return Response(status=status.HTTP_204_NO_CONTENT)


#: ?team= of the usage API that asks for every team (admins only).
ALL_TEAMS = "all"


def _usage_json(rows: list[dict]) -> list[dict]:
    return [
        {
            **({"team": r["team"]} if "team" in r else {}),
            **({"user": r["user"]} if "user" in r else {}),
            "allocated_gpu_hours": r["allocated"],
            "used_gpu_hours": r["used"],
            "efficiency_percent": r["efficiency"],
            **({"preemption_lost_gpu_hours": r["lost"]} if "lost" in r else {}),
            **{key: r[key] for key in ENERGY_KEYS if key in r},
        }
        for r in rows
    ]


#: The energy figures of a usage row (jobs.usage.energy_figures): co2e_kg only where a carbon factor is set.
ENERGY_KEYS = ("energy_kwh", "joules_per_gpu_hour", "co2e_kg")


class UsageView(APIView):
    """Showback for pipelines: what a team's jobs (admins: every team's, ``team=all``) held and actually used, per
    UTC day, per team and per member. A lead or an admin sees every member's GPU-hours; any other member their
    own."""

    @extend_schema(
        summary="Allocated and used GPU-hours per day, per team and per member",
        parameters=[
            OpenApiParameter(
                "team", str, required=True, description="Team slug (yours; admins: any, or `all` for every team)."
            ),
            OpenApiParameter("start", OpenApiTypes.DATE, required=True, description="First day (UTC)."),
            OpenApiParameter("end", OpenApiTypes.DATE, required=True, description="Last day (UTC), inclusive."),
            OpenApiParameter("output", str, enum=["json", "csv"], description="csv: the days' rows as CSV."),
        ],
        responses={200: OpenApiTypes.OBJECT},
        tags=["telemetry"],
    )
    def get(self, request):
        slug = request.query_params.get("team", "")
        errors: dict[str, list[str]] = {}
        if not slug:
            errors["team"] = ["Required: the team's slug (admins: or all, for every team)."]
        form = UsageRangeForm(request.query_params)
        if not form.is_valid():
            errors |= {("range" if k == "__all__" else k): [str(e) for e in v] for k, v in form.errors.items()}
        output = request.query_params.get("output", "json")
        if output not in ("json", "csv"):
            errors["output"] = ["json or csv."]
        if errors:
            raise serializers.ValidationError(errors)
        teams = self._teams(request.user, slug)
        start, end = form.cleaned_data["start"], form.cleaned_data["end"]
        now = timezone.now()
        rows = teams_usage_rows(teams, start, end, now)
        if output == "csv":
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="gpu-usage-{slug}-{start}-{end}.csv"'
            write_usage_csv(response, rows)
            return response
        sees_all = slug == ALL_TEAMS or roles.is_lead_or_admin(request.user, teams[0])
        members = member_usage_rows(teams, start, end, now, only_user=None if sees_all else request.user)
        days: dict[str, dict] = {}
        for r in rows:
            day = days.setdefault(r["day"], {"day": r["day"], "allocated": 0.0, "used": 0.0, "joules": None})
            day["allocated"] += r["allocated"]
            day["used"] += r["used"]
            if r["joules"] is not None:
                day["joules"] = (day["joules"] or 0.0) + r["joules"]
        return Response(
            {
                "team": slug,
                "start": start,
                "end": end,
                "days": [
                    {
                        "date": d["day"],
                        **_usage_json([usage_totals(d["allocated"], d["used"])])[0],
                        **energy_figures(d["joules"], d["allocated"]),
                    }
                    for d in days.values()
                ],
                "teams": _usage_json(team_totals(rows)),
                "members": _usage_json(members),
            }
        )

    @staticmethod
    def _teams(user, slug: str) -> list[Team]:
        """The teams ?team= names: every team for an admin's ``all``, else the one team (of the caller's, for
        anyone but an admin: another team answers as one that does not exist)."""
        if slug == ALL_TEAMS:
            if not user.is_staff:
                mine = ", ".join(access.visible_teams(user).order_by("slug").values_list("slug", flat=True))
                raise exceptions.PermissionDenied(
                    "Only admins read every team's usage (team=all); ask for one team"
                    + (f": yours are {mine}." if mine else ", once you belong to one.")
                )
            return list(Team.objects.order_by("slug"))
        team = access.visible_teams(user).filter(slug=slug).first()
        if team is None:
            if user.is_staff:
                raise exceptions.NotFound(f"No team {slug!r}. Give a team's slug, or team=all for every team.")
            raise exceptions.NotFound(f"No team {slug!r} that you belong to.")
        return [team]


def your_team(request, slug: str) -> Team:
    """A team of the caller's by slug (admins: any); another team answers as one that does not exist."""
    team = access.visible_teams(request.user).filter(slug=slug).first()
    if team is None:
        raise exceptions.NotFound(f"No team {slug!r} that you belong to.")
    return team


class MemberSharesView(APIView):
    """Fair share among a team's members: each member's weight and recent use (any member of the team, admins), and
    the weights its leads set (leads, admins; audited). jobs.teams.shares holds the rules."""

    @staticmethod
    def _answer(team: Team, found: list[shares.Share]) -> Response:
        data = {
            "team": team.slug,
            "member_share": settings.PORTAL_MEMBER_FAIR_SHARE,
            "half_life_seconds": settings.PORTAL_FAIR_SHARE_HALF_LIFE,
            "members": found,
        }
        return Response(MemberSharesSerializer(data).data)

    @extend_schema(summary="A team's members' fair-share weights and recent use", responses=MemberSharesSerializer,
                   tags=["teams"])  # fmt: skip
    def get(self, request, slug: str):
        team = your_team(request, slug)
        return self._answer(team, shares.member_shares(team))

    @extend_schema(
        summary="Set members' fair-share weights (the team's leads, admins)",
        request=MemberWeightsSerializer,
        responses={
            200: MemberSharesSerializer,
            **ERROR_RESPONSES,
            404: OpenApiResponse(description="No team of yours by that slug."),
        },
        tags=["teams"],
    )
    def patch(self, request, slug: str):
        team = your_team(request, slug)
        if not shares.can_set_weights(request.user, team):
            raise exceptions.PermissionDenied("Only the team's leads and admins set its members' weights.")
        body = MemberWeightsSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            found = shares.set_weights(request.user, team, body.validated_data["weights"])
        except DjangoValidationError as error:
            problems = error.message_dict
            raise serializers.ValidationError(problems if "weights" in problems else {"weights": problems}) from None
        return self._answer(team, found)


class MinRuntimeSerializer(serializers.Serializer):
    team = serializers.CharField(read_only=True)
    min_runtime_seconds = serializers.IntegerField(
        help_text="None of the team's jobs is preempted before it ran this long (0: no protection); at most "
        "PORTAL_MIN_RUNTIME_MAX."
    )
    max_seconds = serializers.IntegerField(read_only=True, help_text="PORTAL_MIN_RUNTIME_MAX.")


class PreemptionView(APIView):
    """A team's protection from preemption: its minimum runtime (any member reads it; leads and admins set it,
    audited). jobs.checkpoints holds the rule."""

    @staticmethod
    def _answer(team: Team, seconds: int) -> Response:
        data = {"team": team.slug, "min_runtime_seconds": seconds, "max_seconds": settings.PORTAL_MIN_RUNTIME_MAX}
        return Response(MinRuntimeSerializer(data).data)

    @extend_schema(summary="A team's minimum runtime before preemption", responses=MinRuntimeSerializer,
                   tags=["teams"])  # fmt: skip
    def get(self, request, slug: str):
        team = your_team(request, slug)
        return self._answer(team, checkpoints.min_runtime(team))

    @extend_schema(
        summary="Set a team's minimum runtime before preemption (the team's leads, admins)",
        request=MinRuntimeSerializer,
        responses={200: MinRuntimeSerializer, **ERROR_RESPONSES},
        tags=["teams"],
    )
    def put(self, request, slug: str):
        team = your_team(request, slug)
        body = MinRuntimeSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            seconds = checkpoints.set_min_runtime(request.user, team, body.validated_data["min_runtime_seconds"])
        except DjangoPermissionDenied as error:
            raise exceptions.PermissionDenied(str(error)) from None
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None
        return self._answer(team, seconds)


@extend_schema_view(
    list=extend_schema(
        summary="List team volumes",
        description="The PersistentVolumeClaims in your teams' namespaces (admins: all), as the volume inventory "
        "last saw them, with what mounts each now. These are what a job's or notebook's volumes may name.",
    ),
    retrieve=extend_schema(summary="One team volume"),
)
@extend_schema(tags=["storage"])
class TeamVolumeViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = TeamVolume.objects.none()
    serializer_class = TeamVolumeSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = TeamVolumeFilterSet

    def get_queryset(self):
        return access.visible_to(TeamVolume.objects.select_related("team", "cluster", "dataset"), self.request.user)

    def get_serializer_context(self):
        context = super().get_serializer_context()
        users = context.setdefault("users", {})
        if getattr(self, "action", None) in ("list", "retrieve"):
            teams = Team.objects.filter(pk__in=self.filter_queryset(self.get_queryset()).values("team_id"))
            for team in teams:
                users[team.pk] = volumes.volume_users(team)
        return context


@extend_schema_view(
    list=extend_schema(
        summary="List published datasets", description="Everyone sees the datasets of their teams; admins see all."
    ),  # fmt: skip
    retrieve=extend_schema(summary="One dataset"),
    create=extend_schema(summary="Describe a dataset and publish it read-only to teams (admins)"),
    partial_update=extend_schema(summary="Change a dataset or the teams it is published to (admins)"),
    update=extend_schema(summary="Replace a dataset's description and teams (admins)"),
    destroy=extend_schema(summary="Unpublish a dataset from every team and remove it (admins; the data stays)"),
)
@extend_schema(tags=["storage"])
class DatasetViewSet(viewsets.ModelViewSet):
    queryset = Dataset.objects.none()
    serializer_class = DatasetSerializer
    permission_classes = [IsAdminOrReadOnly]

    def get_queryset(self):
        datasets = Dataset.objects.prefetch_related("teams", "clusters")
        if not self.request.user.is_staff:
            datasets = datasets.filter(teams__memberships__user=self.request.user).distinct()
        return datasets

    def _save(self, serializer, instance=None):
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        teams = data.pop("teams", None)
        clusters = data.pop("clusters", None)
        if instance is not None:
            data = {f: data.get(f, getattr(instance, f)) for f in volumes.AUDIT_FIELDS}
            teams = list(instance.teams.all()) if teams is None else teams
        try:
            dataset = volumes.save_dataset(self.request.user, data, teams or [], instance, clusters)
        except SERVICE_ERRORS as error:
            raise_for(error)
        return dataset

    def create(self, request, *args, **kwargs):
        dataset = self._save(self.get_serializer(data=request.data))
        return Response(self.get_serializer(dataset).data, status=status.HTTP_201_CREATED)

    def update(self, request, *args, **kwargs):
        instance = self.get_object()
        partial = kwargs.pop("partial", False)
        dataset = self._save(self.get_serializer(instance, data=request.data, partial=partial), instance)
        return Response(self.get_serializer(dataset).data)

    def destroy(self, request, *args, **kwargs):
        try:
            volumes.delete_dataset(request.user, self.get_object())
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ClusterUnavailableError(exceptions.APIException):
    status_code = 503
    default_detail = "The cluster did not store the secret; nothing was changed. Try again shortly."
    default_code = "cluster_unavailable"


def _secret_call(func, *args, **kwargs):
    """Run a jobs.storage.secrets service, answering its errors as the API does (400/403, or 503 from the cluster)."""
    try:
        return func(*args, **kwargs)
    except secrets.ClusterUnavailable as error:
        raise ClusterUnavailableError(str(error)) from None
    except SERVICE_ERRORS as error:
        raise_for(error)


SECRET_ERRORS = {
    400: ERROR_RESPONSES[400],
    403: OpenApiResponse(description="Not a lead of the team or an admin, or a read-only token."),
    503: OpenApiResponse(description="The cluster did not store or delete the Secret; nothing was changed."),
}


@extend_schema_view(
    list=extend_schema(summary="List team secrets", description="Names and keys of your teams' secrets; no values."),
    retrieve=extend_schema(summary="One team secret (names and keys only)"),
    create=extend_schema(
        summary="Create a team secret (leads, admins)",
        description="The values go into a Kubernetes Secret in the team's namespace and are never returned.",
        responses={201: TeamSecretSerializer, **SECRET_ERRORS},
    ),
    destroy=extend_schema(summary="Delete a team secret (leads, admins)", responses={204: None, **SECRET_ERRORS}),
)
@extend_schema(tags=["storage"])
class TeamSecretViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = TeamSecret.objects.none()
    serializer_class = TeamSecretSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = TeamSecretFilterSet
    ordering_fields = ["name", "created_at", "rotated_at", "id"]

    def get_queryset(self):
        qs = TeamSecret.objects.select_related("team", "created_by", "rotated_by")
        return access.visible_to(qs, self.request.user).order_by("team__slug", "name")

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team = data.get("team") or JobViewSet._only_team(request.user)
        secret = _secret_call(
            secrets.create_secret, request.user, team, data["name"], data["data"], data.get("description", "")
        )
        return Response(self.get_serializer(secret).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Rotate a team secret (leads, admins)",
        description="Replaces all its values (and keys). Pods that start afterwards get the new values.",
        request=SecretRotateSerializer,
        responses={200: TeamSecretSerializer, **SECRET_ERRORS},
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def rotate(self, request, pk=None):
        secret = self.get_object()
        serializer = SecretRotateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        secret = _secret_call(secrets.rotate_secret, request.user, secret, serializer.validated_data["data"])
        return Response(self.get_serializer(secret).data)

    def destroy(self, request, *args, **kwargs):
        _secret_call(secrets.delete_secret, request.user, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema_view(
    list=extend_schema(summary="List registry credentials", description="Registries and user names; no tokens."),
    retrieve=extend_schema(summary="One registry credential (no token)"),
    create=extend_schema(
        summary="Add a registry credential (leads, admins)",
        description="Stored as a kubernetes.io/dockerconfigjson Secret; every workload of the team whose image is "
        "on this registry gets it as an imagePullSecret. For nvcr.io: username `$oauthtoken`, token an NGC API key.",
        responses={201: RegistryCredentialSerializer, **SECRET_ERRORS},
    ),
    destroy=extend_schema(
        summary="Delete a registry credential (leads, admins)", responses={204: None, **SECRET_ERRORS}
    ),
)
@extend_schema(tags=["storage"])
class RegistryCredentialViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = RegistryCredential.objects.none()
    serializer_class = RegistryCredentialSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = RegistryCredentialFilterSet
    ordering_fields = ["registry", "created_at", "rotated_at", "id"]

    def get_queryset(self):
        qs = RegistryCredential.objects.select_related("team", "created_by", "rotated_by")
        return access.visible_to(qs, self.request.user).order_by("team__slug", "registry")

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team = data.get("team") or JobViewSet._only_team(request.user)
        credential = _secret_call(
            secrets.create_registry_credential, request.user, team, data["registry"], data["username"], data["token"]
        )
        return Response(self.get_serializer(credential).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        summary="Rotate a registry credential (leads, admins)",
        request=RegistryRotateSerializer,
        responses={200: RegistryCredentialSerializer, **SECRET_ERRORS},
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def rotate(self, request, pk=None):
        credential = self.get_object()
        serializer = RegistryRotateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        credential = _secret_call(
            secrets.rotate_registry_credential, request.user, credential, data["token"], data.get("username")
        )
        return Response(self.get_serializer(credential).data)

    def destroy(self, request, *args, **kwargs):
        _secret_call(secrets.delete_registry_credential, request.user, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class PeopleUsageView(APIView):
    """Usage per person, like ``sreport``: per month, team, member and resource class, the GPU-hours held, jobs run,
    GPU-hours busy, idle and lost to preemption, and the energy drawn. Without ``team``: your own jobs (in every team);
    ``team``: a lead or an admin sees every member, another member their own rows; ``team=all``: every team (admins;
    anyone else is refused with 403, and a team that is not theirs answers 404)."""

    @extend_schema(
        summary="GPU-hours, jobs, idle and preempted hours and energy per person, class and month",
        parameters=[
            OpenApiParameter("team", str, description="Team slug, or `all` (admins). Omitted: your own usage."),
            OpenApiParameter("month", str, description="Last month shown, YYYY-MM (UTC). Default: this month."),
            OpenApiParameter("months", int, description="How many months back from `month`, 1-12 (default 1)."),
            OpenApiParameter("output", str, enum=["json", "csv"], description="csv: the rows as CSV."),
        ],
        responses={200: OpenApiTypes.OBJECT},
        tags=["telemetry"],
    )
    def get(self, request):
        form = PeopleUsageForm(request.query_params)
        errors: dict[str, list[str]] = {}
        if not form.is_valid():
            errors |= {k: [str(e) for e in v] for k, v in form.errors.items()}
        output = request.query_params.get("output", "json")
        if output not in ("json", "csv"):
            errors["output"] = ["json or csv."]
        if errors:
            raise serializers.ValidationError(errors)
        scope, jobs = people_scope(request.user, form.cleaned_data["team"] or "")
        now = timezone.now()
        months = months_back(form.cleaned_data["month"] or now, form.cleaned_data["months"] or 1)
        report = {"scope": scope, **people_usage(months, jobs, now)}
        if output == "csv":
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            name = f"gpu-usage-{scope}-{report['months'][0]}-{report['months'][-1]}.csv"
            response["Content-Disposition"] = f'attachment; filename="{name}"'
            write_people_csv(response, report)
            return response
        return Response(report)
