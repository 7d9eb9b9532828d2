"""Start-time estimates, refreshed by the admission cycle (jobs.cycle.admit) at most every
``PORTAL_ESTIMATE_EVERY`` seconds: the cycle's own snapshot replayed forward (jobs.scheduling.estimate) with run
lengths learned from the work finished in the last ``PORTAL_ESTIMATE_LEARN_DAYS`` days (jobs.scheduling.runtimes),
written to the queued jobs' ``estimated_start_low``/``estimated_start_high``/``estimated_at``.

Cost: two queries (the finished work's lengths, the image, command and start of the queued and running jobs), two
bounded passes (jobs.scheduling.estimate) and one UPDATE per distinct answer (they fall on the estimate's step
grid). Which worker refreshes is decided by an atomic
``cache.add`` of a key that lives ``PORTAL_ESTIMATE_EVERY`` seconds, so a fleet of workers refreshes once.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from jobs.choices import ACTIVE_STATES, JobState
from jobs.cycle.admit import FleetKeys, build_snapshot
from jobs.models import Job
from jobs.scheduling import estimate
from jobs.scheduling.runtimes import Runtimes, Work
from jobs.scheduling.snapshot import JobView, Snapshot

log = logging.getLogger(__name__)

DUE_KEY = "jobs:estimates:refreshed"
#: The estimate's grid: the horizon in this many steps (5 minutes of 6 hours), never finer than the cycle.
STEPS_PER_HORIZON = 72
#: Most ids one UPDATE names.
WRITE_CHUNK = 5000
#: Most finished jobs read to learn from (the newest).
LEARN_ROWS = 50_000


def command_key(command) -> str:
    return " ".join(str(part) for part in command)[:300] if isinstance(command, list) else str(command)[:300]


def learn(now: datetime) -> Runtimes:
    """Run lengths of the work that finished (succeeded, or failed after it ran) in the learning window: one query."""
    since = now - timedelta(days=settings.PORTAL_ESTIMATE_LEARN_DAYS)
    rows = (
        Job.objects.filter(
            finished_at__gte=since, started_at__isnull=False, state__in=(JobState.SUCCEEDED, JobState.FAILED)
        )
        .order_by("-finished_at")
        .values_list("team_id", "owner_id", "resource_class_id", "image", "command", "started_at", "finished_at")[
            :LEARN_ROWS
        ]
    )
    pairs = [
        (Work(team, owner, rc, image, command_key(command)), (finished - started).total_seconds())
        for team, owner, rc, image, command, started, finished in rows
    ]
    pairs.reverse()
    return Runtimes.learn(pairs)


def bounds() -> estimate.Bounds:
    return estimate.Bounds(
        horizon_s=settings.PORTAL_ESTIMATE_HORIZON,
        max_steps=settings.PORTAL_ESTIMATE_MAX_STEPS,
        step_s=max(settings.PORTAL_JOB_CYCLE_INTERVAL, settings.PORTAL_ESTIMATE_HORIZON / STEPS_PER_HORIZON),
        grace_s=settings.PORTAL_PREEMPTION_GRACE,
    )


def compute(
    snap: Snapshot, runtimes: Runtimes, works: dict[int, tuple[Work, float | None]]
) -> dict[int, estimate.Range]:
    """Every queued job's range. ``works``: job id → (its work, when it started, epoch seconds, or None)."""
    now = snap.now

    def model(q: float):
        def end_of(job: JobView) -> float:
            work, started = works.get(job.id, (None, None))
            begun = started if started is not None else now
            total = runtimes.predict(work, q, job.max_runtime_s, elapsed_s=max(0.0, now - begun))
            return begun + total

        def run_of(job: JobView) -> float:
            work, _ = works.get(job.id, (None, None))
            return runtimes.predict(work, q, job.max_runtime_s)

        return end_of, run_of

    low, high = settings.PORTAL_ESTIMATE_QUANTILES
    return estimate.ranges(snap, model(low), model(high), bounds())


def due() -> bool:
    """Whether a refresh may run now: not within the interval of the last one (one worker's, when several run the
    task). The mark lives a little less than the interval, so beat's next send, every PORTAL_ESTIMATE_EVERY
    seconds, finds it gone rather than a moment before it goes (which would halve the refresh rate)."""
    every = settings.PORTAL_ESTIMATE_EVERY
    return every > 0 and cache.add(DUE_KEY, 1, timeout=max(1, int(every * 0.9)))


def refresh_now(now: datetime | None = None) -> int:
    """The refresh the beat task runs (jobs.tasks.refresh_estimates), beside the job cycle rather than in it: the
    replay costs several cycles at scale (docs/benchmarks.md section 9), so it must not hold up the control loop.
    At most once every PORTAL_ESTIMATE_EVERY seconds (0: never); on the queue as admission sees it now. An estimate
    that cannot be made is logged and leaves every job its last one. How many jobs it wrote."""
    if not due():
        return 0
    now = now or timezone.now()
    try:
        snap, _ = build_snapshot(now, FleetKeys())
        return refresh(snap, set(), now)
    except Exception:
        log.exception("start-time estimates were not refreshed")
        return 0


def refresh(snap: Snapshot, admitted: set[int], now: datetime) -> int:
    """Compute and write the estimates of the snapshot's queued jobs (less those just admitted); how many written."""
    rows = Job.objects.filter(state__in=(JobState.QUEUED, *ACTIVE_STATES)).values_list(
        "id", "team_id", "owner_id", "resource_class_id", "image", "command", "started_at"
    )
    works = {
        job_id: (Work(team, owner, rc, image, command_key(command)), started.timestamp() if started else None)
        for job_id, team, owner, rc, image, command, started in rows
    }
    found = compute(snap, learn(now), works)
    stamp = timezone.now()
    fleet = len({node.cluster for node in snap.nodes.values()}) > 1  # the cluster is worth saying
    # One UPDATE per distinct (low, high, cluster): the answers fall on the estimate's step grid, so there are few.
    by_answer: dict[tuple, list[int]] = defaultdict(list)
    for job_id, span in found.items():
        if job_id in admitted or job_id not in works:
            continue  # admitted this cycle; or a view that is no job row (a service's replicas above its minimum)
        by_answer[(span.low, span.high, span.cluster if fleet else "")].append(job_id)
    # A job admitted or cancelled meanwhile may get one too: it is shown only while the job is queued.
    for (low, high, cluster), ids in by_answer.items():
        for chunk in range(0, len(ids), WRITE_CHUNK):
            Job.objects.filter(pk__in=ids[chunk : chunk + WRITE_CHUNK]).update(
                estimated_start_low=_when(low), estimated_start_high=_when(high), estimated_at=stamp,
                estimated_cluster=cluster,
            )  # fmt: skip
    return sum(len(ids) for ids in by_answer.values())


def _when(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None
