from django.urls import path

from . import views, views_audit

urlpatterns = [
    path("account/tokens/", views.token_list, name="token-list"),
    path("account/tokens/<int:pk>/revoke/", views.token_revoke, name="token-revoke"),
    path("notifications/", views.notification_list, name="notification-list"),
    path("audit/", views_audit.audit_list, name="audit-list"),
    path("audit.csv", views_audit.audit_csv, name="audit-csv"),
]
