"""The node agent's door: ``POST /api/v1/telemetry/samples/`` with ``Authorization: Bearer gpa_…``.

A node token is bound to one node of one cluster of the fleet (node names are unique per cluster only). A batch
that names another node, or another cluster (the agent's ``PORTAL_AGENT_CLUSTER``: a DaemonSet applied to the
wrong cluster, or a Secret copied from another), is refused. A node token may write its own node's samples only:
for its node's GPUs, never a GPU UUID the inventory knows on another node, an index the node does not have, or an
index known under another UUID. A batch is all or nothing: one bad sample refuses the batch with an error naming
it (``samples[3].util_pct``), so an agent with a bug does not half-write data.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import authentication, exceptions, serializers, status
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.models import Team
from core.api.bounds import MAX_ID
from gpus.models import GPU, Cluster, Node

from .. import samples as sample_store
from .. import seams
from ..choices import TelemetrySource
from ..models import NodeAgentToken

#: Bounds no real reading reaches; a value outside them is a bug or an attack, not a measurement.
MAX_MEMORY_MB = 2_000_000
MAX_POWER_W = 3000
TEMP_RANGE = (-40, 150)


class AgentPrincipal:
    """request.user for a node agent: authenticated, but nobody's account."""

    is_authenticated = True
    is_staff = False
    is_active = True

    def __init__(self, token: NodeAgentToken) -> None:
        self.token = token
        self.username = f"agent:{token.cluster.name}/{token.node_name}"

    def __str__(self) -> str:
        return self.username


class NodeAgentTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != b"bearer":
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Send the header as 'Authorization: Bearer gpa_<node token>'.")
        try:
            raw = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("The token contains characters that are not allowed.") from exc
        token = NodeAgentToken.find(raw)
        if token is None:
            raise exceptions.AuthenticationFailed(
                "This node token is unknown or revoked. An admin issues one with "
                "'manage.py issue_agent_token <node>' (or in Admin › Node agent tokens)."
            )
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > timedelta(minutes=1):
            NodeAgentToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return AgentPrincipal(token), token

    def authenticate_header(self, request):
        return self.keyword


class IsNodeAgent(BasePermission):
    message = "Only a node agent token (gpa_…) may post samples."

    def has_permission(self, request, view):
        return isinstance(request.auth, NodeAgentToken)


class ProcessSerializer(serializers.Serializer):
    pid = serializers.IntegerField(min_value=0, max_value=2**31)
    used_mb = serializers.IntegerField(min_value=0, max_value=MAX_MEMORY_MB, allow_null=True, required=False)


class SampleSerializer(serializers.Serializer):
    ts = serializers.DateTimeField()
    gpu_uuid = serializers.RegexField(
        r"^GPU-[0-9A-Fa-f-]{8,60}$", max_length=64, error_messages={"invalid": "Not a GPU UUID (GPU-xxxxxxxx-…)."}
    )
    gpu_index = serializers.IntegerField(min_value=0, max_value=63, allow_null=True, required=False)
    mig_uuid = serializers.RegexField(
        r"^MIG-[0-9A-Za-z/-]{8,80}$", allow_null=True, required=False, error_messages={"invalid": "Not a MIG UUID."}
    )
    gpu_instance_id = serializers.IntegerField(min_value=0, max_value=255, allow_null=True, required=False)
    mig_profile = serializers.RegexField(
        r"^[0-9a-z.+]{1,30}$", allow_null=True, required=False, error_messages={"invalid": "Not a MIG profile."}
    )
    util_pct = serializers.FloatField(min_value=0, max_value=100, allow_null=True, required=False)
    mem_used_mb = serializers.IntegerField(min_value=0, max_value=MAX_MEMORY_MB, allow_null=True, required=False)
    mem_total_mb = serializers.IntegerField(min_value=1, max_value=MAX_MEMORY_MB, allow_null=True, required=False)
    power_w = serializers.FloatField(min_value=0, max_value=MAX_POWER_W, allow_null=True, required=False)
    energy_mj = serializers.IntegerField(
        min_value=0, max_value=2**63 - 1, allow_null=True, required=False,
        help_text="The GPU's energy counter, millijoules since the driver loaded (NVML's total energy consumption; "
        "whole GPUs only).",
    )  # fmt: skip
    temp_c = serializers.FloatField(min_value=TEMP_RANGE[0], max_value=TEMP_RANGE[1], allow_null=True, required=False)
    lost = serializers.BooleanField(default=False)
    processes = ProcessSerializer(many=True, required=False, max_length=1000)

    def validate(self, attrs):
        used, total = attrs.get("mem_used_mb"), attrs.get("mem_total_mb")
        if used is not None and total is not None and used > total:
            raise serializers.ValidationError({"mem_used_mb": f"{used} MB used is more than the {total} MB total."})
        if attrs.get("mig_uuid") and attrs.get("gpu_instance_id") is None:
            raise serializers.ValidationError({"gpu_instance_id": "A MIG device sample needs its GPU instance id."})
        return attrs


class BatchSerializer(serializers.Serializer):
    node = serializers.CharField(max_length=253)
    cluster = serializers.CharField(
        max_length=63, required=False, allow_blank=True,
        help_text="The cluster the node is in (the agent's PORTAL_AGENT_CLUSTER); checked against the token's.",
    )  # fmt: skip
    sent_at = serializers.DateTimeField()
    agent = serializers.CharField(max_length=100, required=False, allow_blank=True)
    samples = SampleSerializer(many=True, allow_empty=False)


def _flatten(errors, prefix: str = "") -> dict[str, list[str]]:
    """DRF's nested errors as {"samples[3].util_pct": [...]}: one line per problem, saying where it is."""
    out: dict[str, list[str]] = {}
    if isinstance(errors, dict):
        for key, value in errors.items():
            name = f"{prefix}.{key}" if prefix and key != "non_field_errors" else (prefix or key)
            out.update(_flatten(value, name))
    elif isinstance(errors, list) and errors and all(isinstance(e, dict | list) for e in errors):
        for index, value in enumerate(errors):
            if value:
                out.update(_flatten(value, f"{prefix}[{index}]"))
    else:
        out[prefix or "detail"] = [str(e) for e in (errors if isinstance(errors, list) else [errors])]
    return out


class TelemetryIngestView(APIView):
    authentication_classes = [NodeAgentTokenAuthentication]
    permission_classes = [IsNodeAgent]

    @extend_schema(
        summary="Post a node agent's samples",
        description=(
            "One batch of GPU and MIG device readings from one node's agent, authenticated with that node's "
            "token. All-or-nothing: any invalid sample refuses the batch (400, naming the sample and field). "
            "403 if the token belongs to another node or another cluster, 413 above the batch limit."
        ),
        request=BatchSerializer,
        responses={202: OpenApiResponse(description='{"accepted": n, "lost": k}')},
        tags=["telemetry"],
    )
    def post(self, request):
        token: NodeAgentToken = request.auth
        samples = request.data.get("samples") if isinstance(request.data, dict) else None
        limit = settings.PORTAL_TELEMETRY_MAX_BATCH
        if isinstance(samples, list) and len(samples) > limit:
            return Response(
                {"detail": f"{len(samples)} samples in one batch; send at most {limit} per request."},
                status=status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
            )
        node = request.data.get("node") if isinstance(request.data, dict) else None
        cluster = request.data.get("cluster") if isinstance(request.data, dict) else None
        if isinstance(cluster, str) and cluster and cluster != token.cluster.name:
            return Response(
                {
                    "detail": f"This token belongs to node {token.node_name!r} of cluster {token.cluster.name!r}; "
                    f"it cannot write data for cluster {cluster!r}. Give this cluster's agents the tokens issued "
                    f"for its nodes (issue_agent_token --cluster {cluster} <node>)."
                },
                status=status.HTTP_403_FORBIDDEN,
            )
        if isinstance(node, str) and node and node != token.node_name:
            return Response(
                {
                    "detail": f"This token belongs to node {token.node_name!r} of cluster {token.cluster.name!r}; "
                    f"it cannot write data for {node!r}."
                },
                status=status.HTTP_403_FORBIDDEN,
            )
        batch = BatchSerializer(data=request.data)
        if not batch.is_valid():
            return Response(_flatten(batch.errors), status=status.HTTP_400_BAD_REQUEST)
        data = batch.validated_data
        now = timezone.now()
        skew = timedelta(seconds=settings.PORTAL_TELEMETRY_MAX_SKEW)
        if abs(data["sent_at"] - now) > skew:
            return Response(
                {
                    "sent_at": [
                        f"The agent's clock ({data['sent_at']:%Y-%m-%dT%H:%M:%SZ}) is "
                        f"{abs(data['sent_at'] - now).total_seconds():.0f} s away from the portal's "
                        f"({now:%Y-%m-%dT%H:%M:%SZ}); the limit is {skew.total_seconds():.0f} s. Fix the node's time "
                        "sync (NTP/chrony)."
                    ]
                },
                status=status.HTTP_400_BAD_REQUEST,
            )
        oldest = now - timedelta(seconds=settings.PORTAL_TELEMETRY_MAX_AGE)
        errors: dict[str, list[str]] = {}
        seen: set[tuple] = set()
        for index, sample in enumerate(data["samples"]):
            where = f"samples[{index}]"
            if sample["ts"] > data["sent_at"] + skew:
                errors[f"{where}.ts"] = ["Taken after the batch was sent: the agent's clock is inconsistent."]
            elif sample["ts"] < oldest:
                errors[f"{where}.ts"] = [
                    f"Older than {settings.PORTAL_TELEMETRY_MAX_AGE // 3600} h; samples this old are not accepted."
                ]
            key = (sample["gpu_uuid"], sample.get("gpu_instance_id"), sample["ts"])
            if key in seen:
                errors[f"{where}"] = ["The same GPU (or MIG instance) appears twice with the same timestamp."]
            seen.add(key)
        # Every sample belongs to the token's node: its GPUs, as the inventory knows them (audit finding 3).
        errors.update(sample_store.foreign_samples(token.cluster_id, token.node_name, data["samples"]))
        if errors:
            return Response(errors, status=status.HTTP_400_BAD_REQUEST)
        readings = [
            sample_store.Reading(
                ts=s["ts"],
                node_name=token.node_name,
                gpu_uuid=s["gpu_uuid"],
                gpu_index=s.get("gpu_index"),
                gpu_instance_id=s.get("gpu_instance_id"),
                mig_profile=s.get("mig_profile") or "",
                util_pct=s.get("util_pct"),
                mem_used_mb=s.get("mem_used_mb"),
                mem_total_mb=s.get("mem_total_mb"),
                power_w=s.get("power_w"),
                energy_mj=s.get("energy_mj"),
                temp_c=s.get("temp_c"),
            )
            for s in data["samples"]
            if not s["lost"]
        ]
        accepted = sample_store.store(readings, TelemetrySource.AGENT, token.cluster_id)
        return Response(
            {"accepted": accepted, "lost": len(data["samples"]) - len(readings)}, status=status.HTTP_202_ACCEPTED
        )


SCOPES = ("cluster", "node", "gpu", "job", "team")
#: scope -> the parameter that names what it charts.
SCOPE_TARGET = {"node": "node", "gpu": "gpu", "job": "job", "team": "team"}


class UtilisationQuerySerializer(serializers.Serializer):
    """The utilisation query string: every problem at once, each a 400 naming its parameter (a job id in Unicode
    digits such as "²" included: ``str.isdigit()`` takes those, ``int()`` does not)."""

    scope = serializers.ChoiceField(
        choices=SCOPES, default="cluster", error_messages={"invalid_choice": f"One of {', '.join(SCOPES)}."}
    )
    range = serializers.ChoiceField(
        choices=list(sample_store.RANGES),
        default="6h",
        error_messages={"invalid_choice": f"One of {', '.join(sample_store.RANGES)}."},
    )
    node = serializers.CharField(required=False, help_text="The node's name (scope=node).")
    gpu = serializers.CharField(required=False, help_text="The GPU's UUID (scope=gpu).")
    gpu_instance_id = serializers.IntegerField(
        required=False, min_value=0, max_value=255,
        error_messages={"invalid": "A whole number (the MIG GPU instance id), in ASCII digits."},
        help_text="A MIG instance of the GPU (scope=gpu); left out: the whole GPU.",
    )  # fmt: skip
    job = serializers.IntegerField(
        required=False, min_value=1, max_value=MAX_ID,
        error_messages={"invalid": "A job id: a whole number in ASCII digits, e.g. 17."},
        help_text="The job's id (scope=job).",
    )  # fmt: skip
    team = serializers.CharField(required=False, help_text="The team's slug (scope=team).")
    cluster = serializers.CharField(
        required=False, max_length=63,
        help_text="Only the GPUs of this cluster of the fleet (any scope); with scope=node, the node's cluster where "
        "several clusters have a node of that name.",
    )  # fmt: skip

    def validate_cluster(self, value: str) -> Cluster:
        found = Cluster.objects.filter(name=value).first()
        if found is None:
            names = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
            raise serializers.ValidationError(f"No cluster {value!r}; the fleet has: {names}.")
        return found

    def to_internal_value(self, data):
        # The parameter the scope needs is named with the other problems, not after them.
        try:
            values, errors = super().to_internal_value(data), {}
        except serializers.ValidationError as error:
            values, errors = {}, dict(error.detail)
        scope = data.get("scope") or "cluster"
        target = SCOPE_TARGET.get(scope)
        if target and target not in errors and data.get(target) in (None, ""):
            errors[target] = [f"Required with scope={scope}."]
        if errors:
            raise serializers.ValidationError(errors)
        return values


class UtilisationView(APIView):
    """Utilisation series for charts and pipelines."""

    @extend_schema(
        summary="Utilisation over time",
        description=(
            "`scope` is one of cluster (every GPU you can see), node (`node=<name>`), gpu (`gpu=<UUID>`, optional "
            "`gpu_instance_id`), job (`job=<id>`) or team (`team=<slug>`); `cluster=<name>` keeps the GPUs of one "
            "cluster of the fleet, in any scope. `range` is one of 1h, 6h, 24h, 7d, 30d (default 6h). "
            "Each point is the weighted mean utilisation (%) of the GPUs in scope over `step` seconds "
            "(a MIG instance weighs its share of the GPU). You see only nodes, jobs and teams you may see."
        ),
        tags=["telemetry"],
        parameters=[UtilisationQuerySerializer],
        responses={200: OpenApiResponse(description='{"scope", "range", "step", "points": [{"t", "util", ...}]}')},
    )
    def get(self, request):
        query = UtilisationQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        asked = query.validated_data
        scope, rng = asked["scope"], asked["range"]
        cluster = asked.get("cluster")
        nodes = Node.objects.visible_to(request.user)
        if cluster is not None:
            nodes = nodes.filter(cluster=cluster)
        where = None
        if scope == "cluster":
            filters = {"gpu_instance_id__isnull": True}
            if not request.user.is_staff:
                where = sample_store.nodes_q(nodes.values_list("cluster_id", "name"))
        elif scope == "node":
            name = asked["node"]
            try:
                node = nodes.named(name, cluster.name if cluster is not None else "")
            except Node.DoesNotExist:
                raise exceptions.NotFound(f"No node {name!r} that you can see.") from None
            except Node.MultipleObjectsReturned as error:
                raise exceptions.ValidationError({"cluster": [str(error)]}) from None
            filters = {"cluster_id": node.cluster_id, "node_name": name, "gpu_instance_id__isnull": True}
        elif scope == "gpu":
            uuid = asked["gpu"]
            gpu = GPU.objects.filter(uuid=uuid, node__in=nodes).select_related("node").first()
            if gpu is None:
                raise exceptions.NotFound(f"No GPU {uuid!r} on a node you can see.")
            # The GPU's samples are those its own node reported (audit finding 3).
            filters = {"gpu_uuid": uuid, "cluster_id": gpu.node.cluster_id, "node_name": gpu.node.name}
            gi = asked.get("gpu_instance_id")
            if gi is None:
                filters["gpu_instance_id__isnull"] = True
            else:
                filters["gpu_instance_id"] = gi
        elif scope == "job":
            job_id = asked["job"]
            if not seams.workload_visible(request.user, job_id):
                raise exceptions.NotFound(f"No job {job_id} that you can see.")
            filters = {"job_id": job_id}
        else:
            slug = asked["team"]
            teams = Team.objects.all() if request.user.is_staff else Team.objects.filter(memberships__user=request.user)
            team = teams.filter(slug=slug).first()
            if team is None:
                raise exceptions.NotFound(f"No team {slug!r} that you belong to.")
            filters = {"team_id": team.pk}
        if cluster is not None:
            filters["cluster_id"] = cluster.pk
        now = timezone.now()
        step, points = sample_store.series(filters, now - sample_store.RANGES[rng], now, where=where)
        return Response(
            {
                "scope": scope,
                **({"cluster": cluster.name} if cluster is not None else {}),
                "range": rng,
                "step": step,
                "points": [
                    {
                        "t": p.t.isoformat().replace("+00:00", "Z"),
                        "util": p.util,
                        "mem_used_mb": p.mem_used_mb,
                        "power_w": p.power_w,
                    }  # fmt: skip
                    for p in points
                ],
            }
        )
