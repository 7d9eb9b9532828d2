"""Single sign-on's rows: which identity-provider group grants what, and which provider identity is which account.

Imported at the end of accounts/models.py so they belong to this app (label ``portal``) without growing that module.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from .choices import MembershipRole


class SsoGroupMapping(models.Model):
    """One value of the groups claim and what it grants at every SSO sign-in: a role in a team, or portal admin.

    A person gets the union of what their groups grant; where two groups grant roles in one team the higher role
    wins (lead over member).
    """

    group = models.CharField(
        max_length=200, help_text="The group exactly as the identity provider sends it in the groups claim."
    )
    team = models.ForeignKey(
        "portal.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="sso_mappings"
    )
    role = models.CharField(max_length=10, choices=MembershipRole.choices, blank=True)
    #: Grants portal admin (is_staff and is_superuser) instead of a team role.
    is_admin = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group", "team__slug"]
        verbose_name = "SSO group mapping"
        constraints = [
            models.CheckConstraint(
                condition=(Q(is_admin=False, team__isnull=False) & ~Q(role=""))
                | Q(is_admin=True, team__isnull=True, role=""),
                name="sso_mapping_team_role_or_admin",
            ),
            models.UniqueConstraint(
                fields=["group", "team"], condition=Q(team__isnull=False), name="sso_mapping_unique_group_team"
            ),
            models.UniqueConstraint(fields=["group"], condition=Q(is_admin=True), name="sso_mapping_unique_admin"),
        ]

    def __str__(self) -> str:
        if self.is_admin:
            return f"{self.group} → portal admin"
        return f"{self.group} → {self.team} ({self.role})"


class SsoIdentity(models.Model):
    """The provider's stable identity (issuer and subject) of an account made or used by single sign-on.

    Accounts are found by this, never by username or e-mail, so a provider user can never take over a local
    (break-glass) account that happens to share a name.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity")
    issuer = models.CharField(max_length=255, blank=True)
    subject = models.CharField(max_length=255)
    #: The groups claim at the last sign-in, shown to admins on the mapping page.
    groups = models.JSONField(default=list, blank=True)
    last_sign_in = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="sso_identity_unique_subject")]
        verbose_name = "SSO identity"
        verbose_name_plural = "SSO identities"

    def __str__(self) -> str:
        return f"{self.user} ({self.subject})"
