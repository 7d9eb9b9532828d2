from rest_framework.routers import DefaultRouter

from .views import JobArrayViewSet, JobViewSet, NotebookViewSet, QuotaViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("job-arrays", JobArrayViewSet, basename="job-array")
router.register("notebooks", NotebookViewSet, basename="notebook")
router.register("quotas", QuotaViewSet, basename="quota")
