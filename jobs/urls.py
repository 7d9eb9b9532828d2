from django.urls import path
from rest_framework.routers import DefaultRouter

from jobs import views
from jobs.api.views import JobArrayViewSet, JobViewSet
from jobs.notebook import views as notebook_views
from jobs.notebook.api.views import NotebookViewSet
from jobs.service import views as service_views
from jobs.service.api.views import ServiceViewSet
from jobs.teams import admin_views as teamadmin_views
from jobs.teams import dataset_views, secret_views
from jobs.teams import views as team_views
from jobs.teams.api.views import (
    DatasetViewSet,
    QuotaViewSet,
    RegistryCredentialViewSet,
    TeamSecretViewSet,
    TeamVolumeViewSet,
)

#: The jobs app's API endpoints (portal.urls lists every app's under one root).
api_router = DefaultRouter()
api_router.register("jobs", JobViewSet, basename="job")
api_router.register("job-arrays", JobArrayViewSet, basename="job-array")
api_router.register("notebooks", NotebookViewSet, basename="notebook")
api_router.register("services", ServiceViewSet, basename="service")
api_router.register("quotas", QuotaViewSet, basename="quota")
api_router.register("volumes", TeamVolumeViewSet, basename="volume")
api_router.register("datasets", DatasetViewSet, basename="dataset")
api_router.register("secrets", TeamSecretViewSet, basename="secret")
api_router.register("registry-credentials", RegistryCredentialViewSet, basename="registry-credential")

app_name = "jobs"
urlpatterns = [
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_new, name="job-new"),
    path("jobs/volume-choices/", views.volume_choices, name="volume-choices"),
    path("jobs/<int:pk>/", views.job_detail, name="job-detail"),
    path("jobs/<int:pk>/log.txt", views.job_log_download, name="job-log-download"),
    path("jobs/<int:pk>/cancel/", views.job_cancel, name="job-cancel"),
    path("jobs/<int:pk>/resubmit/", views.job_resubmit, name="job-resubmit"),
    path("jobs/<int:pk>/priority/", views.job_priority, name="job-priority"),
    path("jobs/arrays/<int:pk>/", views.array_detail, name="array-detail"),
    path("jobs/arrays/<int:pk>/cancel/", views.array_cancel, name="array-cancel"),
    path("notebooks/", notebook_views.notebook_list, name="notebook-list"),
    path("notebooks/<int:pk>/", notebook_views.notebook_detail, name="notebook-detail"),
    path("notebooks/<int:pk>/extend/", notebook_views.notebook_extend, name="notebook-extend"),
    path("notebooks/<int:pk>/stop/", notebook_views.notebook_stop, name="notebook-stop"),
    path("notebooks/<int:pk>/start/", notebook_views.notebook_start, name="notebook-start"),
    path("notebooks/<int:pk>/token/", notebook_views.notebook_token, name="notebook-token"),
    path("notebooks/<int:pk>/open/", notebook_views.notebook_open, name="notebook-open"),
    path("auth/workspace/", notebook_views.workspace_auth, name="workspace-auth"),
    path("auth/workspace/<path:uri>", notebook_views.workspace_auth, name="workspace-auth-path"),
    path("services/", service_views.service_list, name="service-list"),
    path("services/new/", service_views.service_new, name="service-new"),
    path("services/<int:pk>/", service_views.service_detail, name="service-detail"),
    path("services/<int:pk>/scale/", service_views.service_scale, name="service-scale"),
    path("services/<int:pk>/image/", service_views.service_image, name="service-image"),
    path("services/<int:pk>/pause/", service_views.service_pause, name="service-pause"),
    path("services/<int:pk>/resume/", service_views.service_resume, name="service-resume"),
    path("services/<int:pk>/rollback/", service_views.service_rollback, name="service-rollback"),
    path("services/<int:pk>/stop/", service_views.service_stop, name="service-stop"),
    path("volumes/", team_views.volume_list, name="volume-list"),
    path("datasets/", dataset_views.dataset_list, name="dataset-list"),
    path("datasets/<int:pk>/", dataset_views.dataset_edit, name="dataset-edit"),
    path("datasets/<int:pk>/unpublish/", dataset_views.dataset_unpublish, name="dataset-unpublish"),
    path("teams/", team_views.team_list, name="team-list"),
    path("usage/", team_views.usage, name="usage"),
    path("teams/new/", teamadmin_views.team_new, name="team-new"),
    path("manage/", teamadmin_views.admin_home, name="admin-home"),
    path("teams/<slug:slug>/edit/", teamadmin_views.team_edit, name="team-edit"),
    path("teams/<slug:slug>/members/", teamadmin_views.team_members, name="team-members"),
    path("teams/<slug:slug>/members/<int:pk>/role/", teamadmin_views.member_role, name="member-role"),
    path("teams/<slug:slug>/members/weights/", teamadmin_views.member_weights, name="member-weights"),
    path("teams/<slug:slug>/members/<int:pk>/remove/", teamadmin_views.member_remove, name="member-remove"),
    path("teams/<slug:slug>/notebook-policy/", teamadmin_views.notebook_policy, name="team-notebook-policy"),
    path(
        "teams/<slug:slug>/notebook-policy/reset/",
        teamadmin_views.notebook_policy_reset,
        name="team-notebook-policy-reset",
    ),
    path("teams/<slug:slug>/", team_views.team_detail, name="team-detail"),
    path("teams/<slug:slug>/usage.csv", team_views.team_usage_csv, name="team-usage-csv"),
    path("teams/<slug:slug>/quotas/", team_views.quota_add, name="quota-add"),
    path("teams/<slug:slug>/preemption/", team_views.min_runtime, name="team-min-runtime"),
    path("teams/<slug:slug>/templates/", team_views.template_save, name="template-save"),
    path("teams/<slug:slug>/templates/<slug:name>/delete/", team_views.template_delete, name="template-delete"),
    path("teams/<slug:slug>/secrets/", secret_views.team_secrets, name="team-secrets"),
    path("teams/<slug:slug>/secrets/new/", secret_views.secret_create, name="secret-create"),
    path("teams/<slug:slug>/secrets/<int:pk>/rotate/", secret_views.secret_rotate, name="secret-rotate"),
    path("teams/<slug:slug>/secrets/<int:pk>/delete/", secret_views.secret_delete, name="secret-delete"),
    path("teams/<slug:slug>/registries/new/", secret_views.registry_create, name="registry-create"),
    path("teams/<slug:slug>/registries/<int:pk>/rotate/", secret_views.registry_rotate, name="registry-rotate"),
    path("teams/<slug:slug>/registries/<int:pk>/delete/", secret_views.registry_delete, name="registry-delete"),
    path("teams/<slug:slug>/quotas/<int:pk>/", team_views.quota_edit, name="quota-edit"),
    path("teams/<slug:slug>/quotas/<int:pk>/delete/", team_views.quota_delete, name="quota-delete"),
]
