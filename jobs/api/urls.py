from rest_framework.routers import DefaultRouter

from .service_views import ServiceViewSet
from .team_views import DatasetViewSet, QuotaViewSet, RegistryCredentialViewSet, TeamSecretViewSet, TeamVolumeViewSet
from .views import JobArrayViewSet, JobViewSet, NotebookViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("job-arrays", JobArrayViewSet, basename="job-array")
router.register("notebooks", NotebookViewSet, basename="notebook")
router.register("services", ServiceViewSet, basename="service")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("volumes", TeamVolumeViewSet, basename="volume")
router.register("datasets", DatasetViewSet, basename="dataset")
router.register("secrets", TeamSecretViewSet, basename="secret")
router.register("registry-credentials", RegistryCredentialViewSet, basename="registry-credential")
