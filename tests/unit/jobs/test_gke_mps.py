"""A GKE node pool shared through NVIDIA MPS: GKE's MPS needs pods with hostIPC: true (GKE "Share GPUs with multiple
workloads using NVIDIA MPS"; vocab.cloud.GKE_MPS_NEEDS_HOST_IPC), which the portal never renders. Its class says so
on the class and submit pages, and a job asking for it waits with that reason instead of being placed there."""

from __future__ import annotations

import pytest

from accounts.models import Team
from cluster.sim import SimulatedCluster
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job

SCENARIO = """
kubernetes_version: v1.20.2
defaults: {driver: "550.54.15", cuda: "12.4"}
nodes:
  - name: gke-t4-mps-01
    managed: gke
    accelerator: nvidia-tesla-t4
    instance_type: n1-standard-16
    node_pool: mps-pool
    gpu: {product: Tesla T4, count: 1}
    mps: {replicas: 4}
    cpu: 16
    memory: 60Gi
  - name: gke-l4-01
    managed: gke
    accelerator: nvidia-l4
    instance_type: g2-standard-24
    gpu: {product: NVIDIA L4, count: 2}
    cpu: 24
    memory: 96Gi
"""
MPS_CLASS = "nvidia.com/gpu@Tesla-T4-SHARED"


@pytest.fixture
def gke(db, tmp_path, people):
    scenario = tmp_path / "gke.yaml"
    scenario.write_text(SCENARIO)
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=scenario)
    sync_inventory(sim)
    team = Team.objects.get(slug="vision")
    for rc in ResourceClass.objects.all():
        actions.set_quota(people["admin"], team, rc, 4, 4)
    return sim


def test_gke_mps_node_is_kept_off_with_the_reason(gke):
    node = Node.objects.get(name="gke-t4-mps-01")
    assert (node.provider, node.sharing_strategy, node.replicas) == ("gke", "mps", 4)
    assert "hostIPC" in node.blocked_reason
    assert Node.objects.gke_mps_class_keys() == {MPS_CLASS}
    rc = ResourceClass.objects.get(key=MPS_CLASS)
    assert (rc.kind, rc.total, rc.free) == ("mps", 4, 0)
    assert "hostIPC" not in Node.objects.get(name="gke-l4-01").blocked_reason


def test_a_job_for_the_gke_mps_class_waits_and_says_why(gke, people):
    values = dict(
        name="share", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["sleep", "30"], args=[], env=[], count=1,
        cpu_millicores=1000, memory_mb=2048, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    team = Team.objects.get(slug="vision")
    job = actions.submit_job(people["alice"], team, ResourceClass.objects.get(key=MPS_CLASS), values).job
    run_cycle(gke)
    job = Job.objects.get(pk=job.pk)
    assert job.state == JobState.QUEUED and not job.node_name
    assert job.wait_reason == "never_fits"
    assert "hostIPC" in job.wait_message and job.wait_detail["kept_off"]
    assert gke.list_workloads("team-vision") == []


def test_class_and_submit_pages_say_portal_jobs_cannot_use_it(gke, client, people):
    client.force_login(people["alice"])
    classes = client.get("/resource-classes/").content.decode()
    assert 'data-testid="gke-mps-note"' in classes and "hostIPC" in classes
    form = client.get("/jobs/new/").content.decode()
    assert 'data-testid="gke-mps-note"' in form and "cannot run portal jobs" in form
