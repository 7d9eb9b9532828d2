"""Fixtures shared by the jobs tests."""

from __future__ import annotations

import pytest

from jobs import kinds
from jobs.batch.kind import BatchKind
from jobs.kinds.base import Demand


class GangKind(BatchKind):
    """A test kind whose jobs are gangs: one pod per worker, each with the job's request."""

    name = "gang-test"  # Job.kind holds 12 characters

    def demand(self, job) -> Demand:
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=job.workers)


@pytest.fixture
def backend(cluster, monkeypatch, settings):
    """The ``cluster`` as the backend the log follower, the pages and the API reach, polled quickly."""
    settings.PORTAL_LOG_FOLLOW_SECONDS = 0.3
    cluster.watch_poll_interval = 0.05
    for where in ("jobs.livelog.get_backend", "jobs.views.get_backend", "jobs.api.views.get_backend"):
        monkeypatch.setattr(where, lambda: cluster)
    return cluster


@pytest.fixture
def gang_kind():
    kind = kinds.register(GangKind())
    yield kind
    kinds.unregister(kind.name)
