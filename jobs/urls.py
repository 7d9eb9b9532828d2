from django.urls import path

from . import dataset_views, notebook_views, secret_views, views

app_name = "jobs"
urlpatterns = [
    path("jobs/", views.job_list, name="job-list"),
    path("jobs/new/", views.job_new, name="job-new"),
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
    path("volumes/", views.volume_list, name="volume-list"),
    path("datasets/", dataset_views.dataset_list, name="dataset-list"),
    path("datasets/<int:pk>/", dataset_views.dataset_edit, name="dataset-edit"),
    path("datasets/<int:pk>/unpublish/", dataset_views.dataset_unpublish, name="dataset-unpublish"),
    path("teams/", views.team_list, name="team-list"),
    path("teams/<slug:slug>/", views.team_detail, name="team-detail"),
    path("teams/<slug:slug>/usage.csv", views.team_usage_csv, name="team-usage-csv"),
    path("teams/<slug:slug>/quotas/", views.quota_add, name="quota-add"),
    path("teams/<slug:slug>/secrets/", secret_views.team_secrets, name="team-secrets"),
    path("teams/<slug:slug>/secrets/new/", secret_views.secret_create, name="secret-create"),
    path("teams/<slug:slug>/secrets/<int:pk>/rotate/", secret_views.secret_rotate, name="secret-rotate"),
    path("teams/<slug:slug>/secrets/<int:pk>/delete/", secret_views.secret_delete, name="secret-delete"),
    path("teams/<slug:slug>/registries/new/", secret_views.registry_create, name="registry-create"),
    path("teams/<slug:slug>/registries/<int:pk>/rotate/", secret_views.registry_rotate, name="registry-rotate"),
    path("teams/<slug:slug>/registries/<int:pk>/delete/", secret_views.registry_delete, name="registry-delete"),
    path("teams/<slug:slug>/quotas/<int:pk>/", views.quota_edit, name="quota-edit"),
    path("teams/<slug:slug>/quotas/<int:pk>/delete/", views.quota_delete, name="quota-delete"),
]
