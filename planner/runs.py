"""Making and cancelling plan runs: the one home of a run's transitions outside the worker (planner.tasks has the
worker's). Each is a conditional UPDATE on the row's state, audited; a new run is queued once its row commits."""

from __future__ import annotations

import logging

from celery import current_app
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.utils import timezone

from core import audit

from . import access
from .choices import ACTIVE_PLAN_STATES, PlannerAuditAction, PlanState
from .models import PlanRun
from .validation import PlanRequest

log = logging.getLogger(__name__)

RUN_PLAN_TASK = "planner.tasks.run_plan"


def create_run(user, request: PlanRequest) -> PlanRun:
    """Save a validated request as a queued run, audit it, and hand it to a worker once committed."""
    if not access.can_run(user):
        raise PermissionDenied("Only portal admins can run the capacity planner.")
    with transaction.atomic():
        run = PlanRun.objects.create(
            created_by=user,
            window_start=request.start,
            window_end=request.end,
            cluster=request.cluster,
            proposals=request.proposals_json,
            options=request.options_json,
            message="Waiting for a worker.",
        )
        audit.record(
            user,
            PlannerAuditAction.PLAN_CREATE,
            run,
            after={
                "window_start": run.window_start.isoformat(),
                "window_end": run.window_end.isoformat(),
                "cluster": run.cluster or "(fleet)",
                "proposals": run.proposal_names,
                "options": run.options,
            },
        )
        transaction.on_commit(lambda: _enqueue(run.pk))
    return run


def _enqueue(pk: int) -> None:
    try:
        current_app.send_task(RUN_PLAN_TASK, args=[pk])
    except Exception:  # the broker is down: say so on the run rather than leave it queued for ever
        log.warning("could not queue plan run %s", pk, exc_info=True)
        PlanRun.objects.filter(pk=pk, state=PlanState.QUEUED).update(
            state=PlanState.FAILED,
            error="The portal could not hand the run to a worker (the task queue did not answer); start it again.",
            finished_at=timezone.now(),
        )


def cancel_run(user, run: PlanRun) -> PlanRun:
    """Stop a queued or running run. A queued one ends now; a running one is asked to stop and the worker ends it
    at its next check (within a second or two). Cancelling an ended run changes nothing and says so."""
    if not access.can_run(user):
        raise PermissionDenied("Only portal admins can cancel a plan run.")
    with transaction.atomic():
        now = timezone.now()
        ended = PlanRun.objects.filter(pk=run.pk, state=PlanState.QUEUED).update(
            state=PlanState.CANCELLED, cancel_requested=True, finished_at=now, message="Cancelled before it started."
        )
        asked = ended or PlanRun.objects.filter(pk=run.pk, state__in=ACTIVE_PLAN_STATES).update(
            cancel_requested=True, message="Cancelling…"
        )
        if not asked:
            run.refresh_from_db()
            raise RunEnded(f"Plan run #{run.pk} has already {run.state}; there is nothing to cancel.")
        audit.record(user, PlannerAuditAction.PLAN_CANCEL, run, before={"state": run.state})
    run.refresh_from_db()
    return run


class RunEnded(Exception):
    """Cancel on a run that has already ended."""
