"""Every node shape of tests/node_shapes.py created as a Node object in the real kube-apiserver, read back through
KubernetesBackend and diagnosed: the API server accepts the labels, taints, conditions and resources as real
components write them, and the portal reads what it stores (not what the test built)."""

from __future__ import annotations

import pytest
from kubernetes import client

from cluster.kubernetes import KubernetesBackend
from gpus.diagnosis import blocking_reason, diagnose
from gpus.reconcile import _health
from tests.node_shapes import EXPECTED, shapes
from vocab.gfd import parse_node

from .support import TEST_RUN_LABEL


@pytest.fixture
def shape_nodes(kube_core: client.CoreV1Api, test_id: str):
    created = {}
    for key, body in shapes(prefix=f"shape-{test_id}").items():
        body["metadata"]["labels"][TEST_RUN_LABEL] = test_id
        status = body.pop("status")
        kube_core.create_node(body)
        # The kubelet owns status: write it through the status subresource as it does.
        kube_core.patch_node_status(body["metadata"]["name"], {"status": status})
        created[key] = body["metadata"]["name"]
    yield created
    for name in created.values():
        try:
            kube_core.delete_node(name)
        except client.ApiException as error:
            if error.status != 404:
                raise


def test_node_shapes_through_the_api_server(kube_backend: KubernetesBackend, shape_nodes, test_id: str) -> None:
    listed, _ = kube_backend.list_nodes(label_selector=f"{TEST_RUN_LABEL}={test_id}")
    by_name = {n["metadata"]["name"]: n for n in listed}
    assert set(by_name) == set(shape_nodes.values())
    for key, name in shape_nodes.items():
        product, gpus, provider, (title, severity), health, blocked = EXPECTED[key]
        facts = parse_node(by_name[name])
        assert (facts.product, facts.gpu_count, facts.provider) == (product, gpus, provider), key
        findings = diagnose(facts)
        assert any(title in f.title and f.severity == severity for f in findings), (key, [f.title for f in findings])
        assert _health(facts, findings) == health, key
        assert bool(blocking_reason(facts)) == blocked, key


def test_unhealthy_gpu_is_read_from_status(kube_backend: KubernetesBackend, shape_nodes) -> None:
    facts = parse_node(kube_backend.get_node(shape_nodes["unhealthy"]))
    assert facts.gpu_capacity == {"nvidia.com/gpu": 8} and facts.gpu_allocatable == {"nvidia.com/gpu": 6}
    assert facts.unhealthy_gpus == 2


def test_arm64_and_pressure_read_back(kube_backend: KubernetesBackend, shape_nodes) -> None:
    gh200 = parse_node(kube_backend.get_node(shape_nodes["gh200"]))
    assert gh200.architecture == "arm64" and gh200.clique
    pressure = parse_node(kube_backend.get_node(shape_nodes["memory-pressure"]))
    assert set(pressure.pressure) == {"MemoryPressure"}
    assert any(t.key == "node.kubernetes.io/memory-pressure" for t in pressure.taints)


def test_old_and_new_gfd_spellings_read_back(kube_backend: KubernetesBackend, shape_nodes) -> None:
    old = parse_node(kube_backend.get_node(shape_nodes["gfd-old-labels"]))
    new = parse_node(kube_backend.get_node(shape_nodes["gfd-new-labels"]))
    assert (old.driver_version, old.cuda_version) == ("535.104.05", "12.2")
    assert (new.driver_version, new.cuda_version) == ("560.35.03", "12.6")


def test_gke_shared_pools_read_back(kube_backend: KubernetesBackend, shape_nodes) -> None:
    mps = parse_node(kube_backend.get_node(shape_nodes["gke-t4-mps"]))
    ts = parse_node(kube_backend.get_node(shape_nodes["gke-t4-time-sharing"]))
    assert (mps.sharing_strategy, mps.replicas, mps.product_label) == ("mps", 4, "Tesla-T4-SHARED")
    assert "hostIPC" in blocking_reason(mps)
    assert (ts.sharing_strategy, ts.replicas, blocking_reason(ts)) == ("time-slicing", 3, "")
