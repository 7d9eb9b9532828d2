from django.contrib import admin

from core import audit
from core.admin import ReadOnlyAdmin
from core.choices import AdminAuditAction

from .models import GPU, MigPartition, Node, ResourceClass


class ReadOnlyInventoryAdmin(ReadOnlyAdmin):
    """Inventory rows mirror the cluster; the reconcile task owns them, so the admin shows but never edits."""


@admin.register(Node)
class NodeAdmin(ReadOnlyInventoryAdmin):
    list_display = ["name", "product", "gpu_count", "health", "ready", "unschedulable", "team", "last_seen", "gone_at"]
    list_filter = ["health", "product", "mig_strategy", "unschedulable"]
    search_fields = ["name", "product"]


@admin.register(GPU)
class GPUAdmin(ReadOnlyInventoryAdmin):
    list_display = ["node", "index", "product", "sharing", "mig_enabled", "uuid"]
    list_filter = ["product", "sharing"]
    search_fields = ["node__name", "uuid"]


@admin.register(MigPartition)
class MigPartitionAdmin(ReadOnlyInventoryAdmin):
    list_display = ["gpu", "profile", "start", "size", "resource_name"]
    list_filter = ["profile"]


@admin.register(ResourceClass)
class ResourceClassAdmin(admin.ModelAdmin):
    list_display = ["key", "alias", "kind", "total", "allocatable", "in_use", "free", "hidden", "present"]
    list_filter = ["kind", "hidden", "present"]
    search_fields = ["key", "alias", "product"]
    fields = ["key", "kind", "resource_name", "product", "profile", "alias", "description", "hidden"]
    readonly_fields = ["key", "kind", "resource_name", "product", "profile"]

    def has_add_permission(self, request):
        return False

    def save_model(self, request, obj, form, change):
        fields = ["alias", "description", "hidden"]
        before = audit.snapshot(ResourceClass.objects.get(pk=obj.pk), fields) if obj.pk else None
        super().save_model(request, obj, form, change)
        audit.record(request.user, AdminAuditAction.UPDATE, obj, before=before, after=audit.snapshot(obj, fields))
