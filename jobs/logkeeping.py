"""Logs that stay: a container's log is kept (``JobLog``) when it ends and before the portal deletes its workload.

Keeping is level-triggered and safe to re-run: ``keep`` reads a pod's log only if no log of that pod is kept yet,
and the unique (job, pod) constraint makes a second writer a no-op. Two kinds of callers:

- the job cycle, each time it sees an ended container whose log is not kept (``keep`` with ``last_chance=False``:
  a log the node cannot serve now is tried again next cycle), and
- every path that deletes a workload (a cancelled job's leftovers, a preempted attempt, a failed pull, a stopped
  notebook), just before the delete (``last_chance=True``: if the log cannot be read, a note says why, so the job
  page says so instead of a raw ``pods "…" not found``).

Only the last ``PORTAL_LOG_MAX_BYTES`` are kept (the end of a log says why it ended); the first bytes cut are
counted and the page and download say so. ``expire`` deletes logs kept longer than ``PORTAL_LOG_RETENTION_DAYS``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from cluster.base import ClusterBackend, ClusterError, NotFound
from jobs.choices import JobState
from jobs.models import Job, JobLog
from vocab.durations import duration_text

log = logging.getLogger(__name__)


def read_capped(lines: Iterable[str], cap: int) -> tuple[str, int, int]:
    """(the last ``cap`` bytes of the text, bytes in all, bytes cut from the start), reading line by line so a
    huge log never sits in memory whole. A cut falls on a line boundary unless one line alone is over the cap."""
    kept: deque[bytes] = deque()
    kept_bytes = total = 0
    for line in lines:
        data = line.encode("utf-8", errors="replace")
        total += len(data)
        kept.append(data)
        kept_bytes += len(data)
        while kept_bytes > cap and kept:
            if len(kept) == 1:  # one line longer than the cap: keep its end
                kept[0] = kept[0][kept_bytes - cap :]
                kept_bytes = cap
                break
            kept_bytes -= len(kept.popleft())
    text = b"".join(kept).decode("utf-8", errors="replace")
    return text, total, total - kept_bytes


def container_name(pod: dict | None) -> str:
    containers = ((pod or {}).get("spec") or {}).get("containers") or []
    return containers[0].get("name", "") if containers else ""


def keep(
    backend: ClusterBackend,
    job: Job,
    pod_name: str,
    *,
    container: str = "",
    last_chance: bool = False,
    now: datetime | None = None,
) -> JobLog | None:
    """Keep the log of ``job``'s pod ``pod_name`` unless it is kept already; returns the kept log (or None when
    nothing was kept: no pod, the pod is gone, or the log cannot be read now and a later cycle tries again)."""
    if not pod_name:
        return None
    existing = JobLog.objects.filter(job=job, pod_name=pod_name).first()
    if existing is not None:
        return existing
    now = now or timezone.now()
    text, total, cut, note = "", 0, 0, ""
    try:
        text, total, cut = read_capped(
            backend.stream_pod_log(job.team.namespace, pod_name, follow=False), settings.PORTAL_LOG_MAX_BYTES
        )
    except NotFound:
        return None  # the pod is gone already: there is nothing left to keep
    except ClusterError as error:
        if not last_chance:
            log.info("log of job %s pod %s not readable now (tried again next cycle): %s", job.pk, pod_name, error)
            return None
        note = f"The log could not be read before the workload was deleted: {error}"
    try:
        with transaction.atomic():
            return JobLog.objects.create(
                job=job, attempt=max(1, job.attempts), pod_name=pod_name, container=container, text=text,
                total_bytes=total, cut_bytes=cut, note=note, kept_at=now,
            )  # fmt: skip
    except IntegrityError:  # another cycle kept it first
        return JobLog.objects.filter(job=job, pod_name=pod_name).first()


def kept_pods(job_ids: Iterable[int]) -> set[tuple[int, str]]:
    """(job id, pod name) of every kept log of these jobs, in one query (so a cycle asks once, not per job)."""
    return set(JobLog.objects.filter(job_id__in=list(job_ids)).values_list("job_id", "pod_name"))


def expire(now: datetime | None = None) -> int:
    """Delete logs kept longer than ``PORTAL_LOG_RETENTION_DAYS``; returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.PORTAL_LOG_RETENTION_DAYS)
    deleted, _ = JobLog.objects.filter(kept_at__lt=cutoff).delete()
    return deleted


# -- what the job page and the API show -----------------------------------------------------------------------


@dataclass
class LogView:
    """What a job's log section shows: ``live`` (the pod is there: read it, and follow it while it runs),
    ``kept`` (a kept log) or neither, with ``note`` saying plainly why there is no log."""

    live: bool = False
    follow: bool = False
    kept: JobLog | None = None
    note: str = ""


def log_view(job: Job, kept: list[JobLog]) -> LogView:
    """Which log the job page shows: the pod's own while it is the current attempt's and not kept yet, else the
    kept log of the current (or latest) pod, else a sentence saying why there is none."""
    current = next((entry for entry in kept if entry.pod_name == job.pod_name), None) if job.pod_name else None
    if current is not None:
        return LogView(kept=current, note=current.note)
    if job.pod_name and job.state != JobState.LOST:
        return LogView(live=True, follow=job.state in (JobState.RUNNING, JobState.PREEMPTING))
    if kept:
        return LogView(kept=kept[-1], note=kept[-1].note)
    return LogView(note=no_pod_text(job))


def no_pod_text(job: Job) -> str:
    """A job with no pod and no kept log: say plainly why there is no log."""
    waited = duration_text(((job.finished_at or timezone.now()) - job.submitted_at).total_seconds())
    if job.state == JobState.QUEUED:
        return "No log yet: the job waits in the queue and has no pod. The box above says why it waits."
    if job.state == JobState.ADMITTED:
        return "No log yet: the job was admitted and its pod is being created."
    if job.state == JobState.CANCELLED:
        return (
            f"This job never started a pod: it waited in the queue for {waited} and was cancelled before the "
            "cluster ran it, so there is no log."
        )
    if job.state == JobState.LOST:
        return "The workload disappeared from the cluster before its log could be kept."
    if job.state in (JobState.FAILED, JobState.SUCCEEDED) and not job.started_at:
        return (
            f"This job never started a pod that ran: it ended ({job.get_state_display().lower()}) after {waited} "
            "before its container started, so there is no log. The timeline says why."
        )
    return "The pod of this job is gone and its log was not kept."
