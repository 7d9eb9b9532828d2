"""Carving and the smoke test on a registered cluster, against two real control planes (issue 32, item 6): the node
of the second cluster gets its label and its ConfigMap from the portal through that cluster's API server, and its
smoke test Job is made there and bound by that cluster's scheduler; the first cluster sees none of it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config

from cluster.kubernetes import KubernetesBackend
from gpus import fleet, nodeops
from gpus.choices import NodeConfigState, SmokeTestState
from gpus.models import Node
from gpus.nodeconfig import request_operation
from gpus.nodeconfig_plan import plan_time_slicing
from gpus.smoketest import SMOKE_TEST_LABEL, request_smoke_test

from .controlplane import LocalControlPlane
from .support import wait_for

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def other(second_controlplane: LocalControlPlane) -> Iterator[client.ApiClient]:
    api_client = new_client_from_config(config_file=str(second_controlplane.kubeconfig_path))
    try:
        yield api_client
    finally:
        api_client.close()


def _gpu_node(name: str, product: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "nvidia.com/gpu.present": "true",
                     "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "4", "nvidia.com/gpu.memory": "23028",
                     "nvidia.com/cuda.driver.major": "550", "nvidia.com/mig.strategy": "none"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "32", "memory": "128Gi", "pods": "110", "nvidia.com/gpu": "4"},
                   "allocatable": {"cpu": "32", "memory": "120Gi", "pods": "110", "nvidia.com/gpu": "4"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake"}]},
    }  # fmt: skip


def test_a_carve_and_a_smoke_test_on_a_registered_cluster_go_to_its_api_server(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, second_controlplane: LocalControlPlane,
    other: client.ApiClient, kube_namespace: str, test_id: str, people, settings,
) -> None:  # fmt: skip
    settings.PORTAL_K8S_WATCH_CACHE = False
    settings.PORTAL_GPU_OPERATOR_NAMESPACE = settings.PORTAL_SMOKE_TEST_NAMESPACE = kube_namespace
    core = client.CoreV1Api(other)
    carved, tested = f"gpu-{test_id}-carved", f"gpu-{test_id}-tested"
    for name in (carved, tested):
        core.create_node(_gpu_node(name, f"NVIDIA-A10-{test_id}"))
    core.create_namespace({"metadata": {"name": kube_namespace}})
    try:
        east = fleet.register(people["admin"], fleet.ClusterInput(
            name="east", connection="token", server=second_controlplane.server,
            ca_certificate=second_controlplane.ca_path.read_text(), token=second_controlplane.token,
        ))  # fmt: skip
        assert fleet.sync(east) is not None
        assert nodeops.clusters_with_work() == []

        node = Node.objects.get(cluster=east, name=carved)
        op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=2, rename=False))
        run = request_smoke_test(people["admin"], Node.objects.get(cluster=east, name=tested))
        assert nodeops.clusters_with_work() == ["east"]
        result = nodeops.advance_cluster(east)
        assert result["errors"] == [] and result["smoke_tests"]["started"] == 1, result

        op.refresh_from_db()
        assert op.state == NodeConfigState.WAITING, op.log  # no device plugin here to advertise the new layout
        labels = core.read_node(carved).metadata.labels
        assert labels["nvidia.com/device-plugin.config"] == op.requested["config"]
        entry = core.read_namespaced_config_map("time-slicing-config", kube_namespace).data[op.requested["config"]]
        assert "replicas: 2" in entry
        # The cluster configured in settings has neither the ConfigMap nor the smoke test's Job.
        home = kube_backend.list_workloads(namespace=kube_namespace)
        assert not [j for j in home if j["metadata"]["labels"].get(SMOKE_TEST_LABEL)]
        with pytest.raises(client.ApiException):
            kube_core.read_namespaced_config_map("time-slicing-config", kube_namespace)

        def bound_on_east() -> str | None:
            pods = core.list_namespaced_pod(kube_namespace, label_selector=f"{SMOKE_TEST_LABEL}={run.pk}").items
            return pods[0].spec.node_name if pods else None

        assert wait_for("the smoke test pod to be bound on east", bound_on_east, timeout=60) == tested
        run.refresh_from_db()
        assert run.state == SmokeTestState.RUNNING
    finally:
        for name in (carved, tested):
            core.delete_node(name)
        core.delete_namespace(kube_namespace, propagation_policy="Background")
