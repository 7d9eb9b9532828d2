from django.urls import path

from . import views

app_name = "planner"

urlpatterns = [
    path("planner/", views.run_list, name="run-list"),
    path("planner/new/", views.run_new, name="run-new"),
    path("planner/<int:pk>/", views.run_detail, name="run-detail"),
    path("planner/<int:pk>/cancel/", views.run_cancel, name="run-cancel"),
    path("planner/<int:pk>/results.csv", views.run_csv, name="run-csv"),
]
