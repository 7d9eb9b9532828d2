"""Managed-cloud GPU pools carry their own taints (issue 31, item 16): an AKS GPU node pool is tainted
sku=gpu:NoSchedule (AKS "Use GPUs on AKS"), not nvidia.com/gpu. The portal's pods tolerate exactly the
GPU-keeping taints of the pool they land on, so a job placed there runs; a taint the portal does not know (an AKS
spot pool's) keeps its work off the node with a wait that says so, until an admin declares the taint for the pool.

The simulated cluster's scheduler refuses a pod that does not tolerate a node's NoSchedule taint, as kube-scheduler
does (tests/kube/test_pool_taints.py shows the same against a real one)."""

from __future__ import annotations

import pytest

from accounts.models import Team
from gpus.models import Cluster, Node, ResourceClass
from gpus.node_pools import PoolTaints, declare_taints
from jobs import actions
from jobs.choices import JobState
from jobs.render import render_job
from tests.factories import cycle, run_until, submit_job
from vocab.taints import Taint

A100 = "nvidia.com/gpu@NVIDIA-A100-80GB-PCIe"
SKU_GPU = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}
#: What AKS puts on the nodes of a spot node pool (AKS "Add an Azure Spot node pool").
SPOT = {"key": "kubernetes.azure.com/scalesetpriority", "value": "spot", "effect": "NoSchedule"}


def aks_node(name: str, pool: str, *taints: dict) -> dict:
    """An AKS node of a GPU pool: one A100 80GB (Standard_NC24ads_A100_v4), tainted as the pool was created."""
    return {
        "name": name, "managed": "aks", "instance_type": "Standard_NC24ads_A100_v4", "node_pool": pool,
        "gpu": {"product": "NVIDIA A100 80GB PCIe", "count": 1}, "cpu": 24, "memory": "220Gi",
        "taints": list(taints),
    }  # fmt: skip


def scenario(*nodes: dict) -> dict:
    return {"namespaces": [], "nodes": list(nodes)}


def _a100_quota(people) -> None:
    actions.set_quota(people["admin"], Team.objects.get(slug="vision"), ResourceClass.objects.get(key=A100), 2, 2)


def _pod(cluster, job) -> dict:
    (workload,) = [w for w in cluster.list_workloads("team-vision") if w["metadata"]["name"] == job.workload_name]
    return workload["spec"]["template"]["spec"]


@pytest.mark.cluster(scenario=scenario(aks_node("aks-gpunp-0", "gpunp", SKU_GPU)), quotas={})
def test_a_job_on_an_aks_gpu_pool_tolerates_sku_gpu_and_runs(cluster, clock, people):
    _a100_quota(people)
    node = Node.objects.get(name="aks-gpunp-0")
    assert (node.provider, node.pool) == ("aks", "gpunp")
    job = submit_job(people["alice"], resource_class=A100, count=1, command=["sleep", "600"])
    job = run_until(cluster, clock, job, JobState.RUNNING)
    assert job.node_name == "aks-gpunp-0"
    # Exactly the pool's GPU taint, by key, value and effect: no blanket toleration, no other taint.
    assert _pod(cluster, job)["tolerations"] == [
        {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]


@pytest.mark.cluster(scenario=scenario(aks_node("aks-spot-0", "spotnp", SKU_GPU, SPOT)), quotas={})
def test_a_taint_nobody_declared_keeps_work_off_and_the_wait_says_so(cluster, clock, people):
    _a100_quota(people)
    job = submit_job(people["alice"], resource_class=A100, count=1, command=["sleep", "600"])
    cycle(cluster, clock, 6)
    cycle(cluster, clock, 6)
    job.refresh_from_db()
    # Never placed where its pod would stay Pending: it waits, naming the node, the taint and the fix.
    assert job.state == JobState.QUEUED and not job.node_name
    assert cluster.list_workloads("team-vision") == []
    assert "aks-spot-0" in job.wait_message
    assert "kubernetes.azure.com/scalesetpriority=spot:NoSchedule" in job.wait_message
    assert "node pool spotnp" in job.wait_message
    assert job.wait_detail["kept_off"]

    # An admin says GPU work belongs on the spot pool: the next cycle places it and its pod tolerates both taints.
    declare_taints(people["admin"], Cluster.objects.get(name="default"), "spotnp", [Taint.of(SPOT)])
    job = run_until(cluster, clock, job, JobState.RUNNING)
    assert job.node_name == "aks-spot-0"
    tolerations = _pod(cluster, job)["tolerations"]
    assert {(t["key"], t["value"], t["operator"]) for t in tolerations} == {
        ("sku", "gpu", "Equal"),
        ("kubernetes.azure.com/scalesetpriority", "spot", "Equal"),
    }


@pytest.mark.cluster(
    scenario=scenario(
        aks_node("aks-gpunp-0", "gpunp", SKU_GPU),
        {"name": "h100-0", "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 8}, "cpu": 96, "memory": "1Ti"},
    )
)
def test_each_pool_gets_its_own_taints_and_nothing_else(cluster, clock, people):
    """The H100 node (GPU Operator taint, no pool label) and the AKS pool are told apart: a job on one tolerates its
    pool's taint only."""
    table = PoolTaints.load()
    assert table.for_nodes(None, ["aks-gpunp-0"]) == [Taint("sku", "gpu", "NoSchedule")]
    assert table.for_nodes(None, ["h100-0"]) == [Taint("nvidia.com/gpu", "present", "NoSchedule")]
    job = submit_job(people["alice"], count=1)
    job = run_until(cluster, clock, job, JobState.RUNNING)
    assert job.node_name == "h100-0"
    assert render_job(job)["spec"]["template"]["spec"]["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
    ]
