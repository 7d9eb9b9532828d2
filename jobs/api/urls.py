from rest_framework.routers import DefaultRouter

from .views import JobViewSet, NotebookViewSet, QuotaViewSet, RegistryCredentialViewSet, TeamSecretViewSet

router = DefaultRouter()
router.register("jobs", JobViewSet, basename="job")
router.register("notebooks", NotebookViewSet, basename="notebook")
router.register("quotas", QuotaViewSet, basename="quota")
router.register("secrets", TeamSecretViewSet, basename="secret")
router.register("registry-credentials", RegistryCredentialViewSet, basename="registry-credential")
