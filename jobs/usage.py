"""GPU time used, counted one way for the budget check (jobs.cycle) and the pages that show it (jobs.views)."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime

from django.db.models import Q

from .models import Job


def month_start(now: datetime) -> datetime:
    return now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def month_gpu_hours(team_ids, now: datetime) -> dict[tuple[int, int], float]:
    """Normalised GPU-hours each (team, resource class) used this calendar month (UTC), counted the way the
    admission cycle counts them against a budget: earlier preempted attempts plus the part of the current run
    that falls in this month."""
    month = month_start(now)
    jobs = (
        Job.objects.filter(team_id__in=team_ids)
        .filter(Q(started_at__isnull=False) | Q(charged_gpu_seconds__gt=0))
        .filter(Q(finished_at__isnull=True) | Q(finished_at__gte=month))
        .select_related("resource_class")
        .only("team_id", "resource_class__gpu_fraction", "count", "started_at", "finished_at", "charged_gpu_seconds")
    )
    seconds: dict[tuple[int, int], float] = defaultdict(float)
    for job in jobs:
        key = (job.team_id, job.resource_class_id)
        seconds[key] += job.charged_gpu_seconds
        if job.started_at:
            run = (job.finished_at or now) - max(job.started_at, month)
            seconds[key] += max(0.0, run.total_seconds()) * job.count * job.resource_class.gpu_fraction
    return {key: value / 3600 for key, value in seconds.items()}
