"""Fixtures shared by the jobs tests."""

from __future__ import annotations

import pytest

from jobs import kinds
from jobs.kinds.base import Demand
from jobs.kinds.batch import BatchKind


class GangKind(BatchKind):
    """A test kind whose jobs are gangs: one pod per worker, each with the job's request."""

    name = "gang-test"  # Job.kind holds 12 characters

    def demand(self, job) -> Demand:
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=job.workers)


@pytest.fixture
def gang_kind():
    kind = kinds.register(GangKind())
    yield kind
    kinds.unregister(kind.name)
