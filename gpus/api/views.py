from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiExample, extend_schema, extend_schema_view
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response

from accounts.permissions import IsAdminOrReadOnly, IsAuthenticatedWithTokenScope
from cluster import get_backend

from ..class_admin import update_class
from ..filtersets import (
    GPUFilterSet,
    MigPartitionFilterSet,
    NodeConfigOperationFilterSet,
    NodeFilterSet,
    ResourceClassFilterSet,
)
from ..models import GPU, MigPartition, Node, NodeConfigOperation, ResourceClass
from ..nodeconfig import request_operation, request_revert
from ..nodeconfig_control import abort_operation, drain_preview, force_drain
from ..nodeconfig_plan import ConfigRefused, plan_from_request
from ..smoketest import SmokeTestRefused, request_smoke_test
from .serializers import (
    GPUSerializer,
    MigPartitionSerializer,
    NodeConfigOperationSerializer,
    NodeConfigPlanSerializer,
    NodeConfigRequestSerializer,
    NodeDetailSerializer,
    NodeSerializer,
    NodeSmokeTestSerializer,
    ReasonSerializer,
    ResourceClassSerializer,
)


class IsPortalAdmin(IsAuthenticatedWithTokenScope):
    """Only portal admins (staff), for reading as well as writing."""

    message = "Only portal admins can do this (node reconfigurations and smoke tests)."

    def has_permission(self, request, view):
        return super().has_permission(request, view) and bool(request.user.is_staff)


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
        qs = Node.objects.visible_to(self.request.user).select_related("team")
        if self.action == "retrieve":
            qs = qs.prefetch_related(
                Prefetch("gpus", queryset=GPU.objects.prefetch_related("mig_partitions__gpu__node"))
            )
        return qs

    def get_serializer_class(self):
        return NodeDetailSerializer if self.action == "retrieve" else NodeSerializer

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
        runs = node.smoke_tests.select_related("node", "requested_by")[:20]
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
            .select_related("node")
            .prefetch_related("mig_partitions__gpu__node")
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
            .select_related("gpu__node")
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
        qs = ResourceClass.objects.all()
        if not self.request.user.is_staff:
            qs = qs.filter(hidden=False)
        return qs

    def perform_update(self, serializer):
        # The same change, with the same audit verb, as the admins' page (gpus.class_admin).
        serializer.instance = update_class(self.request.user, serializer.instance, **serializer.validated_data)


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
        return NodeConfigOperation.objects.select_related("node", "requested_by").order_by("-created")

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
                plan.drain = drain_preview(get_backend(), node)
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
