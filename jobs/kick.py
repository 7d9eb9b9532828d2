"""Ask a worker for a job cycle now, after the current transaction commits.

The periodic cycle (beat) runs anyway; a kick only makes a submission, a cancel or a quota change take effect
sooner. The task is sent by name, so this module imports no task module and the task modules may import
everything that kicks without a cycle.

With the broker down a kick fails soft: it is tried twice within a fraction of a second (not kombu's default
patience, which a person submitting would wait through), logged, and dropped. The job is already committed as
Queued, and the first cycle beat enqueues once the broker is back admits it (tests/integration/test_faults_redis.py).

Kicks coalesce when the cache is shared by every process (CACHE_URL on Redis, as deploy/ and docker-compose set it):
one kick marks a cycle as asked for, and later kicks send nothing until a cycle *starts* (``cycle_starting`` clears
the mark), because that cycle reads the queue after every change committed before it started. A hundred pipelines
submitting in the same second then cost one cycle, not a hundred queued behind each other. With a per-process cache
(the embedded default) a worker could never clear the web process's mark, so every kick is sent, as before.
"""

from __future__ import annotations

import logging

from celery import current_app
from django.core.cache import caches
from django.core.cache.backends.dummy import DummyCache
from django.core.cache.backends.locmem import LocMemCache
from django.db import transaction

log = logging.getLogger(__name__)

RUN_CYCLE_TASK = "jobs.tasks.run_cycle"
#: How hard a kick tries to reach the broker: one retry, 0.1 s later.
KICK_RETRY_POLICY = {"max_retries": 1, "interval_start": 0.1, "interval_step": 0.1, "interval_max": 0.1}


#: The shared cache's mark of a cycle asked for and not started yet; it lapses on its own after this many seconds
#: (a kick the broker lost, or one that expired unrun, stops holding the next ones back).
CYCLE_ASKED_KEY = "jobs:cycle-asked"
CYCLE_ASKED_SECONDS = 30


def _shared_cache() -> bool:
    return not isinstance(caches["default"], LocMemCache | DummyCache)


def kick_admission() -> None:
    """Queue a job cycle now (the periodic one runs anyway); nothing when one is asked for and not started yet."""
    shared = _shared_cache()
    try:
        if shared and not caches["default"].add(CYCLE_ASKED_KEY, 1, CYCLE_ASKED_SECONDS):
            return  # a cycle is already asked for; it starts after this commit and reads this change
        # A stale kick is pointless (beat runs cycles anyway): it expires.
        current_app.send_task(RUN_CYCLE_TASK, expires=120, retry_policy=KICK_RETRY_POLICY)
    except Exception:  # the broker being down must not fail a submission; beat's cycle picks the job up
        log.warning("could not queue an admission cycle; the periodic one will admit the job", exc_info=True)
        if shared:
            _forget_mark()


def cycle_starting() -> None:
    """A job cycle is about to read the queue: changes committed from now on kick a cycle of their own."""
    if _shared_cache():
        _forget_mark()


def _forget_mark() -> None:
    try:
        caches["default"].delete(CYCLE_ASKED_KEY)
    except Exception:  # the cache being down costs at most CYCLE_ASKED_SECONDS of kicks; beat's cycles go on
        log.warning("could not clear the cycle's kick mark", exc_info=True)


def kick_after_commit() -> None:
    transaction.on_commit(kick_admission)


RECONCILE_VOLUMES_TASK = "jobs.tasks.reconcile_volumes"


def kick_volume_reconcile() -> None:
    """Queue a volume reconcile now (a dataset was published or unpublished; beat runs one every minute anyway)."""
    try:
        current_app.send_task(RECONCILE_VOLUMES_TASK, expires=120, retry_policy=KICK_RETRY_POLICY)
    except Exception:  # the broker being down must not fail the admin's change; beat's reconcile catches up
        log.warning("could not queue a volume reconcile; the periodic one will publish the dataset", exc_info=True)
