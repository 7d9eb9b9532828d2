"""A queued job's start-time estimate in words (jobs.cycle.estimates computes it): what the job page, the job list,
the API's ``estimated_start.text`` and the wait stream say."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone


def phrase(
    low: datetime | None, high: datetime | None, at: datetime | None, horizon_s: float | None = None, cluster: str = ""
) -> str:
    """The estimate in words (the job page, the list, the CLI say the same): "" when there is none yet. On a fleet,
    the cluster it is likely to start on follows ("… on cloud")."""
    words = _words(low, high, at, horizon_s)
    return f"{words} on {cluster}" if words and cluster and low is not None else words


def _words(low: datetime | None, high: datetime | None, at: datetime | None, horizon_s: float | None) -> str:
    if at is None:
        return ""
    hours = round((horizon_s if horizon_s is not None else settings.PORTAL_ESTIMATE_HORIZON) / 3600)
    if low is None:
        return f"not within the next {hours} hours"
    low_s = _clock(low, at)
    if high is None:
        return f"likely after {low_s} (possibly not within the next {hours} hours)"
    if high - low < timedelta(minutes=1):
        return f"likely at about {low_s}"
    return f"likely between {low_s} and {_clock(high, at)}"


def _clock(when: datetime, at: datetime) -> str:
    """The time of day, with the weekday when it is not the day of ``at``."""
    local = timezone.localtime(when)
    return local.strftime("%H:%M") if local.date() == timezone.localtime(at).date() else local.strftime("%a %H:%M")
