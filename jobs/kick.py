"""Ask a worker for a job cycle now, after the current transaction commits.

The periodic cycle (beat) runs anyway; a kick only makes a submission, a cancel or a quota change take effect
sooner. The task is sent by name, so this module imports no task module and the task modules may import
everything that kicks without a cycle.

With the broker down a kick fails soft: it is tried twice within a fraction of a second (not kombu's default
patience, which a person submitting would wait through), logged, and dropped. The job is already committed as
Queued, and the first cycle beat enqueues once the broker is back admits it (tests/integration/test_faults_redis.py).
"""

from __future__ import annotations

import logging

from celery import current_app
from django.db import transaction

log = logging.getLogger(__name__)

RUN_CYCLE_TASK = "jobs.tasks.run_cycle"
#: How hard a kick tries to reach the broker: one retry, 0.1 s later.
KICK_RETRY_POLICY = {"max_retries": 1, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 0.1}


def kick_admission() -> None:
    """Queue a job cycle now (the periodic one runs anyway)."""
    try:
        # A stale kick is pointless (beat runs cycles anyway): it expires.
        current_app.send_task(RUN_CYCLE_TASK, expires=120, retry_policy=KICK_RETRY_POLICY)
    except Exception:  # the broker being down must not fail a submission; beat's cycle picks the job up
        log.warning("could not queue an admission cycle; the periodic one will admit the job", exc_info=True)


def kick_after_commit() -> None:
    transaction.on_commit(kick_admission)


RECONCILE_VOLUMES_TASK = "jobs.tasks.reconcile_volumes"


def kick_volume_reconcile() -> None:
    """Queue a volume reconcile now (a dataset was published or unpublished; beat runs one every minute anyway)."""
    try:
        current_app.send_task(RECONCILE_VOLUMES_TASK, expires=120, retry_policy=KICK_RETRY_POLICY)
    except Exception:  # the broker being down must not fail the admin's change; beat's reconcile catches up
        log.warning("could not queue a volume reconcile; the periodic one will publish the dataset", exc_info=True)
