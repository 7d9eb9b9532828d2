from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import PlanRunResultsCSV, PlanRunViewSet

router = DefaultRouter()
router.register("planner/runs", PlanRunViewSet, basename="plan-run")

#: Paths the router cannot make (no slash after .csv), for portal/urls.py's API patterns.
urlpatterns = [
    path("planner/runs/<int:id>/results.csv", PlanRunResultsCSV.as_view(), name="plan-run-results-csv"),
]
