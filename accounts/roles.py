"""Roles in a team: the one answer to "what role does this user hold in this team, and is that lead or admin".

A user holds one role in a team: ``"admin"`` if they are staff (an admin holds every team), else their
membership's role (``member`` or ``lead``), else none. Leading a team (managing its members, service accounts,
webhooks, secrets, anybody's work in it, any priority) is for its leads and for admins. Every app composes these
functions instead of reading memberships for that rule itself: jobs.access, accounts.teams,
accounts.service_accounts, accounts.webhook_ops and planner.access.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .choices import MembershipRole
from .models import Membership, Team

#: The role of staff in every team.
ADMIN = "admin"
#: The roles that lead a team.
LEADING = frozenset({ADMIN, MembershipRole.LEAD.value})

#: Roles read inside ``roles_remembered()``: (user id, team id) → role. None outside it: every call reads.
_remembered: ContextVar[dict | None] = ContextVar("team_roles", default=None)


@contextmanager
def roles_remembered() -> Iterator[None]:
    """Within the block, each user's role in a team is read from the database once (a submission checks it for
    the right to submit and again for the highest priority). Nothing outlives the block; a block inside another
    shares the outer one's memory (the API's submission checks the team's name, then submits)."""
    if _remembered.get() is not None:
        yield
        return
    token = _remembered.set({})
    try:
        yield
    finally:
        _remembered.reset(token)


def is_admin(user) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.is_staff)


def team_role(user, team: Team) -> str | None:
    """'admin' for staff, else the user's membership role in the team, else None (also for anonymous users)."""
    if not getattr(user, "is_authenticated", False) or user.is_staff:
        return role_given(user, None)
    memo = _remembered.get()
    key = (user.pk, team.pk)
    if memo is not None and key in memo:
        return memo[key]
    role = Membership.objects.filter(user=user, team=team).values_list("role", flat=True).first()
    if memo is not None:
        memo[key] = role
    return role


def role_given(user, membership_role: str | None) -> str | None:
    """``team_role``'s answer when the caller has read the user's membership role in the team itself (None: no
    membership), as jobs.api.answer_read does in the job's own statement: 'admin' for staff, else that role."""
    if not getattr(user, "is_authenticated", False):
        return None
    if user.is_staff:
        return ADMIN
    return membership_role


def teams_of(user):
    """The teams ``user`` holds a role in, as a queryset: every team for admins, those of their memberships
    otherwise, none for anonymous users. A subquery, not a join: a join on memberships would leave only the user's
    own membership row for annotations such as the team list's member count."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(pk__in=Membership.objects.filter(user=user).values("team_id"))


def leads(role: str | None) -> bool:
    """Does this role (as ``team_role`` gives it) lead the team: lead or admin?"""
    return role in LEADING


def is_lead_or_admin(user, team: Team) -> bool:
    """A lead of ``team``, or an admin."""
    return leads(team_role(user, team))


def led_team_ids(user) -> set[int]:
    """The ids of the teams ``user`` is a lead of by membership (admins lead every team without being listed)."""
    if not getattr(user, "is_authenticated", False):
        return set()
    return set(Membership.objects.filter(user=user, role=MembershipRole.LEAD).values_list("team_id", flat=True))


def led_teams(user):
    """The teams ``user`` leads, as a queryset: every team for admins, the teams they are a lead of otherwise."""
    if not getattr(user, "is_authenticated", False):
        return Team.objects.none()
    if user.is_staff:
        return Team.objects.all()
    return Team.objects.filter(memberships__user=user, memberships__role=MembershipRole.LEAD)
