from django.contrib import admin

from core.admin import AuditedAdmin, ReadOnlyAdmin
from jobs.models import Job, JobCheckpointToken, JobEvent, Notebook, NotebookPolicy, Quota


@admin.register(Quota)
class QuotaAdmin(AuditedAdmin):
    list_display = ["team", "resource_class", "guaranteed", "limit", "monthly_gpu_hours", "updated", "updated_by"]
    list_filter = ["team", "resource_class__kind"]
    fields = ["team", "resource_class", "guaranteed", "limit", "monthly_gpu_hours"]
    audit_fields = ["team_id", "resource_class_id", "guaranteed", "limit", "monthly_gpu_hours"]
    actions = None  # bulk deletes would bypass the audit log

    def save_model(self, request, obj, form, change):
        obj.updated_by = request.user
        super().save_model(request, obj, form, change)


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    fields = ["at", "kind", "message"]
    readonly_fields = fields

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    """Read-only: jobs change through the portal's actions (submit, cancel, resubmit) and the job cycle."""

    list_display = ["id", "name", "team", "owner", "resource_class", "count", "state", "node_name", "submitted_at"]
    list_filter = ["state", "team", "kind", "priority", "preemptible"]
    search_fields = ["name", "owner__username", "workload_name", "node_name"]
    inlines = [JobEventInline]


@admin.register(JobCheckpointToken)
class JobCheckpointTokenAdmin(ReadOnlyAdmin):
    """Read-only: a job's checkpoint tokens are minted by its launches and revoked when its attempts end
    (jobs.checkpoint_tokens); here admins see which exist, when each was last used and when it stopped."""

    list_display = ["key_prefix", "job", "workload_name", "created_at", "last_used_at", "revoked_at"]
    search_fields = ["key_prefix", "workload_name"]
    list_select_related = ["job"]


@admin.register(NotebookPolicy)
class NotebookPolicyAdmin(AuditedAdmin):
    """A team's notebook limits (seconds). Teams without one get the PORTAL_NOTEBOOK_* settings."""

    list_display = ["team", "ttl_seconds", "max_ttl_seconds", "idle_timeout_seconds", "max_idle_timeout_seconds"]
    fields = ["team", "ttl_seconds", "max_ttl_seconds", "idle_timeout_seconds", "max_idle_timeout_seconds"]
    audit_fields = ["team_id", *fields[1:]]


@admin.register(Notebook)
class NotebookAdmin(ReadOnlyAdmin):
    """Read-only: notebooks change through their pages and API (launch, extend, stop, start) and the culler."""

    list_display = ["id", "name", "team", "owner", "resource_class", "state", "expires_at", "stop_reason"]
    list_filter = ["state", "team", "stop_reason"]
    search_fields = ["name", "owner__username"]
    exclude = ["token_hash"]
