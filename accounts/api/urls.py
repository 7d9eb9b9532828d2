from rest_framework.routers import DefaultRouter

from .views import APITokenViewSet, NotificationViewSet
from .webhook_views import WebhookViewSet

router = DefaultRouter()
router.register("tokens", APITokenViewSet, basename="apitoken")
router.register("notifications", NotificationViewSet, basename="notification")
router.register("webhooks", WebhookViewSet, basename="webhook")
