from django.urls import path

from . import views

urlpatterns = [
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("notifications/", views.notification_list, name="notification-list"),
    path("notifications/read/", views.notification_mark_read, name="notification-mark-read"),
]
