"""Node reconfiguration against a real kube-apiserver: the mig-parted and device-plugin ConfigMaps are written in
the operator's format, the node labels that select them are set, and ``nvidia.com/mig.config.state`` is followed.
There is no GPU Operator here, so the test plays MIG Manager and the device plugin: it moves the state label and
patches the node's advertised resources the way they would."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import yaml
from kubernetes import client

from cluster.kubernetes import KubernetesBackend
from gpus.choices import NodeConfigState
from gpus.models import Node, NodeConfigOperation
from gpus.nodeconfig import advance_operations, request_operation, request_revert
from gpus.nodeconfig_plan import plan_mig, plan_time_slicing
from gpus.reconcile import sync_inventory
from vocab.mig import parse_mig_parted

pytestmark = pytest.mark.django_db

A100 = "NVIDIA-A100-SXM4-40GB"


@pytest.fixture
def operator_namespace(settings, kube_namespace: str) -> str:
    settings.PORTAL_GPU_OPERATOR_NAMESPACE = kube_namespace
    return kube_namespace


def mig_node(make_gpu_node: Callable, suffix: str) -> str:
    node = make_gpu_node(
        suffix,
        gpus=2,
        product=A100,
        labels={
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig.config": "all-disabled",
            "nvidia.com/mig.config.state": "success",
            "nvidia.com/gpu.memory": "40960",
        },
    )
    return node["metadata"]["name"]


def play_mig_manager(kube_core: client.CoreV1Api, name: str, state: str, resources: dict[str, int] | None = None):
    """What MIG Manager, GFD and the device plugin do to the node object."""
    labels: dict[str, str | None] = {"nvidia.com/mig.config.state": state}
    if resources is not None:
        for resource, count in resources.items():
            if resource.startswith("nvidia.com/mig-"):
                labels[f"{resource}.count"] = str(count)
                labels[f"{resource}.memory"] = "20096"
        kube_core.patch_node_status(
            name,
            {
                "status": {
                    "capacity": {k: str(v) for k, v in resources.items()},
                    "allocatable": {k: str(v) for k, v in resources.items()},
                }
            },  # fmt: skip
        )
    kube_core.patch_node(name, {"metadata": {"labels": labels}})


def test_a_mig_preset_is_written_labelled_and_followed_to_success(
    kube_backend: KubernetesBackend, kube_core, make_gpu_node: Callable, operator_namespace: str, people
) -> None:
    name = mig_node(make_gpu_node, "mig")
    sync_inventory(kube_backend)
    node = Node.objects.get(name=name)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.20gb"))
    assert op.expected_resources == {"nvidia.com/mig-3g.20gb": 4}

    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING, op.log
    labels = kube_core.read_node(name).metadata.labels
    assert labels["nvidia.com/mig.config"] == "all-3g.20gb"
    config_map = kube_core.read_namespaced_config_map("gpu-portal-mig-parted-config", operator_namespace)
    assert config_map.metadata.labels["app.kubernetes.io/managed-by"] == "gpu-portal"
    configs = parse_mig_parted(config_map.data["config.yaml"])
    a100 = next(e for e in configs["all-3g.20gb"] if e["device_filter"] and "0x20B010DE" in e["device_filter"])
    assert a100["mig_devices"] == {"3g.20gb": 2} and a100["enabled"] and a100["devices"] == "all"
    assert configs["all-disabled"] == [{"device_filter": None, "devices": "all", "enabled": False, "mig_devices": {}}]

    # Before MIG Manager reacts the old state label still says success: that is not taken for done.
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING

    play_mig_manager(kube_core, name, "pending")
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING and op.cluster_state == "pending"

    play_mig_manager(kube_core, name, "success", {"nvidia.com/gpu": 0, "nvidia.com/mig-3g.20gb": 4})
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE, op.log
    node.refresh_from_db()
    assert node.allocatable["nvidia.com/mig-3g.20gb"] == "4" and node.mig_config == "all-3g.20gb"


def test_a_failed_state_fails_the_operation_and_the_revert_restores_the_label(
    kube_backend: KubernetesBackend, kube_core, make_gpu_node: Callable, operator_namespace: str, people
) -> None:
    name = mig_node(make_gpu_node, "fail")
    sync_inventory(kube_backend)
    node = Node.objects.get(name=name)
    layout = [[("3g.20gb", 0), ("2g.10gb", 4), ("1g.5gb", 6)], []]
    op = request_operation(people["admin"], node, plan_mig(node, placements=layout))
    advance_operations(kube_backend)
    config_name = op.requested["config"]
    assert kube_core.read_node(name).metadata.labels["nvidia.com/mig.config"] == config_name
    document = yaml.safe_load(
        kube_core.read_namespaced_config_map("gpu-portal-mig-parted-config", operator_namespace).data["config.yaml"]
    )
    assert document["version"] == "v1"
    assert document["mig-configs"][config_name] == [
        {"devices": [0], "mig-enabled": True, "mig-devices": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}},
        {"devices": [1], "mig-enabled": False},
    ]

    play_mig_manager(kube_core, name, "failed")
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.FAILED and "MIG Manager could not apply" in op.reason

    revert = request_revert(people["admin"], op)
    advance_operations(kube_backend)
    assert kube_core.read_node(name).metadata.labels["nvidia.com/mig.config"] == "all-disabled"
    play_mig_manager(kube_core, name, "success")
    advance_operations(kube_backend)
    revert.refresh_from_db()
    assert revert.state == NodeConfigState.DONE, revert.log
    assert NodeConfigOperation.objects.filter(state=NodeConfigState.FAILED).count() == 1


def test_time_slicing_writes_a_device_plugin_entry_and_selects_it(
    kube_backend: KubernetesBackend, kube_core, make_gpu_node: Callable, operator_namespace: str, people
) -> None:
    name = make_gpu_node("ts", gpus=4, product="NVIDIA-A10", labels={"nvidia.com/mig.capable": "false"})["metadata"][
        "name"
    ]
    sync_inventory(kube_backend)
    node = Node.objects.get(name=name)
    op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=4, rename=False))
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING
    assert kube_core.read_node(name).metadata.labels["nvidia.com/device-plugin.config"] == "portal-ts4-none"
    data = kube_core.read_namespaced_config_map("time-slicing-config", operator_namespace).data
    assert yaml.safe_load(data["portal-ts4-none"]) == {
        "version": "v1",
        "flags": {"migStrategy": "none"},
        "sharing": {
            "timeSlicing": {"renameByDefault": False, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}
        },
    }
    # The device plugin and GFD pick the entry up.
    kube_core.patch_node_status(
        name, {"status": {"capacity": {"nvidia.com/gpu": "16"}, "allocatable": {"nvidia.com/gpu": "16"}}}
    )
    kube_core.patch_node(
        name,
        {"metadata": {"labels": {"nvidia.com/gpu.product": "NVIDIA-A10-SHARED", "nvidia.com/gpu.replicas": "4",
                                 "nvidia.com/gpu.sharing-strategy": "time-slicing"}}},
    )  # fmt: skip
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE, op.log
    node.refresh_from_db()
    assert node.replicas == 4 and node.allocatable["nvidia.com/gpu"] == "16"


def test_mps_writes_a_device_plugin_mps_entry_and_selects_it(
    kube_backend: KubernetesBackend, kube_core, make_gpu_node: Callable, operator_namespace: str, people
) -> None:
    """``sharing.mps`` (k8s-device-plugin README, "With CUDA MPS"); the test plays the device plugin and GFD, which
    advertise replicas x GPUs and label the node mps / mps.capable (the GPU Operator then starts the MPS control
    daemon there)."""
    name = make_gpu_node("mps", gpus=2, product="NVIDIA-L40S", labels={"nvidia.com/mig.capable": "false"})["metadata"][
        "name"
    ]
    sync_inventory(kube_backend)
    node = Node.objects.get(name=name)
    op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=4, rename=True, mps=True))
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING, op.log
    assert kube_core.read_node(name).metadata.labels["nvidia.com/device-plugin.config"] == "portal-mps4-renamed-none"
    data = kube_core.read_namespaced_config_map("time-slicing-config", operator_namespace).data
    assert yaml.safe_load(data["portal-mps4-renamed-none"]) == {
        "version": "v1",
        "flags": {"migStrategy": "none"},
        "sharing": {"mps": {"renameByDefault": True, "resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}},
    }
    kube_core.patch_node_status(
        name,
        {"status": {"capacity": {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "8"},
                    "allocatable": {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "8"}}},
    )  # fmt: skip
    kube_core.patch_node(
        name,
        {"metadata": {"labels": {"nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "mps",
                                 "nvidia.com/mps.capable": "true"}}},
    )  # fmt: skip
    advance_operations(kube_backend)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE, op.log
    node.refresh_from_db()
    assert (node.sharing_strategy, node.replicas, node.allocatable["nvidia.com/gpu.shared"]) == ("mps", 4, "8")
