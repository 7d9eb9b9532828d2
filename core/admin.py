from django.contrib import admin

from . import audit
from .choices import AdminAuditAction
from .models import AuditEvent


class ReadOnlyAdmin(admin.ModelAdmin):
    """For looking only: rows that change through the portal's own actions (audited there) or its control loops,
    which an edit here would bypass."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AuditedAdmin(admin.ModelAdmin):
    """Records every admin change in the audit log with before/after values."""

    audit_fields: list[str] = []

    def save_model(self, request, obj, form, change):
        before = audit.snapshot(type(obj).objects.get(pk=obj.pk), self.audit_fields) if change else None
        super().save_model(request, obj, form, change)
        action = AdminAuditAction.UPDATE if change else AdminAuditAction.CREATE
        audit.record(request.user, action, obj, before=before, after=audit.snapshot(obj, self.audit_fields))

    def delete_model(self, request, obj):
        before = audit.snapshot(obj, self.audit_fields)
        audit.record(request.user, AdminAuditAction.DELETE, obj, before=before)
        super().delete_model(request, obj)


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin):
    list_display = ["when", "actor_name", "action", "action_label", "object_type", "object_repr", "request_id"]
    list_filter = ["action", "object_type"]
    search_fields = ["actor_name", "object_repr", "request_id"]

    @admin.display(description="What")
    def action_label(self, obj):
        return audit.verb_label(obj.action)
