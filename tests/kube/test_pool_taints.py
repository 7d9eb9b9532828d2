"""Managed-cloud GPU pools against the real kube-apiserver and kube-scheduler (issue 31, item 16): a node of an AKS GPU
pool, tainted sku=gpu:NoSchedule as AKS's docs create GPU pools, gets the portal's job and its pod is bound there. The
pod tolerates exactly that taint; a pod tolerating only nvidia.com/gpu (what the portal rendered before) would stay
Pending, which the real scheduler says in its own words."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from accounts.models import Team
from cluster.kubernetes import KubernetesBackend
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle

from .support import wait_for

pytestmark = pytest.mark.django_db

SKU_GPU = {"key": "sku", "value": "gpu", "effect": "NoSchedule"}


def test_a_job_on_an_aks_gpu_pool_node_is_bound(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people
) -> None:
    product = f"NVIDIA-A100-AKS-{test_id}"  # a product only this test's node has
    aks = {
        "kubernetes.azure.com/agentpool": "gpunp",
        "agentpool": "gpunp",
        "kubernetes.azure.com/accelerator": "nvidia",
    }
    node = make_gpu_node("aks", gpus=1, product=product, labels=aks, taints=[SKU_GPU])
    sync_inventory(kube_backend)
    row = Node.objects.get(name=node["metadata"]["name"])
    assert (row.provider, row.pool, row.blocked_reason) == ("aks", "gpunp", "")
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 1, 1)
    request = dict(
        name="on-aks", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "60"], args=[], env=[],
        count=1, cpu_millicores=1000, memory_mb=2048, priority=50, preemptible=False, max_runtime_seconds=600,
    )  # fmt: skip
    job = actions.submit_job(people["alice"], team, rc, request).job
    run_cycle(kube_backend)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.node_name == node["metadata"]["name"]

    def pod():
        return next(
            (p for p in kube_backend.list_pods(kube_namespace)
             if p["metadata"]["labels"].get("gpu-portal.io/job-id") == str(job.pk)),
            None,
        )  # fmt: skip

    def bound():
        found = pod()
        return found and found["spec"].get("nodeName")

    def scheduler_said():
        found = pod() or {}
        return next(
            (c.get("message") for c in (found.get("status") or {}).get("conditions") or []
             if c.get("type") == "PodScheduled" and c.get("status") == "False"),
            None,
        )  # fmt: skip

    try:
        assert wait_for(f"job {job.pk}'s pod to be bound on the AKS node", bound) == job.node_name
    except pytest.fail.Exception:
        pytest.fail(f"The scheduler left the pod Pending: {scheduler_said()}")
    tolerations = pod()["spec"]["tolerations"]
    # The portal's one toleration is the pool's GPU taint, exactly (the API server adds its not-ready and unreachable
    # NoExecute tolerations with a timeout, the DefaultTolerationSeconds admission plugin's).
    portal = [t for t in tolerations if t.get("effect") == "NoSchedule"]
    assert portal == [{"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]
    assert all(t.get("key") for t in tolerations), "never a blanket toleration"
