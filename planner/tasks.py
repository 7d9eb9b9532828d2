"""The planner's Celery task: a thin wrapper that runs one plan run's replay (planner.engine) and writes how it
goes onto the row. Progress and the cancel check touch the database at most every PROGRESS_EVERY_S seconds:
progress as one UPDATE of two fields (progress, message), cancel as one read of cancel_requested."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from django.utils import timezone

from . import engine, history, proposals, validation
from .choices import PlanState
from .models import PlanRun

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0
SOFT_LIMIT_S = 900
HARD_LIMIT_S = SOFT_LIMIT_S + 60
#: A queued run no worker has started after this long is failed (its message was lost, or no worker runs).
QUEUED_TOO_LONG = timedelta(hours=1)


class _Throttled:
    """The engine's progress and cancelled callbacks, each reaching the database at most once a PROGRESS_EVERY_S."""

    def __init__(self, pk: int, clock=time.monotonic):
        self.pk = pk
        self.clock = clock
        self.last_progress = self.last_check = float("-inf")
        self.stop = False

    def progress(self, fraction: float, message: str) -> None:
        now = self.clock()
        if now - self.last_progress < PROGRESS_EVERY_S:
            return
        self.last_progress = now
        fraction = max(0.0, min(1.0, float(fraction)))
        PlanRun.objects.filter(pk=self.pk, state=PlanState.RUNNING).update(progress=fraction, message=message[:300])

    def cancelled(self) -> bool:
        now = self.clock()
        if not self.stop and now - self.last_check >= PROGRESS_EVERY_S:
            self.last_check = now
            self.stop = PlanRun.objects.filter(pk=self.pk, cancel_requested=True).exists()
        return self.stop


def _finish(pk: int, state: str, **fields) -> None:
    PlanRun.objects.filter(pk=pk, state=PlanState.RUNNING).update(state=state, finished_at=timezone.now(), **fields)


@shared_task(name="planner.tasks.run_plan", ignore_result=True, soft_time_limit=SOFT_LIMIT_S, time_limit=HARD_LIMIT_S)
def run_plan(pk: int) -> str:
    """Replay run ``pk``: queued → running → succeeded (results kept), cancelled, or failed (a sentence why).
    A run that is no longer queued (cancelled meanwhile, or taken by another worker) is left alone."""
    started = PlanRun.objects.filter(pk=pk, state=PlanState.QUEUED, cancel_requested=False).update(
        state=PlanState.RUNNING, started_at=timezone.now(), progress=0.0, message="Reading the window's history…"
    )
    if not started:
        return "not queued"
    run = PlanRun.objects.get(pk=pk)
    hooks = _Throttled(pk)
    try:
        past = history.window_history(run.window_start, run.window_end)
        cluster = history.current_cluster()
        plans = [proposals.from_json(p) for p in run.proposals]
        options = validation.options_from_json(run.options)
        if run.cluster and run.cluster not in cluster.clusters:
            raise proposals.Invalid([f"there is no cluster {run.cluster} in the fleet any more."])
        results = engine.run_plan(
            past, cluster, plans, options, progress=hooks.progress, cancelled=hooks.cancelled, where=run.cluster
        )
    except engine.Cancelled:
        _finish(pk, PlanState.CANCELLED, message="Cancelled while it ran.")
        return PlanState.CANCELLED
    except proposals.Invalid as invalid:
        # The cluster changed between the request and the run (a node went away, a class was removed).
        _finish(
            pk,
            PlanState.FAILED,
            message="",
            error="The proposals no longer fit the cluster: " + " ".join(invalid.problems),
        )
        return PlanState.FAILED
    except SoftTimeLimitExceeded:
        _finish(
            pk,
            PlanState.FAILED,
            message="",
            error=f"The replay took longer than {SOFT_LIMIT_S // 60} minutes and "
            "was stopped; try a shorter window or fewer proposals.",
        )
        return PlanState.FAILED
    except Exception as error:
        log.exception("plan run %s failed", pk)
        _finish(
            pk,
            PlanState.FAILED,
            message="",
            error=f"The replay stopped with an error ({type(error).__name__}: "
            f"{str(error)[:300]}); the worker's log has the details.",
        )
        return PlanState.FAILED
    _finish(pk, PlanState.SUCCEEDED, results=results, progress=1.0, message="Done.")
    return PlanState.SUCCEEDED


@shared_task(name="planner.tasks.fail_stale_runs", ignore_result=True, soft_time_limit=50, time_limit=90)
def fail_stale_runs() -> int:
    """Beat, every five minutes: a run still running past the task's hard time limit lost its worker (killed,
    restarted), and a run queued for an hour was never picked up; each ends failed with that said, so no page
    shows a progress bar for ever."""
    now = timezone.now()
    lost = PlanRun.objects.filter(state=PlanState.RUNNING, started_at__lt=now - timedelta(seconds=HARD_LIMIT_S + 60))
    ended = lost.update(
        state=PlanState.FAILED,
        finished_at=now,
        message="",
        error="The worker replaying this run stopped (it was restarted or killed) before it finished; start it again.",
    )
    unstarted = PlanRun.objects.filter(state=PlanState.QUEUED, created_at__lt=now - QUEUED_TOO_LONG)
    ended += unstarted.update(
        state=PlanState.FAILED,
        finished_at=now,
        message="",
        error="No worker started this run within an hour (is a Celery worker running?); start it again.",
    )
    return ended
