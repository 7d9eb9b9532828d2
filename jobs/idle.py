"""Allocated but idle: running jobs whose GPUs have done (almost) nothing for a while.

The rule (docs/user-guide.md, "Idle GPUs"): a running job is *idle* when every utilisation reading of its
GPUs (whole GPUs or MIG instances, from the node agent or dcgm-exporter) in the last
``PORTAL_IDLE_WINDOW_SECONDS`` (default 30 minutes) is under ``PORTAL_IDLE_THRESHOLD_PCT`` (default 10%), it has
been running at least that long, and readings cover the window (the oldest one in it is no more than one
scrape interval after the window's start, and the newest no older than two intervals). Without readings a
job is never called idle — no data is not evidence of waste. ``Job.idle_since`` is the time of the last
reading at or above the threshold (or the first reading); it is cleared as soon as a reading crosses the
threshold again. Flagging is a conditional update, so the owner gets one notification per idle spell
even if two detections run at once.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Avg, Count, F, Max, Min
from django.urls import reverse
from django.utils import timezone

from core.notify import notify
from jobs.choices import JobState
from jobs.models import Job
from jobs.models.service import InferenceService
from telemetry.models import GpuSample


def detect_idle(now: datetime | None = None) -> dict[str, int]:
    now = now or timezone.now()
    window = timedelta(seconds=settings.PORTAL_IDLE_WINDOW_SECONDS)
    threshold = settings.PORTAL_IDLE_THRESHOLD_PCT
    slack = timedelta(seconds=max(2 * settings.PORTAL_DCGM_SCRAPE_INTERVAL, 60))
    running, was_idle = {}, set()
    for job_id, started_at, idle_since in Job.objects.filter(
        state__in=(JobState.RUNNING, JobState.PREEMPTING)
    ).values_list("id", "started_at", "idle_since"):
        running[job_id] = started_at
        if idle_since is not None:
            was_idle.add(job_id)
    recent = {
        row["job_id"]: row
        for row in GpuSample.objects.filter(job_id__in=running, ts__gte=now - window, ts__lte=now)
        .values("job_id")
        .annotate(n=Count("id"), peak=Max("util_pct"), mean=Avg("util_pct"), first=Min("ts"), last=Max("ts"))
        .order_by()
    }
    # Jobs whose readings in the window reach the threshold, and for the others when they last did.
    last_busy = dict(
        GpuSample.objects.filter(job_id__in=running, util_pct__gte=threshold)
        .values("job_id")
        .annotate(at=Max("ts"))
        .order_by()
        .values_list("job_id", "at")
    )
    first_seen = dict(
        GpuSample.objects.filter(job_id__in=[j for j in running if j not in last_busy])
        .values("job_id")
        .annotate(at=Min("ts"))
        .order_by()
        .values_list("job_id", "at")
    )
    flagged = cleared = 0
    utils: list[Job] = []
    for job_id, started_at in running.items():
        row = recent.get(job_id)
        util = row["mean"] if row else None
        utils.append(Job(pk=job_id, gpu_util_recent=util))
        idle = bool(
            row
            and row["n"]
            and row["peak"] is not None
            and row["peak"] < threshold
            and started_at is not None
            and now - started_at >= window
            and row["first"] <= now - window + slack
            and row["last"] >= now - slack
        )
        # Only the transitions are written one by one, each conditional, so one spell notifies once; the flag and
        # the owner's notice commit together (a worker dying between them would leave a spell never told).
        if idle:
            since = last_busy.get(job_id) or first_seen.get(job_id) or started_at
            with transaction.atomic():
                if Job.objects.filter(pk=job_id, idle_since__isnull=True).update(idle_since=since):
                    flagged += 1
                    _tell_owner(job_id, since, threshold)
        elif job_id in was_idle:
            cleared += Job.objects.filter(pk=job_id, idle_since__isnull=False).update(idle_since=None)
    Job.objects.bulk_update(utils, ["gpu_util_recent"], batch_size=500)
    # Finished jobs are no longer idle.
    Job.objects.exclude(state__in=(JobState.RUNNING, JobState.PREEMPTING)).filter(idle_since__isnull=False).update(
        idle_since=None
    )
    _mirror_services()
    return {"running": len(running), "flagged": flagged, "cleared": cleared}


def _mirror_services() -> None:
    """A service is idle while its job is (every replica's GPUs under the threshold, by the rule above):
    ``InferenceService.idle_since`` follows its job's, for the page's "lower the minimum" suggestion after a day.
    Services are never culled."""
    stale = (
        InferenceService.objects.exclude(idle_since=F("job__idle_since"))
        | InferenceService.objects.filter(idle_since__isnull=True, job__idle_since__isnull=False)
        | InferenceService.objects.filter(idle_since__isnull=False, job__idle_since__isnull=True)
    )
    for service_id, since in stale.distinct().values_list("id", "job__idle_since"):
        InferenceService.objects.filter(pk=service_id).update(idle_since=since)


def _tell_owner(job_id: int, since: datetime, threshold: float) -> None:
    job = Job.objects.select_related("owner", "resource_class").get(pk=job_id)
    if job.notebook_id is not None:
        return  # a notebook's owner hears from the notebook culler, with the time it will be stopped
    if hasattr(job, "inference_service"):
        return  # a service is never culled: its page suggests lowering the minimum after a day idle
    minutes = settings.PORTAL_IDLE_WINDOW_SECONDS // 60
    notify(
        job.owner,
        "job.idle",
        f"Job {job.name} holds GPUs it is not using",
        f"Its {job.count} × {job.resource_class.display_name} stayed under {threshold:g}% utilisation for "
        f"{minutes} minutes (idle since {since:%Y-%m-%d %H:%M} UTC). Cancel it if it is done, so others can use "
        "them.",
        reverse("jobs:job-detail", args=[job.pk]),
    )
