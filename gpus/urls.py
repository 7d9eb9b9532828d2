from django.urls import path

from . import class_admin, fleet_views, nodeops_views, pool_admin, views

app_name = "gpus"
urlpatterns = [
    path("clusters/", fleet_views.cluster_list, name="cluster-list"),
    path("clusters/new/", fleet_views.cluster_new, name="cluster-new"),
    path("clusters/<slug:name>/", fleet_views.cluster_detail, name="cluster-detail"),
    path("clusters/<slug:name>/edit/", fleet_views.cluster_edit, name="cluster-edit"),
    path("clusters/<slug:name>/remove/", fleet_views.cluster_remove, name="cluster-remove"),
    path("clusters/<slug:name>/check/", fleet_views.cluster_check, name="cluster-check"),
    path("nodes/", views.node_list, name="node-list"),
    path("nodes/<str:name>/", views.node_detail, name="node-detail"),
    path("nodes/<str:name>/configure/", views.node_configure, name="node-configure"),
    path("node-config/", views.nodeconfig_list, name="nodeconfig-list"),
    path("node-config/<int:pk>/", views.nodeconfig_detail, name="nodeconfig-detail"),
    path("node-config/<int:pk>/revert/", views.nodeconfig_revert, name="nodeconfig-revert"),
    path("node-config/<int:pk>/abort/", nodeops_views.nodeconfig_abort, name="nodeconfig-abort"),
    path("node-config/<int:pk>/force/", nodeops_views.nodeconfig_force, name="nodeconfig-force"),
    path("nodes/<str:name>/smoke-test/", nodeops_views.node_smoke_test, name="node-smoke-test"),
    path("node-pools/", pool_admin.nodepool_list, name="nodepool-list"),
    path("node-pools/taints/", pool_admin.nodepool_taints, name="nodepool-taints"),
    path("node-pools/gpu-request/", pool_admin.nodepool_gpu_request, name="nodepool-gpu-request"),
    path("node-pools/mig-profiles/", pool_admin.nodepool_mig_profiles, name="nodepool-mig-profiles"),
    path("resource-classes/", views.resourceclass_list, name="resourceclass-list"),
    path("resource-classes/manage/", class_admin.resourceclass_manage, name="resourceclass-manage"),
    path("resource-classes/<int:pk>/manage/", class_admin.resourceclass_update, name="resourceclass-update"),
]
