"""The demo's DRA lab (issue 33): beside whole H100s and dynamic-MIG A100s, the admin shares the lab's L4 class by
time-slicing among 4 users a GPU, and team nlp's embed-small service runs its 2 replicas on one L4 through one
ResourceClaim carrying NVIDIA's time-slicing config; the job on the whole-GPU class still claims from a template."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from gpus.demo import DEMO_DRA, seed_fleet
from gpus.fleet import backend_of
from gpus.models import Cluster, ResourceClass
from gpus.reconcile import sync_inventory
from jobs.cycle.run import cluster_cycle, run_cycle
from jobs.demo import DRA_L4, seed_quotas_and_jobs
from jobs.models import Quota
from jobs.models.service import InferenceService
from tests.sim_objects import DEMO_SCENARIO


@pytest.mark.django_db
def test_the_demo_lab_shares_an_l4_among_a_services_replicas_through_one_claim(tmp_path, people, settings):
    settings.PORTAL_DATA_DIR = str(tmp_path)
    home = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    sync_inventory(home)
    seed_fleet()
    seed_quotas_and_jobs()
    l4 = ResourceClass.objects.get(key=DRA_L4)
    assert (l4.sharing_strategy, l4.replicas, l4.total) == ("time-slicing", 4, 16)  # 4 L4s, 4 users each
    assert Quota.objects.get(team__slug="nlp", resource_class=l4).guaranteed == 4
    lab = Cluster.objects.get(name=DEMO_DRA)
    backend = backend_of(lab)
    for _ in range(2):
        run_cycle(home, fleet=[])
        cluster_cycle(lab, backend)
    service = InferenceService.objects.get(name="embed-small")
    claims = [c for c in backend.list_resource_claims("team-nlp") if c["metadata"]["name"].startswith("embed-small")]
    assert [c["spec"]["devices"]["config"][0]["opaque"]["parameters"]["sharing"] for c in claims] == [
        {"strategy": "TimeSlicing"}
    ]
    pods = [p for p in backend.list_pods("team-nlp") if p["metadata"]["name"].startswith(f"{service.name}-")]
    assert len(pods) == 2
    assert {p["spec"]["resourceClaims"][0].get("resourceClaimName") for p in pods} == {claims[0]["metadata"]["name"]}
    assert claims[0]["status"]["allocation"]["devices"]["results"][0]["device"].startswith("gpu-")
