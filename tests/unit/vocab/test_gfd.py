"""GFD label and capacity parsing against real captures (shared/fixtures/real 01, 02, 10)."""

import json
import re
from decimal import Decimal

import pytest

from tests.realdata import doc_blocks, node_from_labels, real_json
from vocab.gfd import parse_node, resource_for_profile
from vocab.quantity import parse_quantity


def _mig_strategy_sections():
    """From fixture 10: [(strategy, capacity dict, labels dict)] for none, single and mixed."""
    out = []
    for block, strategy in zip(doc_blocks("10")[1:], ["none", "single", "mixed"], strict=True):
        capacity_part = block.split("Capacity:", 1)[1].split("...", 1)[0]
        capacity = {k: v for k, v in re.findall(r"(nvidia\.com/[\w.\-]+):\s+(\d+)", capacity_part)}
        json_blocks = re.findall(r"^\s*\{\n(?:.*\n)*?\s*\}\s*$", block, flags=re.M)
        labels = json.loads(json_blocks[-1])
        out.append((strategy, capacity, labels))
    return out


def test_h100_mixed_all_balanced_labels():
    labels = real_json("01")
    capacity = {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-2g.20gb": "1", "nvidia.com/mig-3g.40gb": "1"}
    facts = parse_node(node_from_labels(labels, capacity))
    assert facts.product == "NVIDIA-H100-80GB-HBM3"
    assert facts.gpu_count == 1
    assert facts.gpu_memory_mb == 81559
    assert facts.driver_version == "550.54.15"
    assert facts.cuda_version == "12.4"
    assert facts.compute_capability == "9.0"
    assert facts.gpu_family == "hopper"
    assert facts.mig_capable and facts.mig_strategy == "mixed"
    assert (facts.mig_config, facts.mig_config_state) == ("all-balanced", "success")
    assert [(p.profile, p.count, p.memory_mb, p.multiprocessors) for p in facts.mig_profiles] == [
        ("1g.10gb", 2, 9984, 16),
        ("2g.20gb", 1, 20096, 32),
        ("3g.40gb", 1, 40320, 60),
    ]
    assert facts.sharing_strategy == "none"
    assert facts.operand_deploy["device-plugin"] == "true"


def test_h100_mixed_without_device_plugin_falls_back_to_gfd_counts():
    facts = parse_node(node_from_labels(real_json("01")))
    assert facts.gpu_capacity == {}
    assert {p.profile: p.count for p in facts.mig_profiles} == {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}
    assert not facts.gpus_advertised


def test_h100_single_all_disabled_labels():
    facts = parse_node(node_from_labels(real_json("02"), {"nvidia.com/gpu": "1"}))
    assert facts.product == "NVIDIA-H100-80GB-HBM3"
    assert facts.mig_capable and facts.mig_strategy == "single"
    assert facts.single_mig_profile == ""
    assert facts.mig_config == "all-disabled"
    assert facts.gpu_count == 1 and facts.replicas == 1
    assert facts.gpus_advertised


@pytest.mark.parametrize("index", [0, 1, 2])
def test_a100_mig_strategies_capacity_and_labels(index):
    strategy, capacity, labels = _mig_strategy_sections()[index]
    facts = parse_node(node_from_labels(labels, capacity))
    assert facts.product == "A100-SXM4-40GB"
    assert facts.mig_strategy == strategy
    assert facts.gpu_count == 1, "one physical GPU in every section of the capture"
    assert facts.driver_version == "450.80.02"
    assert facts.cuda_version == "11.0"
    if strategy == "none":
        assert facts.gpu_capacity == {"nvidia.com/gpu": 1}
        assert facts.gpu_memory_mb == 40537
    elif strategy == "single":
        assert facts.gpu_capacity == {"nvidia.com/gpu": 7}
        assert facts.single_mig_profile == "1g.5gb"
    else:
        # Old GFD labelled 3g.20gb as 3g.21gb (NVIDIA/gpu-feature-discovery#7); the resource name wins and
        # the label facts are matched by slice count.
        assert [(p.profile, p.count, p.memory_mb) for p in facts.mig_profiles] == [
            ("1g.5gb", 1, 4864),
            ("2g.10gb", 1, 9984),
            ("3g.20gb", 1, 20096),
        ]


def test_time_sliced_node_is_recognised_from_shared_suffix():
    labels = {
        "nvidia.com/gpu.product": "Tesla-T4-SHARED",
        "nvidia.com/gpu.count": "4",
        "nvidia.com/gpu.replicas": "4",
        "nvidia.com/gpu.memory": "15360",
    }
    facts = parse_node(node_from_labels(labels, {"nvidia.com/gpu": "16"}))
    assert facts.product == "Tesla-T4"
    assert facts.sharing_strategy == "time-slicing"
    assert facts.replicas == 4 and facts.gpu_count == 4
    assert not facts.shared_renamed


def test_time_sliced_renamed_resource():
    labels = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4"}
    facts = parse_node(node_from_labels(labels, {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "16"}))
    assert facts.shared_renamed and facts.sharing_strategy == "time-slicing"


def test_cpu_node_has_no_gpu_facts():
    facts = parse_node(node_from_labels({"kubernetes.io/hostname": "cpu-1"}, taints=[]))
    assert not facts.is_gpu_node
    assert facts.gpu_taint is None


@pytest.mark.parametrize(
    "text,value",
    [("8", 8), ("500m", Decimal("0.5")), ("64Gi", 64 * 2**30), ("16G", 16 * 10**9), ("1e3", 1000), ("0", 0)],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "abc", "5Xi", "1e3Gi", "--1"])
def test_parse_quantity_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_resource_name_for_media_extension_profile():
    assert resource_for_profile("1g.10gb+me") == "nvidia.com/mig-1g.10gb.me"


@pytest.mark.parametrize("value", ["0", "-2"])
def test_a_replicas_label_below_one_is_no_sharing_not_zero_replicas(value):
    """Issue 16, node trust: a `gpu.replicas=0` label is not shown as 0 replicas (nor divides by zero)."""
    labels = {"nvidia.com/gpu.product": "Tesla-T4", "nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": value}
    facts = parse_node(node_from_labels(labels, {"nvidia.com/gpu": "4"}))
    assert facts.replicas == 1 and facts.sharing_strategy == "none" and facts.gpu_count == 4


@pytest.mark.parametrize(
    ("profile", "resource"),
    [
        ("1g.24gb+me.all", "nvidia.com/mig-1g.24gb.me.all"),
        ("1g.24gb+gfx", "nvidia.com/mig-1g.24gb.gfx"),
        ("1g.24gb-me", "nvidia.com/mig-1g.24gb-me"),
    ],
)
def test_resource_names_of_the_rtx_pro_variants(profile, resource):
    """NVIDIA/k8s-device-plugin internal/rm/rm.go: "mig-" + profile with '+' replaced by '.'."""
    assert resource_for_profile(profile) == resource


def test_mixed_rtx_pro_node_reads_every_variant_with_its_gfd_labels():
    """Issue 31 item 17: an RTX PRO 6000 Blackwell GPU cut into 1g.24gb-me and 2g.48gb+gfx (mixed strategy). GFD
    names the mixed labels after the resource (nvidia.com/mig-<profile>.<attribute>, internal/lm/mig-strategy.go)."""
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
        "nvidia.com/gpu.count": "1",
        "nvidia.com/mig.strategy": "mixed",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig-1g.24gb-me.count": "2",
        "nvidia.com/mig-1g.24gb-me.multiprocessors": "46",
        "nvidia.com/mig-1g.24gb-me.slices.gi": "1",
        "nvidia.com/mig-2g.48gb.gfx.count": "1",
        "nvidia.com/mig-2g.48gb.gfx.multiprocessors": "94",
        "nvidia.com/mig-2g.48gb.gfx.slices.gi": "2",
    }
    capacity = {"nvidia.com/mig-1g.24gb-me": "2", "nvidia.com/mig-2g.48gb.gfx": "1"}
    facts = parse_node(node_from_labels(labels, capacity))
    assert [(p.profile, p.count, p.multiprocessors) for p in facts.mig_profiles] == [
        ("1g.24gb-me", 2, 46),
        ("2g.48gb+gfx", 1, 94),
    ]
    assert facts.gpu_count == 1 and facts.mig_strategy == "mixed"
