from django.contrib import admin

from core.admin import AuditedAdmin

from .models import APIToken, Membership, ServiceAccount, Team


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(Team)
class TeamAdmin(AuditedAdmin):
    list_display = ["slug", "name", "namespace"]
    search_fields = ["slug", "name"]
    inlines = [MembershipInline]
    audit_fields = ["slug", "name", "namespace", "description"]

    def get_readonly_fields(self, request, obj=None):
        # A team's workloads live in its namespace; moving it would orphan them, so it is fixed once created.
        return ["namespace"] if obj is not None else []


@admin.register(APIToken)
class APITokenAdmin(admin.ModelAdmin):
    list_display = ["name", "user", "key_prefix", "scope", "created", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["scope"]
    search_fields = ["name", "user__username", "key_prefix"]
    readonly_fields = ["user", "key_prefix", "created_by", "created", "last_used_at"]
    fields = [
        "user", "name", "key_prefix", "scope", "created_by", "created", "expires_at", "last_used_at", "revoked_at"
    ]  # fmt: skip

    def has_add_permission(self, request):
        return False  # tokens are issued by their owners (API tokens, in the page header) so the secret is shown once


@admin.register(ServiceAccount)
class ServiceAccountAdmin(admin.ModelAdmin):
    """For looking only: leads create and disable service accounts on their team's page (audited, tokens revoked
    with them), which an edit here would bypass."""

    list_display = ["name", "team", "user", "created_by", "created", "disabled_at"]
    list_filter = ["team"]
    search_fields = ["name", "user__username", "team__slug"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
