"""Fixtures shared by the jobs tests."""

from __future__ import annotations

import pytest

from jobs import kinds

from .gang_kit import GangKind


@pytest.fixture
def backend(cluster, monkeypatch, settings):
    """The ``cluster`` as the backend the log follower, the pages and the API reach, polled quickly."""
    settings.PORTAL_LOG_FOLLOW_SECONDS = 0.3
    cluster.watch_poll_interval = 0.05
    for where in ("gpus.fleet.get_backend",):
        monkeypatch.setattr(where, lambda: cluster)
    return cluster


@pytest.fixture
def gang_kind():
    """GangKind (tests/unit/jobs/gang_kit.py) registered for the test."""
    kind = kinds.register(GangKind())
    yield kind
    kinds.unregister(kind.name)
