"""The job cycle with its metrics recorded: how long it took, what it decided, and how long each job it admitted
had waited (``core.metrics``). Kept apart from ``jobs.cycle.run`` so the cycle's logic stays free of bookkeeping.

Waits are read back in one query (the jobs whose ``admitted_at`` falls within this cycle), not threaded through
the admission code; a wait runs from submission to admission, so a requeued job's wait includes its earlier run.
Two cycles overlapping in time (two workers) may both observe a job the other admitted; admission is serialised
by the admission lock and beat enqueues one cycle at a time, so that is rare and only skews the histogram.
"""

from __future__ import annotations

import time

from django.utils import timezone

from cluster.base import ClusterBackend
from core.metrics import observe_cycle
from jobs.cycle import run as cycle
from jobs.models import Job


def run_observed_cycle(backend: ClusterBackend, fleet: list | None = None) -> cycle.CycleResult:
    """``cycle.run_cycle(backend, fleet=fleet)``, observed."""
    started_at = timezone.now()
    started = time.perf_counter()
    result = cycle.run_cycle(backend, fleet=fleet)
    seconds = time.perf_counter() - started
    waits = []
    if result.admitted:
        admitted = Job.objects.filter(admitted_at__gte=started_at).values_list(
            "team__slug", "resource_class__key", "submitted_at", "admitted_at"
        )
        waits = [(team, key, (at - submitted).total_seconds()) for team, key, submitted, at in admitted]
    observe_cycle(result, seconds, waits)
    return result
