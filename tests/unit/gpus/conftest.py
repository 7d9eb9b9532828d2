"""Fixtures shared by the GPU inventory and node configuration tests."""

import pytest

MIG_1G = "nvidia.com/mig-1g.10gb@NVIDIA-A100-SXM4-80GB"


@pytest.fixture
def sim(db, tmp_path, clock, people, settings):
    """The demo cluster on the simulated ``clock``, reconciled into the inventory (tests/factories.py's
    simulated_cluster, no quotas), with node configuration's drain and apply timings short."""
    from tests.factories import simulated_cluster

    settings.PORTAL_NODE_CONFIG_DRAIN_GRACE = 60
    settings.PORTAL_NODE_CONFIG_DRAIN_TIMEOUT = 600
    settings.PORTAL_NODE_CONFIG_APPLY_TIMEOUT = 300
    return simulated_cluster(tmp_path / "sim.json", clock)


@pytest.fixture
def mig_quota(sim, people):
    """Teams vision and nlp get a quota of 8 guaranteed, 16 at most, of the demo's A100 1g.10gb MIG slices."""
    from accounts.models import Team
    from gpus.models import ResourceClass
    from jobs import actions

    rc = ResourceClass.objects.get(key=MIG_1G)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], Team.objects.get(slug=slug), rc, 8, 16)
    return rc
