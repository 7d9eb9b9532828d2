from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Exists, IntegerField, OuterRef, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import exceptions, mixins, renderers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Membership, Team
from accounts.permissions import IsAdminOrReadOnly, IsAuthenticatedWithTokenScope
from cluster import get_backend
from cluster.base import ClusterError, NotFound

from .. import access, livelog, logkeeping, notebooks, secrets, services, volumes
from ..choices import ACTIVE_STATES, StopReason
from ..filtersets import (
    JobFilterSet,
    NotebookFilterSet,
    QuotaFilterSet,
    RegistryCredentialFilterSet,
    TeamSecretFilterSet,
    TeamVolumeFilterSet,
)
from ..forms import UsageRangeForm
from ..models import Dataset, Job, JobArray, Notebook, Quota, RegistryCredential, TeamSecret, TeamVolume
from ..usage import team_usage_rows, write_usage_csv
from .serializers import (
    DatasetSerializer,
    JobArrayCreateSerializer,
    JobArraySerializer,
    JobEventSerializer,
    JobSerializer,
    NotebookExtendSerializer,
    NotebookSerializer,
    PrioritySerializer,
    QuotaSerializer,
    RegistryCredentialSerializer,
    RegistryRotateSerializer,
    SecretRotateSerializer,
    TeamSecretSerializer,
    TeamVolumeSerializer,
)


class UnprocessableEntity(exceptions.APIException):
    status_code = 422
    default_detail = "The request conflicts with an earlier one."
    default_code = "unprocessable"


class PlainTextRenderer(renderers.BaseRenderer):
    """Lets a client that asks for text/plain reach the download (the response is built by the view)."""

    media_type = "text/plain"
    format = "txt"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes) else str(data).encode()


class EventStreamRenderer(PlainTextRenderer):
    """Lets an EventSource (Accept: text/event-stream) reach the live log; errors still come as JSON."""

    media_type = "text/event-stream"
    format = "sse"


class LogUnavailable(exceptions.APIException):
    """The cluster could not give the log now (pod not started, API server unreachable): try again later."""

    status_code = 503
    default_detail = "The cluster did not return the log; try again shortly."
    default_code = "log_unavailable"


SERVICE_ERRORS = (DjangoPermissionDenied, DjangoValidationError, services.IdempotencyConflict)


#: The services' (and the model's) field names, as the API's requests call them.
API_FIELD_NAMES = {"cpu_millicores": "cpu", "array_size": "size", "array_parallelism": "parallelism"}


def _raise_for(error: Exception):
    """A jobs.services error as the DRF error with the same words: 400 with field keys, 403, or 422."""
    if isinstance(error, DjangoPermissionDenied):
        raise exceptions.PermissionDenied(str(error))
    if isinstance(error, services.IdempotencyConflict):
        raise UnprocessableEntity(str(error))
    if isinstance(error, DjangoValidationError):
        if hasattr(error, "error_dict"):
            # The services name the model's field; the API calls it what the request called it.
            detail = {API_FIELD_NAMES.get(k, k): v for k, v in error.message_dict.items()}
        else:
            detail = {"detail": " ".join(error.messages)}
        raise serializers.ValidationError(detail)
    raise error


ERROR_RESPONSES = {
    400: OpenApiResponse(description="The request is invalid; the body names each field with what to change."),
    403: OpenApiResponse(description="Not signed in, a read-only token, or not allowed (the detail says which)."),
    404: OpenApiResponse(description="No such job among those you can see."),
}


@extend_schema_view(
    list=extend_schema(summary="List jobs", description="Jobs of your teams (admins: all), newest first."),
    retrieve=extend_schema(summary="One job, with why it waits"),
    create=extend_schema(
        summary="Submit a job",
        description="Queues a job against its team's quota. Send an `Idempotency-Key` header so a retried request "
        "returns the first job instead of a second one (200 instead of 201).",
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Up to 100 characters, unique per request you mean (per user).",
            )
        ],
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="The job an earlier request with this key created."),
            400: ERROR_RESPONSES[400],
            403: ERROR_RESPONSES[403],
            422: OpenApiResponse(description="The Idempotency-Key was used before with a different request."),
        },
    ),
)
class JobViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Job.objects.none()  # for the schema; get_queryset() filters per user
    serializer_class = JobSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = JobFilterSet
    ordering_fields = ["submitted_at", "state", "priority", "id"]

    def get_queryset(self):
        return access.visible_jobs(self.request.user).select_related("team", "owner", "resource_class")

    def create(self, request, *args, **kwargs):
        key = request.headers.get("Idempotency-Key", "")
        if len(key) > 100:
            raise serializers.ValidationError({"Idempotency-Key": ["At most 100 characters."]})
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        team = serializer.validated_data.get("team") or self._only_team(request.user)
        try:
            submission = services.submit_job(
                request.user, team, serializer.validated_data["resource_class"], serializer.submit_fields(), key
            )
        except SERVICE_ERRORS as error:
            _raise_for(error)
        data = self.get_serializer(submission.job).data
        return Response(data, status=status.HTTP_201_CREATED if submission.created else status.HTTP_200_OK)

    @staticmethod
    def _only_team(user) -> Team:
        teams = list(Team.objects.filter(memberships__user=user))
        if len(teams) != 1:
            names = ", ".join(t.slug for t in teams) or "none"
            raise serializers.ValidationError({"team": [f"Say which team the job is for (you belong to: {names})."]})
        return teams[0]

    @extend_schema(
        summary="Cancel a job",
        description="Owner, team lead or admin. A queued job leaves the queue; a running one is stopped.",
        request=None,
        responses={200: JobSerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object()
        try:
            job = services.cancel_job(request.user, job)
        except SERVICE_ERRORS as error:
            _raise_for(error)
        return Response(self.get_serializer(job).data)

    @extend_schema(
        summary="Submit the request again as a new job, with changes",
        description="For an ended job. The body may override any field a new job takes (preemptible, count, "
        "priority, image, command, env, labels, volumes, shm_mb, secret_env, secret_files, architecture, …); "
        "the result is checked exactly like a new job, and the fields left out keep the job's values. An empty "
        "body resubmits it unchanged. Repeating the same request "
        "returns the same new job (200) instead of making another.",
        request=JobSerializer(partial=True),
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="The job an earlier resubmission made."),
            **ERROR_RESPONSES,
        },
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def resubmit(self, request, pk=None):
        job = self.get_object()
        earlier = set(Job.objects.filter(resubmitted_from=job).values_list("pk", flat=True))
        overrides = request.data if hasattr(request.data, "keys") else None
        if overrides is None:
            raise serializers.ValidationError({"detail": "Send an object of the fields to change, or nothing."})
        changes, resource_class = None, None
        if overrides:
            if "team" in overrides and overrides["team"] != job.team.slug:
                raise serializers.ValidationError({"team": ["A resubmission stays in the job's team."]})
            checked = self.get_serializer(data=self.get_serializer().resubmit_data(job, overrides))
            checked.is_valid(raise_exception=True)
            changes, resource_class = checked.submit_fields(), checked.validated_data["resource_class"]
        try:
            new = services.resubmit_job(request.user, job, changes, resource_class)
        except SERVICE_ERRORS as error:
            _raise_for(error)
        created = new.pk not in earlier
        return Response(
            self.get_serializer(new).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )

    @extend_schema(
        summary="Change a queued job's priority",
        description="Owner, team lead or admin, up to the priority their role allows (members: the portal's "
        "member limit). Audited; the next admission cycle orders the queue by it.",
        request=PrioritySerializer,
        responses={200: JobSerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def priority(self, request, pk=None):
        job = self.get_object()
        body = PrioritySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = services.change_priority(request.user, job, body.validated_data["priority"])
        except SERVICE_ERRORS as error:
            _raise_for(error)
        return Response(self.get_serializer(job).data)

    @extend_schema(summary="The job's timeline", responses=JobEventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request, pk=None):
        job = self.get_object()
        return Response(JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(
        summary="The tail of the job's log",
        description=(
            "The pod's log while it exists; once the container ended, the log the portal kept (``kept`` true; "
            "``cut_bytes`` says how many bytes from its start were cut by the size cap)."
        ),
        parameters=[OpenApiParameter("tail", int, description="Lines from the end, 1 to 5000 (default 200).")],
        responses={
            200: inline_serializer(
                "JobLog",
                {
                    "pod": serializers.CharField(),
                    "log": serializers.CharField(),
                    "kept": serializers.BooleanField(),
                    "cut_bytes": serializers.IntegerField(),
                    "note": serializers.CharField(),
                },
            ),
            400: OpenApiResponse(description="tail is not a whole number from 1 to 5000."),
            404: OpenApiResponse(description="No such job, or it has no pod and no kept log; the detail says why."),
            503: OpenApiResponse(
                description="The cluster did not give the log now (container not started, or "
                "the API server unreachable); the detail says which."
            ),
        },
    )
    @action(detail=True, methods=["get"], filterset_class=None)
    def logs(self, request, pk=None):
        job = self.get_object()
        tail = _tail(request, default=200)
        view = logkeeping.log_view(job, list(job.logs.all()))
        if view.kept is not None:
            text = "".join(line + "\n" for line in view.kept.text.splitlines()[-tail:])
            return Response({"pod": view.kept.pod_name, "log": text, "kept": True,
                             "cut_bytes": view.kept.cut_bytes, "note": view.kept.note})  # fmt: skip
        if not job.pod_name:
            if job.state in ACTIVE_STATES or job.state == "queued":
                raise exceptions.NotFound(f"Job #{job.pk} has no pod yet ({job.get_state_display().lower()}).")
            raise exceptions.NotFound(view.note)
        try:
            text = get_backend().pod_logs(job.team.namespace, job.pod_name, tail_lines=tail)
        except NotFound:
            raise exceptions.NotFound(
                f"The pod {job.pod_name} is gone from the cluster and its log was not kept."
            ) from None
        except ClusterError as error:
            raise LogUnavailable(f"No log from pod {job.pod_name} now: {error}") from None
        return Response({"pod": job.pod_name, "log": text, "kept": False, "cut_bytes": 0, "note": ""})

    @extend_schema(
        summary="Download the job's whole log",
        description=(
            "A text/plain attachment: the kept log (a first line starting with # says what the size cap cut), or "
            "the running pod's whole log read from the cluster. ``pod`` picks the kept log of an earlier attempt."
        ),
        parameters=[OpenApiParameter("pod", str, description="One of the job's pods (default: the latest).")],
        responses={
            (200, "text/plain"): OpenApiTypes.STR,
            404: OpenApiResponse(description="No such job or pod, or no log to give; the detail says why."),
        },
    )
    @action(detail=True, methods=["get"], url_path="logs/download", filterset_class=None,
            renderer_classes=[JSONRenderer, PlainTextRenderer])  # fmt: skip
    def logs_download(self, request, pk=None):
        job = self.get_object()
        try:
            return livelog.download(job, request.query_params.get("pod") or None)
        except Http404 as error:
            raise exceptions.NotFound(str(error)) from None

    @extend_schema(
        summary="Follow the job's log live (server-sent events)",
        description=(
            "text/event-stream: the last ``tail`` lines, then each new line while the container runs; each "
            "event's id is the line's number. A stream lasts at most PORTAL_LOG_FOLLOW_SECONDS; reconnect with "
            "the Last-Event-ID header (EventSource does) or ``from`` to go on. Events named ``waiting`` (no log "
            "yet, retry) and ``end`` (no more will come: the container ended) carry a sentence."
        ),
        parameters=[
            OpenApiParameter("tail", int, description="Lines from the end to start with, 0 to 5000 (default 200)."),
            OpenApiParameter("from", int, description="Go on after this line number (as Last-Event-ID)."),
        ],
        responses={
            (200, "text/event-stream"): OpenApiTypes.STR,
            404: OpenApiResponse(description="No such job, or it has no pod and no kept log; the detail says why."),
        },
    )
    @action(detail=True, methods=["get"], url_path="logs/stream", filterset_class=None,
            renderer_classes=[JSONRenderer, EventStreamRenderer])  # fmt: skip
    def logs_stream(self, request, pk=None):
        job = self.get_object()
        tail = _tail(request, default=200, low=0)
        last = request.headers.get("Last-Event-ID") or request.query_params.get("from")
        if last is not None and not str(last).isdigit():
            raise serializers.ValidationError({"from": ["A line number: a whole number from 0."]})
        try:
            return livelog.follow(job, tail=tail, last_id=int(last) if last is not None else None)
        except Http404 as error:
            raise exceptions.NotFound(str(error)) from None


def _tail(request, *, default: int, low: int = 1) -> int:
    try:
        tail = int(request.query_params.get("tail", default))
    except ValueError:
        tail = -1
    if not low <= tail <= 5000:
        raise serializers.ValidationError({"tail": [f"A whole number from {low} to 5000."]})
    return tail


@extend_schema_view(
    list=extend_schema(summary="List job arrays", description="Arrays of your teams (admins: all), newest first."),
    retrieve=extend_schema(summary="One job array, with its tasks' summary"),
    create=extend_schema(
        summary="Submit a job array",
        description="A job's fields plus `size` (tasks) and `parallelism` (most admitted at once). Every task is a "
        "job of its own, checked and counted against quota like one; it sees its index in PORTAL_ARRAY_INDEX. "
        "Send an `Idempotency-Key` header so a retried request returns the first array (200).",
        request=JobArrayCreateSerializer,
        responses={
            201: JobArraySerializer,
            200: OpenApiResponse(JobArraySerializer, description="The array an earlier request with this key made."),
            400: ERROR_RESPONSES[400],
            403: ERROR_RESPONSES[403],
            422: OpenApiResponse(description="The Idempotency-Key was used before with a different request."),
        },
    ),
)
class JobArrayViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = JobArray.objects.none()
    serializer_class = JobArraySerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = None
    ordering_fields = ["created", "id"]

    def get_queryset(self):
        return access.visible_arrays(self.request.user).select_related("team", "owner").distinct()

    def create(self, request, *args, **kwargs):
        key = request.headers.get("Idempotency-Key", "")
        if len(key) > 100:
            raise serializers.ValidationError({"Idempotency-Key": ["At most 100 characters."]})
        body = JobArrayCreateSerializer(data=request.data, context=self.get_serializer_context())
        body.is_valid(raise_exception=True)
        data = body.validated_data
        team = data.get("team") or JobViewSet._only_team(request.user)
        try:
            submission = services.submit_array(
                request.user, team, data["resource_class"], body.submit_fields(), data["size"], data["parallelism"], key
            )
        except SERVICE_ERRORS as error:
            _raise_for(error)
        code = status.HTTP_201_CREATED if submission.created else status.HTTP_200_OK
        return Response(self.get_serializer(submission.array).data, status=code)

    @extend_schema(
        summary="Cancel every task of a job array",
        description="Owner, team lead or admin. Tasks that have not ended are cancelled; one audit record.",
        request=None,
        responses={200: JobArraySerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        array = self.get_object()
        try:
            services.cancel_array(request.user, array)
        except SERVICE_ERRORS as error:
            _raise_for(error)
        return Response(self.get_serializer(array).data)


@extend_schema_view(
    list=extend_schema(summary="List quotas", description="Your teams' quotas (admins: all) with units in use."),
    retrieve=extend_schema(summary="One quota"),
    create=extend_schema(summary="Grant a team a quota for a resource class (admins)"),
    update=extend_schema(summary="Change a quota (admins)"),
    partial_update=extend_schema(summary="Change a quota (admins)"),
    destroy=extend_schema(summary="Remove a quota (admins)"),
)
class QuotaViewSet(viewsets.ModelViewSet):
    queryset = Quota.objects.none()
    serializer_class = QuotaSerializer
    permission_classes = [IsAdminOrReadOnly]
    filterset_class = QuotaFilterSet
    ordering_fields = ["id", "guaranteed", "limit", "used", "updated"]

    def get_queryset(self):
        used = (
            Job.objects.filter(
                team=OuterRef("team"), resource_class=OuterRef("resource_class"), state__in=ACTIVE_STATES
            )
            .values("team")
            .annotate(total=Sum("count"))
            .values("total")
        )
        qs = Quota.objects.select_related("team", "resource_class", "updated_by").annotate(
            used=Coalesce(Subquery(used, output_field=IntegerField()), Value(0))
        )
        user = self.request.user
        if not user.is_staff:
            qs = qs.filter(Exists(Membership.objects.filter(user=user, team=OuterRef("team"))))
        return qs.order_by("team__slug", "resource_class__key")

    def _save(self, serializer, instance=None):
        data = serializer.validated_data
        team = data.get("team", getattr(instance, "team", None))
        rc = data.get("resource_class", getattr(instance, "resource_class", None))
        budget = data.get("monthly_gpu_hours", getattr(instance, "monthly_gpu_hours", None))
        try:
            quota = services.set_quota(
                self.request.user,
                team,
                rc,
                data.get("guaranteed", getattr(instance, "guaranteed", 0)),
                data.get("limit", getattr(instance, "limit", 0)),
                budget,
            )
        except SERVICE_ERRORS as error:
            _raise_for(error)
        return self.get_queryset().get(pk=quota.pk)

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
        services.delete_quota(request.user, quota)
        return Response(status=status.HTTP_204_NO_CONTENT)


class UsageView(APIView):
    """Showback for pipelines: what a team's jobs held and actually used, per UTC day."""

    @extend_schema(
        summary="A team's allocated and used GPU-hours per day",
        parameters=[
            OpenApiParameter("team", str, required=True, description="Team slug (yours; admins: any)."),
            OpenApiParameter("start", OpenApiTypes.DATE, required=True, description="First day (UTC)."),
            OpenApiParameter("end", OpenApiTypes.DATE, required=True, description="Last day (UTC), inclusive."),
            OpenApiParameter("output", str, enum=["json", "csv"], description="csv: the same rows as CSV."),
        ],
        responses={200: OpenApiTypes.OBJECT},
        tags=["telemetry"],
    )
    def get(self, request):
        slug = request.query_params.get("team", "")
        if not slug:
            raise serializers.ValidationError({"team": ["Required: the team's slug."]})
        teams = Team.objects.all() if request.user.is_staff else Team.objects.filter(memberships__user=request.user)
        team = teams.filter(slug=slug).first()
        if team is None:
            raise exceptions.NotFound(f"No team {slug!r} that you belong to.")
        form = UsageRangeForm(request.query_params)
        if not form.is_valid():
            raise serializers.ValidationError(
                {("range" if k == "__all__" else k): [str(e) for e in v] for k, v in form.errors.items()}
            )
        start, end = form.cleaned_data["start"], form.cleaned_data["end"]
        rows = team_usage_rows(team, start, end, timezone.now())
        output = request.query_params.get("output", "json")
        if output not in ("json", "csv"):
            raise serializers.ValidationError({"output": ["json or csv."]})
        if output == "csv":
            response = HttpResponse(content_type="text/csv; charset=utf-8")
            response["Content-Disposition"] = f'attachment; filename="gpu-usage-{team.slug}-{start}-{end}.csv"'
            write_usage_csv(response, rows)
            return response
        return Response(
            {
                "team": team.slug,
                "start": start,
                "end": end,
                "days": [
                    {
                        "date": r["day"],
                        "allocated_gpu_hours": r["allocated"],
                        "used_gpu_hours": r["used"],
                        "efficiency_percent": r["efficiency"],
                    }  # fmt: skip
                    for r in rows
                ],
            }
        )


NOTEBOOK_ERRORS = {**ERROR_RESPONSES, 404: OpenApiResponse(description="No such notebook among those you can see.")}


@extend_schema_view(
    list=extend_schema(summary="List notebooks", description="Notebooks of your teams (admins: all)."),
    retrieve=extend_schema(summary="One notebook, with its address and the time left under each limit"),
    create=extend_schema(
        summary="Launch a notebook",
        description="Creates the notebook and its first session (queued against the team's quota). The answer "
        "carries `token` once; the portal keeps only its hash.",
        responses={201: NotebookSerializer, 400: ERROR_RESPONSES[400], 403: ERROR_RESPONSES[403]},
    ),
)
class NotebookViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Notebook.objects.none()
    serializer_class = NotebookSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = NotebookFilterSet
    ordering_fields = ["created", "id", "name"]

    def get_queryset(self):
        return (
            access.visible_notebooks(self.request.user)
            .select_related("team", "owner", "resource_class", "session")
            .distinct()
        )

    def _with_token(self, session, code):
        data = dict(self.get_serializer(session.notebook).data)
        data["token"] = session.token
        return Response(data, status=code)

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team = data.get("team") or JobViewSet._only_team(request.user)
        fields = {
            "name": data["name"], "image": data.get("image"), "count": data["count"],
            "cpu_millicores": data["cpu_millicores"], "memory_mb": data["memory_mb"],
            "volume_gib": data.get("volume_gib"), "ttl_seconds": data.get("ttl_seconds"),
            "idle_timeout_seconds": data.get("idle_timeout_seconds"), "env": data.get("env") or [],
            "volumes": data.get("volumes") or [],
        }  # fmt: skip
        try:
            session = notebooks.launch_notebook(request.user, team, data["resource_class"], fields)
        except SERVICE_ERRORS as error:
            _raise_for(error)
        return self._with_token(session, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Extend a notebook's maximum age",
        description="Owner, team lead or admin. Adds `seconds` (default: the operator's extension) up to the team's "
        "maximum age counted from the session's start; counts as activity for the idle limit.",
        request=NotebookExtendSerializer,
        responses={200: NotebookSerializer, **NOTEBOOK_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def extend(self, request, pk=None):
        notebook = self.get_object()
        body = NotebookExtendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            notebook = notebooks.extend_notebook(request.user, notebook, body.validated_data.get("seconds"))
        except SERVICE_ERRORS as error:
            _raise_for(error)
        return Response(self.get_serializer(self.get_queryset().get(pk=notebook.pk)).data)

    @extend_schema(
        summary="Stop a notebook",
        description="Owner, team lead or admin. Deletes the server's workload, frees the quota, keeps the volume.",
        request=None,
        responses={200: NotebookSerializer, **NOTEBOOK_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        notebook = self.get_object()
        if not access.can_manage_notebook(request.user, notebook):
            raise exceptions.PermissionDenied("Only the notebook's owner, a lead of its team or an admin can stop it.")
        reason = StopReason.USER if notebook.owner_id == request.user.pk else StopReason.ADMIN
        if not notebooks.stop_notebook(request.user, notebook, reason, get_backend()):
            raise serializers.ValidationError({"detail": f"Notebook {notebook.name} is already stopped."})
        return Response(self.get_serializer(self.get_queryset().get(pk=notebook.pk)).data)

    @extend_schema(
        summary="Start a stopped notebook again",
        description="Owner, team lead or admin. A new session on the same home volume; the answer carries a new "
        "`token`, once.",
        request=None,
        responses={201: NotebookSerializer, **NOTEBOOK_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        notebook = self.get_object()
        try:
            session = notebooks.start_notebook(request.user, notebook)
        except SERVICE_ERRORS as error:
            _raise_for(error)
        return self._with_token(session, status.HTTP_201_CREATED)


@extend_schema_view(
    list=extend_schema(
        summary="List team volumes",
        description="The PersistentVolumeClaims in your teams' namespaces (admins: all), as the volume inventory "
        "last saw them, with what mounts each now. These are what a job's or notebook's volumes may name.",
    ),
    retrieve=extend_schema(summary="One team volume"),
)
class TeamVolumeViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = TeamVolume.objects.none()
    serializer_class = TeamVolumeSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = TeamVolumeFilterSet

    def get_queryset(self):
        volumes = TeamVolume.objects.select_related("team", "dataset")
        if not self.request.user.is_staff:
            volumes = volumes.filter(team__memberships__user=self.request.user)
        return volumes

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
class DatasetViewSet(viewsets.ModelViewSet):
    queryset = Dataset.objects.none()
    serializer_class = DatasetSerializer
    permission_classes = [IsAdminOrReadOnly]

    def get_queryset(self):
        datasets = Dataset.objects.prefetch_related("teams")
        if not self.request.user.is_staff:
            datasets = datasets.filter(teams__memberships__user=self.request.user).distinct()
        return datasets

    def _save(self, serializer, instance=None):
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        teams = data.pop("teams", None)
        if instance is not None:
            data = {f: data.get(f, getattr(instance, f)) for f in volumes.AUDIT_FIELDS}
            teams = list(instance.teams.all()) if teams is None else teams
        try:
            dataset = volumes.save_dataset(self.request.user, data, teams or [], instance)
        except SERVICE_ERRORS as error:
            _raise_for(error)
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
            _raise_for(error)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ClusterUnavailableError(exceptions.APIException):
    status_code = 503
    default_detail = "The cluster did not store the secret; nothing was changed. Try again shortly."
    default_code = "cluster_unavailable"


def _secret_call(func, *args, **kwargs):
    """Run a jobs.secrets service, answering its errors as the API does (400/403, or 503 from the cluster)."""
    try:
        return func(*args, **kwargs)
    except secrets.ClusterUnavailable as error:
        raise ClusterUnavailableError(str(error)) from None
    except SERVICE_ERRORS as error:
        _raise_for(error)


def _teams_seen(queryset, user):
    if user.is_staff:
        return queryset
    return queryset.filter(Exists(Membership.objects.filter(user=user, team=OuterRef("team"))))


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
class TeamSecretViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = TeamSecret.objects.none()
    serializer_class = TeamSecretSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = TeamSecretFilterSet
    ordering_fields = ["name", "created_at", "rotated_at", "id"]

    def get_queryset(self):
        qs = TeamSecret.objects.select_related("team", "created_by", "rotated_by")
        return _teams_seen(qs, self.request.user).order_by("team__slug", "name")

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
class RegistryCredentialViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = RegistryCredential.objects.none()
    serializer_class = RegistryCredentialSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    filterset_class = RegistryCredentialFilterSet
    ordering_fields = ["registry", "created_at", "rotated_at", "id"]

    def get_queryset(self):
        qs = RegistryCredential.objects.select_related("team", "created_by", "rotated_by")
        return _teams_seen(qs, self.request.user).order_by("team__slug", "registry")

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
