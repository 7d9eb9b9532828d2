from rest_framework.routers import DefaultRouter

from .views import JobViewSet, QuotaViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("quotas", QuotaViewSet, basename="quota")
