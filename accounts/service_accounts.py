"""Team service accounts: who may see and manage them, and creating and disabling them (audited).

A team's leads and portal admins create and disable a team's service accounts and issue, rotate and revoke their
tokens; the team's members may list them; anybody else does not learn they exist. A service account is its own
user (``sa-<team>-<name>``, unusable password, never staff, a member of its team), so it owns its jobs like a
person does and survives any person leaving.
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from core import audit

from . import roles
from .choices import AuditAction, MembershipRole
from .models import APIToken, Membership, ServiceAccount, Team

#: The User's last_name marks it as a service account for display without a query (see owner_label).
LABEL_PREFIX = "service account of "


class ServiceAccountError(Exception):
    def __init__(self, problems: dict[str, list[str]]):
        self.problems = problems
        super().__init__("; ".join(m for ms in problems.values() for m in ms))


def can_manage(user, team: Team) -> bool:
    """Leads of the team and admins."""
    return roles.is_lead_or_admin(user, team)


def visible_teams(user):
    """Teams whose service accounts ``user`` may see."""
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user)


def visible(user):
    return ServiceAccount.objects.filter(team__in=visible_teams(user)).select_related("team", "user", "created_by")


def owner_label(user) -> str:
    """ "<name> (service account of <team>)" for a service account's user, else the username; no query."""
    if user is None:
        return ""
    last = getattr(user, "last_name", "") or ""
    if user.get_username().startswith("sa-") and last.startswith(LABEL_PREFIX) and not user.has_usable_password():
        return f"{user.first_name} ({last})"
    return user.get_username()


def create(actor, team: Team, name: str, description: str = "") -> ServiceAccount:
    """Make the account, its user and its membership; ``actor`` must be a lead of ``team`` or an admin."""
    problems: dict[str, list[str]] = {}
    if not can_manage(actor, team):
        raise PermissionError(f"Only leads of {team.slug} and portal admins can create its service accounts.")
    username = ServiceAccount.username_for(team, name)
    if ServiceAccount.objects.filter(team=team, name=name).exists():
        problems["name"] = [f"Team {team.slug} already has a service account '{name}'; pick another name."]
    elif get_user_model().objects.filter(username=username).exists():
        problems["name"] = [f"The username {username} is taken by another account; pick another name."]
    if problems:
        raise ServiceAccountError(problems)
    with transaction.atomic():
        user = get_user_model()(username=username, first_name=name, last_name=f"{LABEL_PREFIX}{team.slug}"[:150])
        user.set_unusable_password()
        user.save()
        Membership.objects.create(user=user, team=team, role=MembershipRole.MEMBER)
        account = ServiceAccount.objects.create(
            team=team, name=name, description=description, user=user, created_by=actor
        )
        audit.record(
            actor,
            AuditAction.SERVICE_ACCOUNT_CREATE,
            account,
            after={"team": team.slug, "name": name, "username": username, "description": description},
            team=team,
        )
    return account


def disable(actor, account: ServiceAccount) -> bool:
    """Disable the account for good: its user can no longer sign in or use a token, its tokens are revoked.
    Its jobs and its audit trail stay. False when it was already disabled."""
    if not can_manage(actor, account.team):
        raise PermissionError(f"Only leads of {account.team.slug} and portal admins can disable its service accounts.")
    if account.disabled_at is not None:
        return False
    now = timezone.now()
    with transaction.atomic():
        account.disabled_at = now
        account.save(update_fields=["disabled_at"])
        type(account.user).objects.filter(pk=account.user_id).update(is_active=False)
        revoked = list(APIToken.objects.active().filter(user=account.user).values_list("key_prefix", flat=True))
        APIToken.objects.filter(user=account.user, key_prefix__in=revoked).update(revoked_at=now)
        audit.record(
            actor,
            AuditAction.SERVICE_ACCOUNT_DISABLE,
            account,
            before={"disabled_at": None},
            after={"disabled_at": now.isoformat(), "tokens_revoked": revoked},
            team=account.team,
        )
    return True
