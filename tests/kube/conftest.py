"""Fixtures for tests against a real kube-apiserver (v1.20.2) started locally once per test session.

Without the control-plane binaries or etcd, these tests are skipped on a developer machine (the reason says how to
get them) and fail in CI (CI=true), where a silently skipped integration suite would hide regressions.
In CI, or with PORTAL_K8S_BUILD=1, missing binaries are built from Debian's source package (about 15 minutes).
No Django here: the cluster package is plain Python.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config

from cluster.kubernetes import KubernetesBackend

from .binaries import BinariesUnavailable, ensure_binaries
from .controlplane import ControlPlaneError, LocalControlPlane
from .support import (
    PORTAL_SERVICE_ACCOUNT_GROUPS,
    PORTAL_SERVICE_ACCOUNT_USER,
    TEST_RUN_LABEL,
    in_ci,
    unavailable,
)

_startup: dict[str, float] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kube: runs against a real local kube-apiserver (skipped when unavailable, fails in CI)"
    )


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if "seconds" in _startup:
        terminalreporter.write_line(f"kube control plane started in {_startup['seconds']:.1f}s")


@pytest.fixture(scope="session")
def kube_controlplane() -> Iterator[LocalControlPlane]:
    allow_build = in_ci() or os.environ.get("PORTAL_K8S_BUILD") == "1"
    try:
        binaries = ensure_binaries(allow_build=allow_build)
    except BinariesUnavailable as error:
        unavailable(str(error))
    plane = LocalControlPlane(
        binaries=binaries, extra_users={PORTAL_SERVICE_ACCOUNT_USER: PORTAL_SERVICE_ACCOUNT_GROUPS}
    )
    try:
        plane.start()
    except ControlPlaneError as error:
        unavailable(str(error))
    _startup["seconds"] = plane.startup_seconds
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="module")
def second_controlplane() -> Iterator[LocalControlPlane]:
    """A second control plane (etcd, kube-apiserver, scheduler, controller-manager) for the fleet's tests: another
    cluster, with its own CA and tokens. Started per module that asks for it."""
    binaries = ensure_binaries(allow_build=in_ci() or os.environ.get("PORTAL_K8S_BUILD") == "1")
    plane = LocalControlPlane(binaries=binaries)
    try:
        plane.start()
    except ControlPlaneError as error:
        unavailable(str(error))
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture(scope="session")
def kube_api_client(kube_controlplane: LocalControlPlane) -> Iterator[client.ApiClient]:
    """A raw client for arranging test state the portal itself never writes (Nodes, Pods, foreign Jobs)."""
    api_client = new_client_from_config(config_file=str(kube_controlplane.kubeconfig_path))
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture(scope="session")
def kube_core(kube_api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api_client)


@pytest.fixture(scope="session")
def kube_backend(kube_controlplane: LocalControlPlane) -> KubernetesBackend:
    return KubernetesBackend.from_kubeconfig(str(kube_controlplane.kubeconfig_path))


@pytest.fixture
def test_id() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture
def kube_namespace(kube_core: client.CoreV1Api, test_id: str) -> Iterator[str]:
    """A fresh namespace per test; deleted afterwards (the controller-manager finishes the job)."""
    name = f"t-{test_id}"
    kube_core.create_namespace({"metadata": {"name": name, "labels": {TEST_RUN_LABEL: test_id}}})
    yield name
    try:
        kube_core.delete_namespace(name, propagation_policy="Background")
    except client.ApiException as error:
        if error.status != 404:
            raise


@pytest.fixture
def make_gpu_node(kube_core: client.CoreV1Api, test_id: str) -> Iterator[Callable[..., dict]]:
    """Factory for fake GPU nodes (what GPU feature discovery and the device plugin would make a node look like).

    Nodes are cluster-wide and the scheduler sees every one, so each carries this test's run label; tests that
    schedule pin their pods to it with a nodeSelector.
    """
    created: list[str] = []

    def make(
        suffix: str,
        gpus: int = 8,
        product: str = "NVIDIA-H100-80GB-HBM3",
        labels: dict[str, str] | None = None,
        taints: list[dict] | None = None,
    ) -> dict:
        """``taints``: the node's taints (default: the GPU Operator's nvidia.com/gpu=present:NoSchedule)."""
        name = f"gpu-{test_id}-{suffix}"
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    TEST_RUN_LABEL: test_id,
                    "kubernetes.io/hostname": name,
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": product,
                    "nvidia.com/gpu.count": str(gpus),
                    "nvidia.com/gpu.memory": "81559",
                    "nvidia.com/cuda.driver.major": "550",
                    "nvidia.com/mig.capable": "true",
                    **(labels or {}),
                },
            },
            "spec": {
                "taints": taints
                if taints is not None
                else [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
            },
            "status": {
                "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                "allocatable": {"cpu": "64", "memory": "500Gi", "pods": "110", "nvidia.com/gpu": str(gpus)},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake"}],
            },
        }
        node = kube_core.create_node(body)
        created.append(name)
        return kube_core.api_client.sanitize_for_serialization(node)

    yield make
    for name in created:
        try:
            kube_core.delete_node(name)
        except client.ApiException as error:
            if error.status != 404:
                raise
