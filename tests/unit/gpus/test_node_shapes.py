"""The node shapes of tests/node_shapes.py (sources cited there): what the inventory reads off each, the finding
that names it, the health it gets and whether placement keeps GPU work off it."""

import pytest

from gpus.diagnosis import ERROR, INFO, OK, WARNING, blocking_reason, diagnose
from gpus.reconcile import _health
from gpus.resources import derive_classes
from tests.node_shapes import EXPECTED, shapes
from vocab.gfd import parse_node
from vocab.taints import gpu_keeping, repelling

SHAPES = shapes()


def test_every_shape_has_an_expectation():
    assert set(EXPECTED) == set(SHAPES)


@pytest.mark.parametrize("key", sorted(EXPECTED))
def test_shape(key):
    product, gpus, provider, (title, severity), health, blocked = EXPECTED[key]
    facts = parse_node(SHAPES[key])
    assert (facts.product, facts.gpu_count, facts.provider) == (product, gpus, provider)
    findings = diagnose(facts)
    matching = [f for f in findings if title in f.title]
    assert matching, [f.title for f in findings]
    assert matching[0].severity == severity
    assert all(f.action for f in findings if f.severity in (WARNING, ERROR)), "every problem says what to do"
    assert _health(facts, findings) == health
    assert bool(blocking_reason(facts)) == blocked


def test_managed_nodes_do_not_report_missing_gfd_labels_as_a_fault():
    for key in ("gke-l4", "eks-p4d", "aks-nc24"):
        findings = diagnose(parse_node(SHAPES[key]))
        assert not any("without GPU labels" in f.title for f in findings)
        driver = next(f for f in findings if f.layer == "driver")
        assert "device plugin" in driver.detail and "=" in driver.detail  # names the stack and the label it read


#: Each managed shape's pool (from its provider's pool label) and the taints that keep general work off it by a GPU
#: convention (vocab.taints: GKE nvidia.com/gpu=present, AKS sku=gpu; EKS adds none by itself).
POOLS = {
    "gke-l4": ("l4-pool", ["nvidia.com/gpu=present:NoSchedule"]),
    "gke-h100-a3": ("a3-pool", ["nvidia.com/gpu=present:NoSchedule"]),
    "eks-p4d": ("a100", []),
    "aks-nc24": ("gpunp", ["sku=gpu:NoSchedule"]),
    "aks-nc24-spot": ("spotgpu", ["sku=gpu:NoSchedule"]),
    "gfd-new-labels": ("", ["nvidia.com/gpu=present:NoSchedule"]),
}


@pytest.mark.parametrize("key", sorted(POOLS))
def test_pool_and_gpu_taints(key):
    pool, gpu_taints = POOLS[key]
    facts = parse_node(SHAPES[key])
    assert facts.pool == pool
    assert [str(t) for t in gpu_keeping(facts.taints)] == gpu_taints


@pytest.mark.parametrize("key", ["aks-nc24", "aks-nc24-spot"])
def test_an_aks_gpu_node_is_not_called_untainted(key):
    (taint,) = [f for f in diagnose(parse_node(SHAPES[key])) if f.layer == "taint"]
    assert (taint.severity, taint.title) == (OK, "Tainted sku=gpu:NoSchedule")
    assert "AKS" in taint.detail


def test_a_spot_taint_is_no_gpu_taint():
    """The spot pool's own taint is not a GPU convention: GPU work tolerates it only once an admin declares it."""
    facts = parse_node(SHAPES["aks-nc24-spot"])
    assert [str(t) for t in repelling(facts.taints) if t not in gpu_keeping(facts.taints)] == [
        "kubernetes.azure.com/scalesetpriority=spot:NoSchedule"
    ]


def test_untainted_managed_node_is_advice_not_a_warning():
    taint = next(f for f in diagnose(parse_node(SHAPES["eks-p4d"])) if f.layer == "taint")
    assert taint.severity == INFO


def test_unhealthy_gpus_are_counted_and_classes_count_only_healthy_ones():
    facts = parse_node(SHAPES["unhealthy"])
    assert facts.unhealthy == {"nvidia.com/gpu": 2} and facts.unhealthy_gpus == 2
    stats = derive_classes([facts], {})
    (cls,) = stats.values()
    assert (cls.total, cls.allocatable, cls.free) == (8, 6, 6)


def test_unhealthy_time_sliced_gpu_withdraws_all_its_replicas():
    node = SHAPES["time-sliced"]
    node["status"]["allocatable"]["nvidia.com/gpu"] = "4"
    facts = parse_node(node)
    assert facts.unhealthy_gpus == 1
    assert any(f.title == "1 of 2 GPUs unhealthy" for f in diagnose(facts))


def test_blocked_nodes_offer_nothing_free():
    stats = derive_classes([parse_node(SHAPES["upgrade-draining"])], {})
    (cls,) = stats.values()
    assert (cls.total, cls.allocatable, cls.free) == (8, 0, 0)


def test_mps_and_time_slicing_classes_are_told_apart():
    mps = next(iter(derive_classes([parse_node(SHAPES["mps"])], {}).values()))
    ts = next(iter(derive_classes([parse_node(SHAPES["time-sliced"])], {}).values()))
    assert (mps.kind, mps.sharing_strategy, mps.replicas) == ("mps", "mps", 4)
    assert (ts.kind, ts.sharing_strategy) == ("shared", "time-slicing")


def test_arm64_node_and_clique():
    facts = parse_node(SHAPES["gh200"])
    assert facts.architecture == "arm64"
    assert facts.clique.endswith(".1")
    (cls,) = derive_classes([facts], {}).values()
    assert cls.architectures == {"arm64"}


def test_pressure_finding_names_the_taint():
    finding = next(f for f in diagnose(parse_node(SHAPES["memory-pressure"])) if "pressure" in f.title)
    assert "node.kubernetes.io/memory-pressure" in finding.detail


def test_mig_states_are_distinct_findings():
    titles = {
        key: {(f.title, f.detail, f.action) for f in diagnose(parse_node(SHAPES[key])) if f.layer == "mig"}
        for key in ("mig-pending", "mig-rebooting", "mig-failed")
    }
    assert len({frozenset(v) for v in titles.values()}) == 3


@pytest.mark.parametrize(
    "key, driver, cuda", [("gfd-old-labels", "535.104.05", "12.2"), ("gfd-new-labels", "560.35.03", "12.6")]
)
def test_old_and_new_gfd_spellings_give_the_driver_and_cuda(key, driver, cuda):
    facts = parse_node(SHAPES[key])
    assert (facts.driver_version, facts.cuda_version) == (driver, cuda)


def test_gke_mps_node_is_kept_off_and_its_class_offers_nothing():
    """GKE's MPS needs hostIPC: true in the pod (vocab.cloud.GKE_MPS_NEEDS_HOST_IPC); the portal never renders it."""
    facts = parse_node(SHAPES["gke-t4-mps"])
    assert "hostIPC" in blocking_reason(facts)
    (cls,) = derive_classes([facts], {}).values()
    assert (cls.key, cls.kind, cls.total, cls.free) == ("nvidia.com/gpu@Tesla-T4-SHARED", "mps", 4, 0)
    # NVIDIA's device plugin mounts the MPS pipe directory itself: its MPS shares stay usable.
    assert not blocking_reason(parse_node(SHAPES["mps"]))


def test_gke_shares_are_not_counted_as_whole_gpus_of_the_model():
    """GKE keeps the resource name nvidia.com/gpu for time-sharing: the share gets its own class, not Tesla-T4's."""
    ts = parse_node(SHAPES["gke-t4-time-sharing"])
    (cls,) = derive_classes([ts], {}).values()
    assert (cls.key, cls.kind, cls.replicas, cls.free) == ("nvidia.com/gpu@Tesla-T4-SHARED", "shared", 3, 3)


def test_b200_single_strategy_node_counts_physical_gpus_and_lays_out_seven_instances_each():
    """Issue 31 item 17: GFD counts 56 MIG devices on an 8× B200 cut all-1g.23gb; the catalogue (7 per GPU) turns
    that into 8 GPUs, each with seven 1g.23gb instances at slots 0-6, and one class of 56."""
    from gpus.reconcile import _gpu_rows

    facts = parse_node(SHAPES["b200-mig-single"])
    assert (facts.gpu_count, facts.mig_count_known, facts.single_mig_profile) == (8, True, "1g.23gb")
    assert not any(f.title == "Physical GPU count unknown" for f in diagnose(facts))
    rows = _gpu_rows(facts)
    assert len(rows) == 8
    assert all(
        [(p["profile"], p["start"]) for p in row["partitions"]] == [("1g.23gb", s) for s in range(7)] for row in rows
    )
    (cls,) = derive_classes([facts], {}).values()
    assert (cls.key, cls.kind, cls.total) == ("nvidia.com/gpu@NVIDIA-B200-MIG-1g.23gb", "mig", 56)


def test_h200_mixed_node_lays_out_the_operators_balanced_layout_on_each_gpu():
    from gpus.reconcile import _gpu_rows

    facts = parse_node(SHAPES["h200-mig-mixed"])
    rows = _gpu_rows(facts)
    assert len(rows) == 8
    layout = [("1g.18gb", 0), ("1g.18gb", 1), ("2g.35gb", 2), ("3g.71gb", 4)]
    assert all([(p["profile"], p["start"]) for p in row["partitions"]] == layout for row in rows)
    classes = derive_classes([facts], {})
    assert {key: cls.total for key, cls in classes.items()} == {
        "nvidia.com/mig-1g.18gb@NVIDIA-H200": 16,
        "nvidia.com/mig-2g.35gb@NVIDIA-H200": 8,
        "nvidia.com/mig-3g.71gb@NVIDIA-H200": 8,
    }
