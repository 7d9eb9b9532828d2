"""Pinning a job to a CPU architecture (kubernetes.io/arch, Kubernetes "Well-Known Labels"): the form and the API
refuse an architecture the class's nodes do not have (with every other problem at once), placement only uses nodes
of that architecture and says when none can take it, and the pod gets the nodeSelector."""

from __future__ import annotations

import pytest

from accounts.models import Team
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job
from jobs.render import render_job
from tests.factories import simulated_cluster, submit_job
from vocab.names import DRIVER_UPGRADE_FAILED, GPU_DRIVER_UPGRADE_STATE_LABEL

# Two nodes of one class, one per architecture, and an arm64-only class (the sim's catalogue has no Grace parts:
# the architecture, not the model, is what these tests are about).
SCENARIO = """
kubernetes_version: v1.20.2
defaults: {driver: "550.54.15", cuda: "12.4"}
nodes:
  - name: h100-x86-01
    gpu: {product: NVIDIA H100 80GB HBM3, count: 8}
    cpu: 128
    memory: 1Ti
  - name: h100-arm-01
    arch: arm64
    gpu: {product: NVIDIA H100 80GB HBM3, count: 8}
    cpu: 72
    memory: 480Gi
  - names: [h200-arm-01, h200-arm-02]
    arch: arm64
    gpu: {product: NVIDIA H200, count: 1}
    cpu: 72
    memory: 480Gi
"""
H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
ARM_ONLY = "nvidia.com/gpu@NVIDIA-H200"


@pytest.fixture
def sim(db, tmp_path, people):
    scenario = tmp_path / "arch.yaml"
    scenario.write_text(SCENARIO)
    cluster = simulated_cluster(tmp_path / "sim.json", scenario=scenario)
    for rc in ResourceClass.objects.all():
        actions.set_quota(people["admin"], Team.objects.get(slug="vision"), rc, 16, 16)
    return cluster


def submit(people, key: str, **fields) -> Job:
    return submit_job(people["alice"], "vision", key, **fields)


def test_classes_know_their_architectures(sim):
    assert sorted(ResourceClass.objects.get(key=H100).architecture_list) == ["amd64", "arm64"]
    assert ResourceClass.objects.get(key=ARM_ONLY).architecture_list == ["arm64"]


def test_api_refuses_an_architecture_the_class_lacks_with_the_other_problems(sim, api_client, people):
    api_client.force_login(people["alice"])
    answer = api_client.post(
        "/api/v1/jobs/",
        {"team": "vision", "name": "Bad Name", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["true"],
         "resource_class": ARM_ONLY, "count": 1, "cpu": 4, "memory_mb": 8192, "architecture": "amd64"},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 400
    errors = answer.json()
    assert {"architecture", "name"} <= set(errors)
    assert "arm64" in " ".join(errors["architecture"])
    answer = api_client.post(
        "/api/v1/jobs/",
        {"team": "vision", "name": "ok", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["true"],
         "resource_class": ARM_ONLY, "count": 1, "cpu": 4, "memory_mb": 8192, "architecture": "sparc"},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 400 and "architecture" in answer.json()
    assert Job.objects.count() == 0


def test_form_refuses_an_architecture_the_class_lacks_with_the_other_problems(sim, client, people):
    client.force_login(people["alice"])
    data = {
        "team": Team.objects.get(slug="vision").pk, "name": "Bad Name", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": "python train.py", "args": "", "env": "",
        "resource_class": ResourceClass.objects.get(key=ARM_ONLY).pk, "count": 1, "cpu": "4", "memory_mb": 8192,
        "priority": 50, "max_runtime_hours": "1",
        "idempotency_key": "arch-form-1", "architecture": "amd64",
    }  # fmt: skip
    response = client.post("/jobs/new/", data)
    assert response.status_code == 200
    form = response.context["form"]
    assert {"architecture", "name"} <= set(form.errors), form.errors
    assert "arm64" in " ".join(form.errors["architecture"])
    assert Job.objects.count() == 0


def test_a_pinned_job_is_placed_only_on_nodes_of_its_architecture(sim, people):
    arm = [submit(people, H100, name=f"arm{i}", count=4, architecture="arm64") for i in range(2)]
    x86 = submit(people, H100, name="x86", count=4, architecture="amd64")
    run_cycle(sim)
    for job in arm + [x86]:
        job.refresh_from_db()
    assert {j.node_name for j in arm} == {"h100-arm-01"}
    assert x86.node_name == "h100-x86-01"
    # The arm64 node is full: a third arm64 job waits even though the amd64 node has 4 GPUs free.
    third = submit(people, H100, name="arm3", count=4, architecture="arm64")
    run_cycle(sim)
    third.refresh_from_db()
    assert third.state == JobState.QUEUED and not third.node_name


def test_a_pinned_job_says_it_never_fits_when_no_node_of_its_architecture_can_run(sim, people):
    job = submit(people, H100, architecture="arm64")
    # The arm64 node's driver upgrade failed (the GPU Operator's upgrade state): placement keeps work off it.
    sim.patch_node_labels("h100-arm-01", {GPU_DRIVER_UPGRADE_STATE_LABEL: DRIVER_UPGRADE_FAILED})
    sync_inventory(sim)
    run_cycle(sim)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.wait_reason == "never_fits"
    assert "pinned to arm64" in job.wait_message and job.wait_detail == {"architecture": "arm64"}


def test_the_pod_selects_the_architecture(sim, people):
    pinned = submit(people, H100, architecture="arm64")
    free = submit(people, H100, name="any")
    run_cycle(sim)
    pinned.refresh_from_db()
    free.refresh_from_db()
    spec = render_job(pinned)["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
    assert "nodeSelector" not in render_job(free)["spec"]["template"]["spec"]
    created = {w["metadata"]["name"]: w for w in sim.list_workloads("team-vision")}
    assert created[pinned.workload_name]["spec"]["template"]["spec"]["nodeSelector"] == {"kubernetes.io/arch": "arm64"}
