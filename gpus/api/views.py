from django.db import transaction
from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, viewsets

from portal import audit
from portal.choices import AuditAction
from portal.permissions import IsAdminOrReadOnly

from ..filtersets import GPUFilterSet, MigPartitionFilterSet, NodeFilterSet, ResourceClassFilterSet
from ..models import GPU, MigPartition, Node, ResourceClass
from .serializers import (
    GPUSerializer,
    MigPartitionSerializer,
    NodeDetailSerializer,
    NodeSerializer,
    ResourceClassSerializer,
)


@extend_schema_view(
    list=extend_schema(summary="List nodes", description="Nodes you may use (admins: all), with GPU facts."),
    retrieve=extend_schema(summary="One node with its GPUs, MIG partitions, labels, taints and diagnosis"),
)
class NodeViewSet(viewsets.ReadOnlyModelViewSet):
    queryset = Node.objects.none()  # for the schema; get_queryset() filters per user
    lookup_field = "name"
    lookup_value_regex = r"[a-z0-9.\-]+"
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


@extend_schema_view(list=extend_schema(summary="List GPUs"), retrieve=extend_schema(summary="One GPU"))
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
        fields = ["alias", "description", "hidden"]
        with transaction.atomic():
            before = audit.snapshot(serializer.instance, fields)
            instance = serializer.save()
            audit.record(
                self.request.user, AuditAction.UPDATE, instance, before=before, after=audit.snapshot(instance, fields)
            )
