from django.urls import path

from . import views, views_audit, webhook_views

urlpatterns = [
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("notifications/", views.notification_list, name="notification-list"),
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
