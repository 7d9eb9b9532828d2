"""Team administration (issue 18): admins create teams and change their name and description; leads (and
admins) add members, change their role between member and lead, and remove them. Every change is audited with
the state before and after. The pages (jobs.teams.admin_views) and any API call these, so the rules live here:

- a team's namespace is fixed at creation (every workload of the team runs there; moving it would strand them);
- nobody becomes an admin here: the roles are member and lead;
- a lead cannot remove or demote the last lead of a team (an admin can, and then adds another).
"""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import audit

from . import roles
from .choices import AuditAction, MembershipRole
from .models import Membership, Team, dns_label

TEAM_FIELDS = ["slug", "name", "namespace", "description"]
MEMBER_FIELDS = ["user_id", "role"]

#: Namespaces a team may never take: Kubernetes' own and the cluster's system namespaces.
RESERVED_SLUGS = frozenset({"new"})
RESERVED_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})


def can_manage_members(user, team: Team) -> bool:
    """Leads of the team and admins."""
    return roles.is_lead_or_admin(user, team)


def _require_admin(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only admins can create teams or change a team's name and description.")


def team_problems(slug: str, name: str, namespace: str, *, instance: Team | None = None) -> dict[str, list[str]]:
    """Every problem with a new team's fields at once, each saying what to change."""
    errors: dict[str, list[str]] = {}
    if instance is None:
        for field, value, what in (("slug", slug, "short name"), ("namespace", namespace, "namespace")):
            if not value:
                errors[field] = [f"Give the team a {what}."]
                continue
            try:
                dns_label(value)
            except ValidationError as error:
                errors[field] = [f"{what.capitalize()} {value!r}: {' '.join(error.messages)}"]
        if slug and "slug" not in errors and len(slug) > 40:
            errors["slug"] = ["At most 40 characters."]
        if slug in RESERVED_SLUGS:
            errors["slug"] = [f"{slug!r} names a portal page (/teams/{slug}/); pick another short name."]
        if slug and "slug" not in errors and Team.objects.filter(slug=slug).exists():
            errors["slug"] = [f"A team {slug!r} exists already; pick another short name."]
        if namespace and "namespace" not in errors:
            if namespace in RESERVED_NAMESPACES or namespace.startswith("kube-"):
                errors["namespace"] = [f"{namespace!r} is a Kubernetes system namespace; pick another."]
            elif Team.objects.filter(namespace=namespace).exists():
                owner = Team.objects.get(namespace=namespace)
                errors["namespace"] = [f"Team {owner.slug} runs in {namespace!r} already; each team needs its own."]
    if not (name or "").strip():
        errors["name"] = ["Give the team a name people recognise, e.g. Computer Vision."]
    elif len(name) > 100:
        errors["name"] = ["At most 100 characters."]
    return errors


def create_team(user, slug: str, name: str, namespace: str = "", description: str = "") -> Team:
    """A new team (admins). The namespace defaults to the slug and never changes afterwards."""
    _require_admin(user)
    namespace = namespace or slug
    errors = team_problems(slug, name, namespace)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        team = Team.objects.create(slug=slug, name=name.strip(), namespace=namespace, description=description)
        audit.record(user, AuditAction.TEAM_CREATE, team, after=audit.snapshot(team, TEAM_FIELDS), team=team)
    return team


def update_team(user, team: Team, name: str, description: str) -> Team:
    """Change a team's name and description (admins); slug and namespace stay."""
    _require_admin(user)
    errors = team_problems(team.slug, name, team.namespace, instance=team)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        team = Team.objects.select_for_update().get(pk=team.pk)
        before = audit.snapshot(team, ["name", "description"])
        team.name, team.description = name.strip(), description
        team.save(update_fields=["name", "description"])
        after = audit.snapshot(team, ["name", "description"])
        if before != after:
            audit.record(user, AuditAction.TEAM_UPDATE, team, before=before, after=after, team=team)
    return team


def _check_role(role: str) -> None:
    if role not in MembershipRole.values:
        choices = ", ".join(MembershipRole.values)
        raise ValidationError({"role": [f"Pick one of: {choices} (admins are made elsewhere)."]})


def _robot_problem(person) -> str:
    """Service accounts are made, changed and disabled on their team's Service accounts page, never here."""
    if person is not None and hasattr(person, "service_account"):
        sa = person.service_account
        return (
            f"{person.get_username()} is the service account {sa.name!r} of team {sa.team_id and sa.team.slug}: it "
            "belongs to that team alone and is managed on its Service accounts page."
        )
    return ""


def _member_state(membership: Membership) -> dict:
    return {"user": membership.user.get_username(), "role": membership.role}


def add_member(user, team: Team, username: str, role: str = MembershipRole.MEMBER) -> Membership:
    """Add an existing user to the team (leads, admins)."""
    if not can_manage_members(user, team):
        raise PermissionDenied("Only the team's leads and admins can change its members.")
    errors: dict[str, list[str]] = {}
    username = (username or "").strip()
    person = get_user_model().objects.filter(username=username).first() if username else None
    if not username:
        errors["username"] = ["Give the user name of the person to add."]
    elif person is None:
        errors["username"] = [
            f"No user {username!r}. They must sign in to the portal once (or an admin creates the account) "
            "before they can be added."
        ]
    elif problem := _robot_problem(person):
        errors["username"] = [problem]
    elif Membership.objects.filter(team=team, user=person).exists():
        errors["username"] = [f"{username} is in team {team.slug} already; change their role in the list instead."]
    if role not in MembershipRole.values:
        errors["role"] = [f"Pick one of: {', '.join(MembershipRole.values)}."]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        membership = Membership.objects.create(team=team, user=person, role=role)
        audit.record(
            user,
            AuditAction.MEMBER_ADD,
            membership,
            object_repr=f"{username} in {team.slug}",
            after=_member_state(membership),
            team=team,
        )
    return membership


def _would_lose_last_lead(user, membership: Membership) -> bool:
    """True when a lead (not an admin) would leave the team without any lead."""
    if user.is_staff or membership.role != MembershipRole.LEAD:
        return False
    others = Membership.objects.filter(team=membership.team, role=MembershipRole.LEAD).exclude(pk=membership.pk)
    return not others.exists()


def set_role(user, membership: Membership, role: str) -> Membership:
    """Make a member a lead or a lead a member (leads, admins)."""
    team = membership.team
    if not can_manage_members(user, team):
        raise PermissionDenied("Only the team's leads and admins can change its members.")
    _check_role(role)
    with transaction.atomic():
        membership = Membership.objects.select_for_update().select_related("user", "team").get(pk=membership.pk)
        if problem := _robot_problem(membership.user):
            raise ValidationError({"role": [problem]})
        if role == membership.role:
            return membership
        if role != MembershipRole.LEAD and _would_lose_last_lead(user, membership):
            raise ValidationError(
                {"role": [f"{membership.user.get_username()} is the last lead of {team.slug}; make someone else a "
                          "lead first."]}
            )  # fmt: skip
        before = _member_state(membership)
        membership.role = role
        membership.save(update_fields=["role"])
        audit.record(
            user,
            AuditAction.MEMBER_ROLE,
            membership,
            object_repr=f"{membership.user.get_username()} in {team.slug}",
            before=before,
            after=_member_state(membership),
            team=team,
        )
    return membership


def remove_member(user, membership: Membership) -> None:
    """Take someone out of the team (leads, admins). Their running work goes on; they cannot submit any more."""
    team = membership.team
    if not can_manage_members(user, team):
        raise PermissionDenied("Only the team's leads and admins can change its members.")
    with transaction.atomic():
        membership = Membership.objects.select_for_update().select_related("user", "team").get(pk=membership.pk)
        if problem := _robot_problem(membership.user):
            raise ValidationError(problem)
        if _would_lose_last_lead(user, membership):
            raise ValidationError(
                f"{membership.user.get_username()} is the last lead of {team.slug}; make someone else a lead first."
            )
        audit.record(
            user,
            AuditAction.MEMBER_REMOVE,
            membership,
            object_repr=f"{membership.user.get_username()} in {team.slug}",
            before=_member_state(membership),
            team=team,
        )
        membership.delete()
