from rest_framework.routers import DefaultRouter

from .views import APITokenViewSet, NotificationViewSet

router = DefaultRouter()
router.register("tokens", APITokenViewSet, basename="apitoken")
router.register("notifications", NotificationViewSet, basename="notification")
