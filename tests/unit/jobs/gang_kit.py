"""A test job kind whose jobs are gangs, for tests of the cycle that must not depend on a real kind's rules: the cycle
asks a kind for a job's demand, never its name (the ``gang_kind`` fixture registers it)."""

from __future__ import annotations

from jobs.batch.kind import BatchKind
from jobs.kinds.base import Demand


class GangKind(BatchKind):
    """A test kind whose jobs are gangs: one pod per worker, each with the job's request."""

    name = "gang-test"  # Job.kind holds 12 characters

    def demand(self, job) -> Demand:
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=job.workers)
