from collections.abc import Mapping

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Count, Prefetch, Q, Sum
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response

from accounts.permissions import IsAdminOrReadOnly, IsAuthenticatedWithTokenScope
from core.api.strict_body import unknown_field_errors

from .. import fleet
from ..class_admin import update_class
from ..filtersets import (
    GPUFilterSet,
    MigPartitionFilterSet,
    NodeConfigOperationFilterSet,
    NodeFilterSet,
    ResourceClassFilterSet,
)
from ..models import GPU, Cluster, MigPartition, Node, NodeConfigOperation, ResourceClass
from ..node_pools import choose_mig_profiles, pool_rows
from ..nodeconfig import request_operation, request_revert
from ..nodeconfig_control import abort_operation, drain_preview, force_drain
from ..nodeconfig_plan import ConfigRefused, plan_from_request
from ..smoketest import SmokeTestRefused, request_smoke_test
from .serializers import (
    ClusterInputSerializer,
    ClusterSerializer,
    GPUSerializer,
    MigPartitionSerializer,
    NodeConfigOperationSerializer,
    NodeConfigPlanSerializer,
    NodeConfigRequestSerializer,
    NodeDetailSerializer,
    NodeSerializer,
    NodeSmokeTestSerializer,
    PoolMigProfilesInputSerializer,
    PoolMigProfilesSerializer,
    ReasonSerializer,
    ResourceClassSerializer,
)


class IsPortalAdmin(IsAuthenticatedWithTokenScope):
    """Only portal admins (staff), for reading as well as writing."""

    message = "Only portal admins can do this (node reconfigurations and smoke tests)."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and bool(request.user.is_staff)


class IsPoolAdmin(IsPortalAdmin):
    message = "Only portal admins can see and change which MIG profiles teams may claim in a node pool."


@extend_schema_view(
    list=extend_schema(summary="List nodes", description="Nodes you may use (admins: all), with GPU facts."),
    retrieve=extend_schema(summary="One node with its GPUs, MIG partitions, labels, taints and diagnosis"),
)
@extend_schema(tags=["inventory"])
class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Node.objects.none()  # for the schema; get_queryset() filters per user
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9.\-]+"
    lookup_value_converter = "str"  # the API's router uses path converters (core.api.routers.IdRouter)
    filterset_class = NodeFilterSet
    ordering_fields = ["name", "product", "health", "last_seen", "gpu_count"]

    def get_queryset(self):
        qs = Node.objects.visible_to(self.request.user).select_related("team", "cluster")
        if self.action == "retrieve":
            qs = qs.prefetch_related(
                Prefetch("gpus", queryset=GPU.objects.prefetch_related("mig_partitions__gpu__node__cluster"))
            )
        return qs

    def get_serializer_class(self):
        return NodeDetailSerializer if self.action == "retrieve" else NodeSerializer

    def get_object(self):
        """By name, and ``?cluster=`` where several clusters have a node of that name (400 naming them)."""
        try:
            node = self.get_queryset().named(self.kwargs["name"], self.request.query_params.get("cluster", ""))
        except Node.DoesNotExist as error:
            raise NotFound(str(error)) from error
        except Node.MultipleObjectsReturned as error:
            raise ValidationError({"cluster": [str(error)]}) from error
        self.check_object_permissions(self.request, node)
        return node

    @extend_schema(
        summary="Node smoke tests: run one (POST, admins) or list the node's latest runs (GET, admins)",
        description="GET answers the node's 20 latest runs, newest first, as a plain list (not paginated).",
        request=None,
        responses={200: NodeSmokeTestSerializer(many=True), 201: NodeSmokeTestSerializer},
    )
    # The latest runs as a plain list, as the schema says: no pages, and none of the node list's filters or ordering.
    @action(detail=True, methods=["get", "post"], url_path="smoke-tests", permission_classes=[IsPortalAdmin],
            pagination_class=None, filter_backends=[])  # fmt: skip
    def smoke_tests(self, request, name=None):
        node = self.get_object()
        if request.method == "POST":
            try:
                run = request_smoke_test(request.user, node)
            except SmokeTestRefused as refused:
                raise ValidationError({"detail": refused.errors}) from None
            return Response(NodeSmokeTestSerializer(run).data, status=status.HTTP_201_CREATED)
        runs = node.smoke_tests.select_related("node__cluster", "requested_by")[:20]
        return Response(NodeSmokeTestSerializer(runs, many=True).data)


@extend_schema_view(list=extend_schema(summary="List GPUs"), retrieve=extend_schema(summary="One GPU"))
@extend_schema(tags=["inventory"])
class GPUViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = GPU.objects.none()
    serializer_class = GPUSerializer
    filterset_class = GPUFilterSet
    ordering_fields = ["node__name", "index", "product"]

    def get_queryset(self):
        nodes = Node.objects.visible_to(self.request.user)
        return (
            GPU.objects.filter(node__in=nodes)
            .select_related("node__cluster")
            .prefetch_related("mig_partitions__gpu__node__cluster")
            .order_by("node__name", "index")
        )


@extend_schema_view(list=extend_schema(summary="List MIG partitions"), retrieve=extend_schema(summary="One partition"))
@extend_schema(tags=["inventory"])
class MigPartitionViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = MigPartition.objects.none()
    serializer_class = MigPartitionSerializer
    filterset_class = MigPartitionFilterSet

    def get_queryset(self):
        nodes = Node.objects.visible_to(self.request.user)
        return (
            MigPartition.objects.filter(gpu__node__in=nodes)
            .select_related("gpu__node__cluster")
            .order_by("gpu__node__name", "gpu__index", "start")
        )


@extend_schema_view(
    list=extend_schema(summary="List resource classes", description="What you can request, with capacity figures."),
    retrieve=extend_schema(summary="One resource class"),
    partial_update=extend_schema(summary="Alias, describe or hide a class (admins)"),
    update=extend_schema(summary="Alias, describe or hide a class (admins)"),
)
@extend_schema(tags=["inventory"])
class ResourceClassViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = ResourceClassSerializer
    filterset_class = ResourceClassFilterSet
    permission_classes = [IsAdminOrReadOnly]
    ordering_fields = ["kind", "product", "free", "total"]

    def get_queryset(self):
        qs = ResourceClass.objects.select_related("cluster")
        if not self.request.user.is_staff:
            qs = qs.filter(hidden=False)
        return qs

    def perform_update(self, serializer):
        # The same change, with the same audit verb, as the admins' page (gpus.class_admin).
        try:
            serializer.instance = update_class(self.request.user, serializer.instance, **serializer.validated_data)
        except DjangoValidationError as error:
            raise ValidationError(error.message_dict) from error


@extend_schema_view(
    list=extend_schema(summary="List node reconfigurations (admins)"),
    retrieve=extend_schema(summary="One node reconfiguration with its progress log (admins)"),
)
@extend_schema(tags=["inventory"])
class NodeConfigOperationViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """MIG layouts and time-slicing, applied as background operations: the node is drained, the config written
    and labelled, the GPU Operator followed and the inventory refreshed."""

    serializer_class = NodeConfigOperationSerializer
    permission_classes = [IsPortalAdmin]
    filterset_class = NodeConfigOperationFilterSet
    ordering_fields = ["created", "state"]

    def get_queryset(self):
        return NodeConfigOperation.objects.select_related("node__cluster", "requested_by").order_by("-created")

    @extend_schema(
        summary="Request a MIG layout or time-slicing for a node (admins)",
        request=NodeConfigRequestSerializer,
        responses={201: NodeConfigOperationSerializer, 200: NodeConfigPlanSerializer},
        examples=[
            OpenApiExample("MIG preset", value={"node": "gpu-a100-mig-01", "kind": "mig", "preset": "all-1g.10gb"}),
            OpenApiExample(
                "Custom MIG layout",
                value={
                    "node": "gpu-a100-40g-01",
                    "kind": "mig",
                    "gpus": ["3g.20gb@4, 2g.10gb@2, 1g.5gb@0, 1g.5gb@1", "off", "7g.40gb", "off"],
                },
            ),  # fmt: skip
            OpenApiExample("Time-slicing", value={"node": "gpu-a10-01", "kind": "time-slicing", "replicas": 4}),
            OpenApiExample(
                "MPS", value={"node": "gpu-l40s-mps-01", "kind": "time-slicing", "sharing": "mps", "replicas": 4}
            ),
        ],
    )
    def create(self, request, *args, **kwargs):
        body = NodeConfigRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        node = data["node"]
        try:
            plan = plan_from_request(
                node,
                data["kind"],
                preset=data.get("preset", ""),
                gpus=data.get("gpus"),
                replicas=data.get("replicas"),
                rename=data.get("rename", False),
                mps=data.get("sharing") == "mps",
            )
            if data.get("dry_run"):
                if problem := node.operated_here():
                    raise ConfigRefused([problem])
                plan.drain = drain_preview(fleet.backend_of(node.cluster), node)
                return Response(NodeConfigPlanSerializer(plan).data, status=status.HTTP_200_OK)
            op = request_operation(request.user, node, plan)
        except ConfigRefused as refused:
            raise ValidationError({"layout": refused.errors}) from None
        out = NodeConfigOperationSerializer(op, context={"request": request})
        # A plain str: a WSGI server may refuse DRF's Hyperlink (a str subclass) as a header value (wsgiref: a 500).
        return Response(out.data, status=status.HTTP_201_CREATED, headers={"Location": str(out.data["url"])})

    @extend_schema(summary="Abort a pending or draining reconfiguration; nothing was written to the node (admins)",
                   request=ReasonSerializer, responses={200: NodeConfigOperationSerializer})  # fmt: skip
    @action(detail=True, methods=["post"])
    def abort(self, request, pk=None):
        return self._with_reason(request, abort_operation, "detail")

    @extend_schema(
        summary="Force a drain: stop the portal's work on the node now, telling its owners the reason (admins)",
        request=ReasonSerializer,
        responses={200: NodeConfigOperationSerializer},
    )
    @action(detail=True, methods=["post"])
    def force(self, request, pk=None):
        return self._with_reason(request, force_drain, "reason")

    def _with_reason(self, request, act, error_field: str) -> Response:
        """abort / force: ``act(user, op, reason)``; a refusal is a 400 under ``error_field``."""
        op = self.get_object()
        body = ReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            op = act(request.user, op, body.validated_data["reason"])
        except ConfigRefused as refused:
            raise ValidationError({error_field: refused.errors}) from None
        return Response(NodeConfigOperationSerializer(op, context={"request": request}).data)

    @extend_schema(summary="Revert a failed reconfiguration, or the node's latest finished one (admins)", request=None,
                   responses={201: NodeConfigOperationSerializer})  # fmt: skip
    @action(detail=True, methods=["post"])
    def revert(self, request, pk=None):
        op = self.get_object()
        try:
            new = request_revert(request.user, op)
        except ConfigRefused as refused:
            raise ValidationError({"detail": refused.errors}) from None
        out = NodeConfigOperationSerializer(new, context={"request": request})
        return Response(out.data, status=status.HTTP_201_CREATED)


def _problems_as_drf(errors: dict[str, list[str]]) -> dict[str, list[str]]:
    return {name or "non_field_errors": messages for name, messages in errors.items()}


@extend_schema(tags=["inventory"])
@extend_schema_view(
    list=extend_schema(summary="List the clusters of the fleet", description="Every signed-in user sees each "
                       "cluster's name, region, health and capabilities; admins also see how it is reached."),
    retrieve=extend_schema(summary="One cluster of the fleet"),
    create=extend_schema(summary="Register a cluster (admins)", request=ClusterInputSerializer,
                         description="The portal reaches the API server before storing anything: an unreachable "
                         "URL, a wrong CA, a missing or rejected token or a name in use is a 400 naming the field; "
                         "the token is sealed and never shown again."),
    partial_update=extend_schema(summary="Change how a cluster is reached or described (admins)",
                                 request=ClusterInputSerializer),
    destroy=extend_schema(summary="Remove a cluster that holds no work (admins)",
                          description="409 with what still runs there while it holds work."),
)  # fmt: skip
class ClusterViewSet(
    mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet
):
    serializer_class = ClusterSerializer
    permission_classes = [IsAdminOrReadOnly]
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9\-_]+"
    lookup_value_converter = "str"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    ordering_fields = ["name", "region", "health"]
    filterset_fields = ["health", "region"]

    def get_queryset(self):
        present = Q(nodes__gone_at__isnull=True)
        return Cluster.objects.annotate(
            node_total=Count("nodes", filter=present), gpu_total=Sum("nodes__gpu_count", filter=present)
        ).order_by("name")

    def _input(self, request, existing: Cluster | None) -> fleet.ClusterInput:
        """The cleaned input, or a 400 with every problem: unknown fields, field formats and the connection's
        own rules at once (the API server is reached only when all of those pass)."""
        sent = request.data
        if not isinstance(sent, Mapping):
            raise ValidationError({"non_field_errors": ["Send a JSON object of the cluster's fields."]})
        base = {}
        if existing is not None:
            base = {name: getattr(existing, name) for name in ("name", *fleet.EDITABLE)}
            sent = {**base, **sent}
        serializer = ClusterInputSerializer(data=sent)
        errors = unknown_field_errors(serializer, request.data, "A cluster")
        valid = serializer.is_valid()
        errors.update(serializer.errors)
        if existing is not None and "name" in request.data and request.data["name"] != existing.name:
            errors.setdefault("name", []).append("A cluster keeps its name; register a new one instead.")
        values = serializer.validated_data if valid else {
            name: sent.get(name) for name in serializer.fields if isinstance(sent.get(name), str)
        }  # fmt: skip
        data = fleet.ClusterInput(**{k: v for k, v in values.items() if k in fleet.ClusterInput.__dataclass_fields__})
        for name, messages in fleet.problems(data, existing).items():
            errors.setdefault(name or "non_field_errors", []).extend(messages)
        if errors:
            raise ValidationError(errors)
        return data

    def create(self, request, *args, **kwargs):
        data = self._input(request, None)
        try:
            cluster = fleet.register(request.user, data)
        except fleet.Problems as problems:
            raise ValidationError(_problems_as_drf(problems.errors)) from problems
        return Response(
            self.get_serializer(self.get_queryset().get(pk=cluster.pk)).data, status=status.HTTP_201_CREATED
        )

    def partial_update(self, request, *args, **kwargs):
        cluster = self.get_object()
        data = self._input(request, cluster)
        try:
            fleet.change(request.user, cluster, data)
        except fleet.Problems as problems:
            raise ValidationError(_problems_as_drf(problems.errors)) from problems
        except fleet.Refused as refused:
            return Response({"detail": str(refused)}, status=status.HTTP_409_CONFLICT)
        return Response(self.get_serializer(self.get_queryset().get(pk=cluster.pk)).data)

    def destroy(self, request, *args, **kwargs):
        try:
            fleet.remove(request.user, self.get_object())
        except fleet.Refused as refused:
            return Response({"detail": str(refused)}, status=status.HTTP_409_CONFLICT)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(summary="Reach the cluster now and refresh its inventory (admins)", request=None)
    @action(detail=True, methods=["post"])
    def check(self, request, name=None):
        cluster = self.get_object()
        fleet.sync(cluster)
        return Response(self.get_serializer(self.get_queryset().get(pk=cluster.pk)).data)

    @staticmethod
    def _pool_policies(cluster: Cluster) -> list[dict]:
        return [
            {"pool": row.name, "gpu_request": row.gpu_request, "mig_profiles": row.mig_profiles,
             "supported": row.mig_supported}
            for row in pool_rows()
            if row.cluster.pk == cluster.pk
        ]  # fmt: skip

    @extend_schema(
        methods=["get"], summary="The MIG profiles teams may claim in each node pool of the cluster (admins)",
        request=None, responses={200: PoolMigProfilesSerializer(many=True)},
    )  # fmt: skip
    @extend_schema(
        methods=["post"],
        summary="Choose the MIG profiles teams may claim in one node pool of the cluster (admins)",
        description="With dynamic MIG, NVIDIA's DRA driver carves a GPU when a claim is allocated; a profile left "
        "out is not offered to teams from that pool once the inventory syncs. Every profile must be one the pool's "
        "GPUs support; a 400 lists every problem and stores nothing. Audited.",
        request=PoolMigProfilesInputSerializer, responses={200: PoolMigProfilesSerializer},
        examples=[OpenApiExample("Small slices only", value={"pool": "a100-pool", "profiles": ["1g.5gb", "2g.10gb"]})],
    )  # fmt: skip
    @action(detail=True, methods=["get", "post"], url_path="mig-profiles", permission_classes=[IsPoolAdmin])
    def mig_profiles(self, request, name=None):
        cluster = self.get_object()
        if request.method == "GET":
            return Response(PoolMigProfilesSerializer(self._pool_policies(cluster), many=True).data)
        body = PoolMigProfilesInputSerializer(data=request.data)
        errors = unknown_field_errors(body, request.data, "A node pool's MIG policy")
        if not body.is_valid() or errors:
            raise ValidationError({**errors, **body.errors})
        pool = body.validated_data["pool"]
        if pool not in {p["pool"] for p in self._pool_policies(cluster)}:
            raise ValidationError({"pool": [f"Cluster {cluster.name} has no node pool {pool!r}."]})
        try:
            choose_mig_profiles(request.user, cluster, pool, body.validated_data["profiles"])
        except DjangoValidationError as error:
            raise ValidationError({"profiles": error.messages}) from None
        return Response(next(p for p in self._pool_policies(cluster) if p["pool"] == pool))
