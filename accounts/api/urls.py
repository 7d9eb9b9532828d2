from django.urls import path
from rest_framework.routers import DefaultRouter

from .views import APITokenViewSet, DeviceStartView, DeviceTokenView, NotificationViewSet, ServiceAccountViewSet
from .webhook_views import WebhookViewSet

router = DefaultRouter()
router.register("tokens", APITokenViewSet, basename="apitoken")
router.register("service-accounts", ServiceAccountViewSet, basename="service-account")
router.register("notifications", NotificationViewSet, basename="notification")
router.register("webhooks", WebhookViewSet, basename="webhook")

#: The command line's sign-in (accounts.device_login); no token needed, throttled per address.
urlpatterns = [
    path("auth/device/", DeviceStartView.as_view(), name="device-start"),
    path("auth/device/token/", DeviceTokenView.as_view(), name="device-token"),
]
