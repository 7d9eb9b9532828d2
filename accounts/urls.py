from django.urls import path

from . import views, views_audit, webhook_views

urlpatterns = [
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("account/tokens/<int:pk>/rotate/", views.token_rotate, name="token-rotate"),
    path("account/device/", views.device_approve, name="device-approve"),
    path("notifications/", views.notification_list, name="notification-list"),
    path("teams/<slug:slug>/service-accounts/", views.service_account_list, name="service-account-list"),
    path(
        "teams/<slug:slug>/service-accounts/<int:pk>/disable/",
        views.service_account_disable,
        name="service-account-disable",
    ),
    path(
        "teams/<slug:slug>/service-accounts/<int:pk>/tokens/",
        views.service_account_token_issue,
        name="service-account-token-issue",
    ),
    path(
        "teams/<slug:slug>/service-accounts/<int:pk>/tokens/<int:token_pk>/rotate/",
        views.service_account_token_rotate,
        name="service-account-token-rotate",
    ),
    path(
        "teams/<slug:slug>/service-accounts/<int:pk>/tokens/<int:token_pk>/revoke/",
        views.service_account_token_revoke,
        name="service-account-token-revoke",
    ),
    path("notifications/read/", views.notification_mark_read, name="notification-mark-read"),
    path("teams/<slug:slug>/webhooks/", webhook_views.webhook_list, name="team-webhooks"),
    path("teams/<slug:slug>/webhooks/<int:pk>/", webhook_views.webhook_detail, name="webhook-detail"),
    path("teams/<slug:slug>/webhooks/<int:pk>/<str:what>/", webhook_views.webhook_action, name="webhook-action"),
    path(
        "teams/<slug:slug>/webhooks/<int:pk>/deliveries/<int:delivery_id>/redeliver/",
        webhook_views.delivery_redeliver,
        name="webhook-redeliver",
    ),
    path("audit/", views_audit.audit_list, name="audit-list"),
    path("audit.csv", views_audit.audit_csv, name="audit-csv"),
]
