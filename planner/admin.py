from django.contrib import admin

from .models import PlanRun


@admin.register(PlanRun)
class PlanRunAdmin(admin.ModelAdmin):
    """Read-only: runs are made and cancelled on the planner's page and API (audited there)."""

    list_display = [
        "id", "state", "created_by", "created_at", "window_start", "window_end", "cluster", "progress", "finished_at",
    ]  # fmt: skip
    list_filter = ["state"]
    readonly_fields = [f.name for f in PlanRun._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
