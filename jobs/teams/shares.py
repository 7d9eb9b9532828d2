"""Fair share among a team's members as people see and set it (jobs.scheduling.members is the rule itself): each
member's weight and recent use, and the weights a team's leads (and admins) set. The members page, the API
(``/api/v1/teams/<slug>/member-shares/``) and the command line (``gpuportal members``) call these.

- A weight is a number above 0 and at most ``MAX_WEIGHT``; 1 is an equal share (the default), 2 twice one. Only the
  team's members get one; every problem is reported at once and nothing is saved unless all are right.
- A change is audited with every changed member's weight before and after.
- A member's recent use is the decayed average of the normalised GPUs their jobs of the team held
  (``MemberShare.average_units`` brought to now with ``PORTAL_FAIR_SHARE_HALF_LIFE``); their share of the team's
  use over their weight's part of the weights of the members in play (work queued or active, or recent use; for a
  member not in play, the part they would have if they submitted now) is the ratio their waiting jobs' reasons
  quote (1: exactly their share).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts import teams as team_services
from accounts.models import Team
from core import audit
from jobs.choices import ACTIVE_STATES, JobAuditAction, JobState
from jobs.models import Job, MemberShare
from jobs.scheduling.members import IN_PLAY

MAX_WEIGHT = 100.0


@dataclass(frozen=True)
class Share:
    """One member's weight and recent use, as the members page, the API and the command line show them."""

    user_id: int
    username: str
    role: str
    weight: float
    #: Normalised GPUs the member's jobs held lately (the decayed average, at now).
    recent_gpus: float
    #: Their part of the team's recent use, and of the weights (fractions of 1).
    use_share: float
    weight_share: float

    @property
    def ratio(self) -> float:
        """Use share over weight share (1: exactly their share; 0 while the team used nothing lately)."""
        return self.use_share / self.weight_share if self.weight_share else 0.0


def member_shares(team: Team, now: datetime | None = None) -> list[Share]:
    """Every member of ``team`` (service accounts too: their jobs count as theirs), with weight and recent use;
    heaviest users first. Three queries."""
    now = now or timezone.now()
    half_life = settings.PORTAL_FAIR_SHARE_HALF_LIFE
    rows = {ms.user_id: ms for ms in MemberShare.objects.filter(team=team)}
    members = list(team.memberships.select_related("user").order_by("user__username"))
    recent, weights = {}, {}
    for m in members:
        row = rows.get(m.user_id)
        if row is None:
            recent[m.user_id], weights[m.user_id] = 0.0, 1.0
            continue
        age = max(0.0, (now - row.updated).total_seconds())
        recent[m.user_id], weights[m.user_id] = row.average_units * 0.5 ** (age / half_life), row.weight
    # The members in play, as admission counts them (jobs.scheduling.members): work queued or active, or recent use.
    working = set(
        Job.objects.filter(team=team, state__in=(JobState.QUEUED, *ACTIVE_STATES)).values_list("owner_id", flat=True)
    )
    in_play = {user for user in recent if user in working or recent[user] >= IN_PLAY}
    total_use = sum(recent.values())
    weight_in_play = sum(weights[user] for user in in_play)

    def weight_share(user: int) -> float:
        # A member not in play: what their part would be if they submitted now.
        total = weight_in_play + (0.0 if user in in_play else weights[user])
        return weights[user] / total if total else 0.0

    shares = [
        Share(
            user_id=m.user_id,
            username=m.user.get_username(),
            role=m.role,
            weight=weights[m.user_id],
            recent_gpus=round(recent[m.user_id], 3),
            use_share=recent[m.user_id] / total_use if total_use > 0 else 0.0,
            weight_share=weight_share(m.user_id),
        )
        for m in members
    ]
    return sorted(shares, key=lambda s: (-s.recent_gpus, s.username))


def weight_problems(team: Team, weights: dict) -> dict[str, list[str]]:
    """Every problem with ``weights`` (user name → weight) at once, by user name, each saying what to change."""
    errors: dict[str, list[str]] = {}
    if not isinstance(weights, dict) or not weights:
        return {"weights": ['Give at least one member\'s weight, as user name → number, e.g. {"alice": 2}.']}
    members = set(team.memberships.values_list("user__username", flat=True))
    for username, value in weights.items():
        problems = []
        if username not in members:
            problems.append(f"{username!r} is not a member of team {team.slug}; give the weights of its members only.")
        number = _number(value)
        if number is None:
            problems.append(f"The weight of {username} is {value!r}; give a number, e.g. 2 (1 is an equal share).")
        elif not 0 < number <= MAX_WEIGHT:
            problems.append(
                f"The weight of {username} is {number:g}; give a number above 0 and at most {MAX_WEIGHT:g} "
                "(1 is an equal share, 2 twice one)."
            )
        if problems:
            errors[str(username)] = problems
    return errors


def _number(value) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def set_weights(user, team: Team, weights: dict) -> list[Share]:
    """Set members' weights (the team's leads, admins): all or none, audited. Returns the team's shares."""
    if not can_set_weights(user, team):
        raise PermissionDenied("Only the team's leads and admins set its members' weights.")
    errors = weight_problems(team, weights)
    if errors:
        raise ValidationError(errors)
    users = dict(team.memberships.filter(user__username__in=list(weights)).values_list("user__username", "user_id"))
    with transaction.atomic():
        found = MemberShare.objects.select_for_update().filter(team=team, user_id__in=users.values())
        rows = {ms.user_id: ms for ms in found}
        before, after = {}, {}
        for username, value in sorted(weights.items()):
            weight = float(value)
            row = rows.get(users[username])
            old = row.weight if row is not None else 1.0
            if old == weight:
                continue
            before[username], after[username] = old, weight
            if row is None:
                MemberShare.objects.create(team=team, user_id=users[username], weight=weight)
            else:
                row.weight = weight
                row.save(update_fields=["weight"])
        if after:
            audit.record(
                user,
                JobAuditAction.MEMBER_WEIGHTS,
                team,
                object_repr=f"member weights of {team.slug}",
                before=before,
                after=after,
                team=team,
            )
    return member_shares(team)


def can_set_weights(user, team: Team) -> bool:
    """The team's leads and admins."""
    return team_services.can_manage_members(user, team)
