from rest_framework.routers import DefaultRouter

from .views import (
    ClusterViewSet,
    GPUViewSet,
    MigPartitionViewSet,
    NodeConfigOperationViewSet,
    NodeViewSet,
    ResourceClassViewSet,
)

router = DefaultRouter()
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("nodes", NodeViewSet, basename="node")
router.register("gpus", GPUViewSet, basename="gpu")
router.register("mig-partitions", MigPartitionViewSet, basename="migpartition")
router.register("resource-classes", ResourceClassViewSet, basename="resourceclass")
router.register("node-config-operations", NodeConfigOperationViewSet, basename="nodeconfigoperation")
