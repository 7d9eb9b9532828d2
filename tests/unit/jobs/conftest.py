"""Fixtures shared by the jobs tests."""

from __future__ import annotations

from pathlib import Path

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


@pytest.fixture
def cloud(cluster, clock, tmp_path, people):
    """The cloud cluster (cluster/scenarios/cloud.yaml: two 8 × H100 GKE nodes and four 4 × L4) registered beside
    the demo cluster, on the same clock; vision may hold 80 H100s. (row, its simulated cluster)."""
    from cluster.sim import SimulatedCluster
    from gpus.choices import ClusterHealth
    from gpus.models import Cluster, ResourceClass
    from gpus.reconcile import sync_inventory
    from jobs import actions
    from tests.sim_objects import H100

    row = Cluster.objects.create(name="cloud", display_name="GKE europe-west4", connection="simulated",
                                 sim_scenario="cloud", health=ClusterHealth.REACHABLE)  # fmt: skip
    scenario = Path(__file__).resolve().parents[3] / "cluster" / "scenarios" / "cloud.yaml"
    sim = SimulatedCluster(tmp_path / "cloud.json", scenario=str(scenario), clock=clock)
    sync_inventory(sim, row)
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 80, 80)
    return row, sim
