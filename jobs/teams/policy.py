"""A team's notebook policy, set by admins from the team's admin pages (issue 18). Without a row the
PORTAL_NOTEBOOK_* settings apply (jobs.models.NotebookPolicy.for_team); setting one stores a row, resetting
deletes it. Both are audited with the policy before and after."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import audit
from jobs.choices import JobAuditAction
from jobs.models import NotebookPolicy
from vocab.durations import WORDS, duration_text

POLICY_FIELDS = ["ttl_seconds", "max_ttl_seconds", "idle_timeout_seconds", "max_idle_timeout_seconds"]
#: Every duration of a policy lies within these (10 minutes to 30 days).
SHORTEST, LONGEST = 10 * 60, 30 * 86400

LABELS = {
    "ttl_seconds": "session length",
    "max_ttl_seconds": "longest session",
    "idle_timeout_seconds": "idle timeout",
    "max_idle_timeout_seconds": "longest idle timeout",
}


def policy_problems(values: dict[str, int | None]) -> dict[str, list[str]]:
    """Every problem with a policy at once, each saying what to change."""
    errors: dict[str, list[str]] = {}
    for field in POLICY_FIELDS:
        value = values.get(field)
        if value is None:
            errors[field] = [f"Give the {LABELS[field]}, e.g. 8 hours."]
        elif not SHORTEST <= value <= LONGEST:
            errors[field] = [
                f"The {LABELS[field]} is {duration_text(value, WORDS)}; give between "
                f"{duration_text(SHORTEST, WORDS)} and 30 days."
            ]
    for low, high in (("ttl_seconds", "max_ttl_seconds"), ("idle_timeout_seconds", "max_idle_timeout_seconds")):
        if low in errors or high in errors:
            continue
        if values[high] < values[low]:
            errors[high] = [
                f"The {LABELS[high]} ({duration_text(values[high], WORDS)}) must be at least the {LABELS[low]} "
                f"({duration_text(values[low], WORDS)}); raise it or lower the {LABELS[low]}."
            ]
    return errors


def _require_admin(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only admins can change a team's notebook policy.")


def set_notebook_policy(user, team, values: dict[str, int | None]) -> NotebookPolicy:
    _require_admin(user)
    errors = policy_problems(values)
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        policy = NotebookPolicy.objects.select_for_update().filter(team=team).first()
        before = audit.snapshot(policy, POLICY_FIELDS) if policy else None
        policy = policy or NotebookPolicy(team=team)
        for field in POLICY_FIELDS:
            setattr(policy, field, values[field])
        policy.save()
        after = audit.snapshot(policy, POLICY_FIELDS)
        if before != after:
            audit.record(
                user,
                JobAuditAction.NOTEBOOK_POLICY,
                policy,
                object_repr=f"notebook policy of {team.slug}",
                before=before,
                after=after,
                team=team,
            )
    return policy


def reset_notebook_policy(user, team) -> None:
    """Back to the portal's defaults (the PORTAL_NOTEBOOK_* settings)."""
    _require_admin(user)
    with transaction.atomic():
        policy = NotebookPolicy.objects.select_for_update().filter(team=team).first()
        if policy is None:
            return
        audit.record(
            user,
            JobAuditAction.NOTEBOOK_POLICY,
            policy,
            object_repr=f"notebook policy of {team.slug}",
            before=audit.snapshot(policy, POLICY_FIELDS),
            after=None,
            team=team,
        )
        policy.delete()
