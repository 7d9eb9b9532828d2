from rest_framework.routers import DefaultRouter

from .views import APITokenViewSet

router = DefaultRouter()
router.register("tokens", APITokenViewSet, basename="apitoken")
