from django.contrib import admin
from django.db import transaction
from django.utils import timezone

from core import audit

from .choices import TelemetryAuditAction
from .models import NodeAgentToken


@admin.register(NodeAgentToken)
class NodeAgentTokenAdmin(admin.ModelAdmin):
    """Tokens are issued with ``manage.py issue_agent_token [--cluster NAME] <node>`` (the secret is printed once);
    here admins see them and revoke them."""

    list_display = ["node_name", "cluster", "key_prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["cluster"]
    search_fields = ["node_name", "key_prefix"]
    readonly_fields = ["cluster", "node_name", "key_prefix", "created_by", "created_at", "last_used_at", "revoked_at"]
    actions = ["revoke"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request, queryset):
        with transaction.atomic():
            for token in queryset.filter(revoked_at__isnull=True):
                token.revoked_at = timezone.now()
                token.save(update_fields=["revoked_at"])
                audit.record(request.user, TelemetryAuditAction.AGENT_TOKEN_REVOKE, token)
