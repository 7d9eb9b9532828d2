from django.urls import path

from . import views

app_name = "gpus"
urlpatterns = [
    path("nodes/", views.node_list, name="node-list"),
    path("nodes/<str:name>/", views.node_detail, name="node-detail"),
    path("resource-classes/", views.resourceclass_list, name="resourceclass-list"),
]
