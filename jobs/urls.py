from django.urls import path

from . import notebook_views, views

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
    path("teams/", views.team_list, name="team-list"),
    path("teams/<slug:slug>/", views.team_detail, name="team-detail"),
    path("teams/<slug:slug>/usage.csv", views.team_usage_csv, name="team-usage-csv"),
    path("teams/<slug:slug>/quotas/", views.quota_add, name="quota-add"),
    path("teams/<slug:slug>/quotas/<int:pk>/", views.quota_edit, name="quota-edit"),
    path("teams/<slug:slug>/quotas/<int:pk>/delete/", views.quota_delete, name="quota-delete"),
]
