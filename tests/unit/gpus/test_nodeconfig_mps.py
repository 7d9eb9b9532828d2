"""Carving a node's GPUs into MPS shares (the device plugin's ``sharing.mps``; NVIDIA/k8s-device-plugin README "With
CUDA MPS": replicas >= 2 per resource, whole GPUs only, not with MIG, not with the mixed MIG strategy; the GPU
Operator runs the MPS control daemon on nodes the plugin labels nvidia.com/mps.capable=true). Checked, drained,
written, labelled, followed and read back like time-slicing, with the same audit trail; on the page and the API."""

from __future__ import annotations

import pytest
import yaml
from django.urls import reverse

from core.models import AuditEvent
from gpus.choices import NodeConfigState
from gpus.models import Node, NodeConfigOperation, ResourceClass
from gpus.nodeconfig import advance_operations, request_operation
from gpus.nodeconfig_plan import ConfigRefused, plan_time_slicing
from tests.conftest import PASSWORD

A10_NODE = "gpu-a10-01"  # 4x A10, time-sliced x4 in the demo
MIXED_NODE = "gpu-a100-mig-01"  # 8x A100 80GB, MIG mixed strategy
MPS_NODE = "gpu-l40s-mps-01"  # 2x L40S, MPS x4 renamed in the demo


def run(sim, clock, op) -> NodeConfigOperation:
    for seconds in (0, 1, 1):
        clock.advance(seconds)
        advance_operations(sim, now=clock.now)
    op.refresh_from_db()
    return op


def test_mps_is_written_to_the_device_plugin_config_and_the_node_follows(sim, clock, people):
    node = Node.objects.get(name=A10_NODE)
    plan = plan_time_slicing(node, replicas=4, rename=False, mps=True)
    assert plan.expected_resources == {"nvidia.com/gpu": 16}
    assert plan.expected_product_label == "NVIDIA-A10-SHARED"
    assert any("MPS control daemon" in w for w in plan.warnings)
    op = run(sim, clock, request_operation(people["admin"], node, plan))
    assert op.state == NodeConfigState.DONE, op.log
    assert op.requested == {
        "config": "portal-mps4-none",
        "replicas": 4,
        "rename": False,
        "strategy": "none",
        "mps": True,
    }
    labels = sim.get_node(A10_NODE)["metadata"]["labels"]
    assert labels["nvidia.com/device-plugin.config"] == "portal-mps4-none"
    text = sim.get_config_map("gpu-operator", "time-slicing-config")["data"]["portal-mps4-none"]
    config = yaml.safe_load(text)
    assert "timeSlicing" not in config["sharing"]
    assert config["sharing"]["mps"] == {
        "renameByDefault": False,
        "resources": [{"name": "nvidia.com/gpu", "replicas": 4}],
    }
    # The device plugin follows it: GFD's sharing labels, the MPS-capable label the control daemon is scheduled by.
    assert labels["nvidia.com/gpu.sharing-strategy"] == "mps" and labels["nvidia.com/mps.capable"] == "true"
    node.refresh_from_db()
    assert (node.sharing_strategy, node.replicas, node.allocatable["nvidia.com/gpu"]) == ("mps", 4, "16")
    rc = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-A10-SHARED")
    assert (rc.kind, rc.replicas, rc.total) == ("mps", 4, 16)
    actions = list(AuditEvent.objects.filter(object_id=str(op.pk)).order_by("pk").values_list("action", flat=True))
    assert actions == ["node.config.request", "node.config.drain", "node.config.apply", "node.config.done"]


def test_the_current_mps_config_is_what_a_revert_asks_for(sim, clock, people):
    node = Node.objects.get(name=MPS_NODE)
    op = run(sim, clock, request_operation(people["admin"], node, plan_time_slicing(node, replicas=1, rename=False)))
    assert op.state == NodeConfigState.DONE, op.log
    assert op.previous["mps"] is True and op.previous["replicas"] == 4 and op.previous["rename"] is True
    node.refresh_from_db()
    assert node.sharing_strategy == "none" and node.allocatable["nvidia.com/gpu"] == "2"


@pytest.mark.parametrize("replicas", [49, 0])
def test_mps_client_counts_out_of_range_are_refused(sim, replicas):
    with pytest.raises(ConfigRefused) as refused:
        plan_time_slicing(Node.objects.get(name=A10_NODE), replicas=replicas, rename=False, mps=True)
    assert any("between 2 and 48" in e or "between 1" in e for e in refused.value.errors)


def test_mps_on_a_mig_node_is_refused_with_every_reason(sim):
    with pytest.raises(ConfigRefused) as refused:
        plan_time_slicing(Node.objects.get(name=MIXED_NODE), replicas=60, rename=False, mps=True)
    errors = " ".join(refused.value.errors)
    assert "between 2 and 48" in errors
    assert "MIG enabled" in errors and "not support with MPS" in errors
    assert "mixed MIG strategy" in errors
    assert not NodeConfigOperation.objects.exists()


def test_managed_nodes_are_not_carved(sim):
    with pytest.raises(ConfigRefused) as refused:
        plan_time_slicing(Node.objects.get(provider="eks"), replicas=4, rename=False, mps=True)
    assert "managed EKS node pool" in " ".join(refused.value.errors)


@pytest.mark.parametrize(
    "flags, replicas",
    [
        # "using --mig-strategy=mixed is not supported with MPS" (cmd/nvidia-device-plugin/main.go)
        ("{migStrategy: mixed}", 4),
        # "number of replicas must be >= 2" (api/config/v1/replicas.go)
        ("{migStrategy: none}", 1),
    ],
)
def test_the_device_plugin_refuses_mps_configs_it_cannot_run(sim, flags, replicas):
    """The plugin refuses the config and keeps running with the one it had (time-sliced x4 on the A10 node)."""
    before = sim.get_node(A10_NODE)["status"]["allocatable"]
    data = sim.get_config_map("gpu-operator", "time-slicing-config")["data"]
    data["bad-mps"] = (
        f"version: v1\nflags: {flags}\nsharing:\n  mps:\n    resources:\n"
        f"    - {{name: nvidia.com/gpu, replicas: {replicas}}}\n"
    )
    sim.apply_config_map("gpu-operator", "time-slicing-config", data)
    sim.patch_node_labels(A10_NODE, {"nvidia.com/device-plugin.config": "bad-mps"})
    node = sim.get_node(A10_NODE)
    assert node["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert node["status"]["allocatable"] == before


def test_the_page_and_the_api_offer_mps(client, api_client, people, sim):
    client.login(username="admin", password=PASSWORD)
    url = reverse("gpus:node-configure", args=[A10_NODE])
    page = client.get(url).content.decode()
    assert 'data-testid="mps-caveat"' in page and 'value="mps"' in page
    response = client.post(url, {"kind": "time-slicing", "sharing": "mps", "replicas": "4", "preview": "1"})
    page = response.content.decode()
    assert response.status_code == 200 and 'data-testid="preview"' in page and "MPS control daemon" in page
    refused = client.post(url, {"kind": "time-slicing", "sharing": "mps", "replicas": "60", "preview": "1"})
    assert "between 2 and 48" in refused.content.decode()
    api_client.force_authenticate(people["admin"])
    api = reverse("api:nodeconfigoperation-list")
    body = {"node": A10_NODE, "kind": "time-slicing", "sharing": "mps", "replicas": 4, "dry_run": True}
    answer = api_client.post(api, body, format="json")
    assert answer.status_code == 200 and answer.json()["requested"]["mps"] is True
    answer = api_client.post(api, body | {"sharing": "nvlink"}, format="json")
    assert answer.status_code == 400 and "sharing" in answer.json()
    answer = api_client.post(
        api, {"node": MIXED_NODE, "kind": "time-slicing", "sharing": "mps", "replicas": 4}, format="json"
    )
    assert answer.status_code == 400 and any("mixed MIG strategy" in e for e in answer.json()["layout"])
    assert not NodeConfigOperation.objects.exists()
