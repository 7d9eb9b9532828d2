"""The node smoke test's Job against the real kube-apiserver and kube-scheduler: accepted as rendered, its pod
bound to the chosen node (node affinity on the name, the GPU taint tolerated), holding one GPU."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cluster.kubernetes import KubernetesBackend
from gpus.choices import SmokeTestState
from gpus.models import Node
from gpus.reconcile import sync_inventory
from gpus.smoketest import SMOKE_TEST_LABEL, advance_smoke_tests, request_smoke_test

from .support import wait_for

pytestmark = pytest.mark.django_db


def test_the_smoke_test_job_is_accepted_and_its_pod_bound_to_the_node(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people, settings
) -> None:
    settings.PORTAL_SMOKE_TEST_NAMESPACE = kube_namespace
    make_gpu_node("smoke-a", gpus=2, product=f"NVIDIA-A10-SMOKE-{test_id}")
    make_gpu_node("smoke-b", gpus=2, product=f"NVIDIA-A10-SMOKE-{test_id}")
    sync_inventory(kube_backend)
    node = Node.objects.get(name=f"gpu-{test_id}-smoke-b")
    run = request_smoke_test(people["admin"], node)
    assert advance_smoke_tests(kube_backend)["started"] == 1
    run.refresh_from_db()
    assert run.state == SmokeTestState.RUNNING and run.workload_name
    jobs = kube_backend.list_workloads(namespace=kube_namespace)
    assert [j["metadata"]["name"] for j in jobs if j["metadata"]["labels"].get(SMOKE_TEST_LABEL)] == [run.workload_name]

    def bound():
        pods = kube_backend.list_pods(namespace=kube_namespace, label_selector=f"{SMOKE_TEST_LABEL}={run.pk}")
        return pods and pods[0]["spec"].get("nodeName")

    assert wait_for("the smoke test pod to be bound", bound, timeout=60) == node.name
    pod = kube_backend.list_pods(namespace=kube_namespace, label_selector=f"{SMOKE_TEST_LABEL}={run.pk}")[0]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    advance_smoke_tests(kube_backend)  # still running (no kubelet here): nothing changes, nothing fails
    run.refresh_from_db()
    assert run.state == SmokeTestState.RUNNING and run.pod_name == pod["metadata"]["name"]
