"""Layer-by-layer node diagnosis."""

import pytest

from gpus.diagnosis import ERROR, INFO, OK, WARNING, diagnose, overall
from tests.realdata import node_from_labels, real_json
from vocab.gfd import parse_node

H100_LABELS = real_json("02")


def by_layer(findings):
    return {f.layer: f for f in findings}


def test_healthy_gpu_node_reports_every_layer_ok():
    findings = diagnose(parse_node(node_from_labels(H100_LABELS, {"nvidia.com/gpu": "1"})))
    assert [f.layer for f in findings] == ["node", "driver", "device-plugin", "mig", "taint", "scheduling"]
    assert overall(findings) == OK


def test_labels_without_allocatable_gpus_blame_the_device_plugin():
    findings = by_layer(diagnose(parse_node(node_from_labels(H100_LABELS))))
    assert findings["device-plugin"].severity == ERROR
    assert "nothing is allocatable" in findings["device-plugin"].title
    assert "device plugin" in findings["device-plugin"].detail


def test_paused_device_plugin_is_named():
    labels = {**H100_LABELS, "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change"}
    finding = by_layer(diagnose(parse_node(node_from_labels(labels))))["device-plugin"]
    assert "paused" in finding.detail


def test_failed_mig_config():
    labels = {**H100_LABELS, "nvidia.com/mig.config.state": "failed", "nvidia.com/mig.config": "all-1g.10gb"}
    finding = by_layer(diagnose(parse_node(node_from_labels(labels, {"nvidia.com/gpu": "1"}))))["mig"]
    assert finding.severity == ERROR and "all-1g.10gb" in finding.detail


def test_untainted_and_cordoned_and_not_ready():
    node = node_from_labels(H100_LABELS, {"nvidia.com/gpu": "1"}, taints=[], ready=False)
    node["spec"]["unschedulable"] = True
    findings = by_layer(diagnose(parse_node(node)))
    assert findings["node"].severity == ERROR
    assert findings["taint"].severity == WARNING and "kubectl taint" in findings["taint"].action
    assert findings["scheduling"].severity == WARNING and "uncordon" in findings["scheduling"].action


def test_cpu_only_node_stops_after_driver_layer():
    findings = diagnose(parse_node(node_from_labels({}, taints=[])))
    assert [f.layer for f in findings] == ["node", "driver"]
    assert "No GPU labels" in findings[1].title


def test_device_plugin_paused_during_mig_change_is_a_warning_not_an_error():
    labels = {
        **H100_LABELS,
        "nvidia.com/mig.config.state": "pending",
        "nvidia.com/gpu.deploy.device-plugin": "paused-for-mig-change",
    }
    findings = by_layer(diagnose(parse_node(node_from_labels(labels))))
    assert findings["device-plugin"].severity == WARNING and "paused" in findings["device-plugin"].title
    assert findings["mig"].severity == WARNING
    # Paused without a reconfiguration in progress is an error: nothing will bring it back.
    labels["nvidia.com/mig.config.state"] = "success"
    assert by_layer(diagnose(parse_node(node_from_labels(labels))))["device-plugin"].severity == ERROR


def test_a_failed_mig_config_or_a_not_ready_node_does_not_accept_new_work():
    """Issue 16, node trust: the scheduling line says work is kept off, and blocking_reason (a placement input)
    names why."""
    from gpus.diagnosis import blocking_reason

    labels = {**H100_LABELS, "nvidia.com/mig.config.state": "failed", "nvidia.com/mig.config": "all-1g.10gb"}
    facts = parse_node(node_from_labels(labels, {"nvidia.com/gpu": "1"}))
    scheduling = by_layer(diagnose(facts))["scheduling"]
    assert scheduling.title != "Accepts new work" and "MIG configuration failed" in scheduling.detail
    assert "MIG configuration failed" in blocking_reason(facts)
    not_ready = parse_node(node_from_labels(H100_LABELS, {"nvidia.com/gpu": "1"}, ready=False))
    scheduling = by_layer(diagnose(not_ready))["scheduling"]
    assert scheduling.title != "Accepts new work" and "not Ready" in scheduling.detail


def test_any_error_in_the_diagnosis_keeps_work_off():
    from gpus.diagnosis import blocking_reason

    labels = {**H100_LABELS, "nvidia.com/gpu.count": "8"}
    facts = parse_node(node_from_labels(labels, {"nvidia.com/gpu": "8"}))
    facts.gpu_allocatable = {"nvidia.com/gpu": 0}  # capacity listed, nothing allocatable: the plugin's verdict
    findings = diagnose(facts)
    assert overall(findings) == ERROR
    assert "cannot run GPU work" in blocking_reason(facts, findings)


# -- issue 31 item 18: the layer at fault --------------------------------------------------------------------------


def test_gpu_operator_node_without_a_driver_is_a_driver_fault_not_the_device_plugins():
    """NFD and the GPU Operator labelled the node (pci-10de.present, gpu.present, gpu.deploy.*) but no driver runs,
    so GFD never labelled it and nothing is advertised. The GPU Operator starts GFD and the device plugin only after
    its validator found the driver (NVIDIA/gpu-operator assets/*/0500_daemonset.yaml wait for toolkit-ready)."""
    from gpus.diagnosis import blocking_reason
    from gpus.reconcile import _health
    from tests.node_shapes import shapes

    facts = parse_node(shapes()["no-driver-operator"])
    findings = by_layer(diagnose(facts))
    assert findings["driver"].severity == ERROR
    assert findings["driver"].title == "NVIDIA GPU without a working driver"
    assert "nvidia-driver-daemonset" in findings["driver"].action
    assert findings["device-plugin"].severity == INFO
    assert "nothing is allocatable" not in findings["device-plugin"].title
    assert "not here" in findings["device-plugin"].detail
    assert "driver" in blocking_reason(facts) and _health(facts, diagnose(facts)) == "error"


def test_nfd_only_node_without_a_driver_is_a_gpu_node_with_a_driver_fault():
    """Only Node Feature Discovery runs: it found an NVIDIA PCI device. Not 'no GPU', not the device plugin."""
    from tests.node_shapes import shapes

    facts = parse_node(shapes()["no-driver-nfd-only"])
    assert facts.is_gpu_node
    findings = diagnose(facts)
    driver = by_layer(findings)["driver"]
    assert (driver.severity, driver.title) == (ERROR, "NVIDIA GPU without a working driver")
    assert "feature.node.kubernetes.io/pci-10de.present=true" in driver.detail and "Install" in driver.action
    assert not any(f.layer == "device-plugin" and f.severity == ERROR for f in findings)


def test_dra_driver_node_is_not_a_broken_device_plugin():
    """The GPU Operator's GPUCluster stack runs NVIDIA's DRA driver (gpu.deploy.dra-driver=true) and sweeps the
    device plugin's switch off: no nvidia.com/gpu on the node by design (controllers/nodelabeling_controller.go)."""
    from gpus.diagnosis import blocking_reason
    from gpus.reconcile import _health
    from tests.node_shapes import shapes

    facts = parse_node(shapes()["dra-driver"])
    findings = diagnose(facts)
    assert overall(findings) != ERROR
    plugin = by_layer(findings)["device-plugin"]
    assert plugin.severity == INFO and "DRA driver" in plugin.title
    assert "gpu.nvidia.com" in plugin.detail and "resourceslices" in plugin.action
    assert not any("nothing is allocatable" in f.title for f in findings)
    assert "DRA driver" in blocking_reason(facts)
    assert _health(facts, findings) == "disabled"


def test_dra_node_whose_device_plugin_also_advertises_is_read_as_usual():
    labels = {**H100_LABELS, "nvidia.com/gpu.deploy.dra-driver": "true"}
    findings = by_layer(diagnose(parse_node(node_from_labels(labels, {"nvidia.com/gpu": "1"}))))
    assert findings["device-plugin"].severity == OK


@pytest.mark.parametrize("switch", ["nvidia.com/gpu.deploy.gpu-feature-discovery", "nvidia.com/gpu.deploy.operands"])
def test_missing_gfd_labels_say_nothing_about_the_driver_when_gfd_is_switched_off(switch):
    from tests.node_shapes import BARE, OPERATOR

    facts = parse_node(node_from_labels({**BARE, **OPERATOR, switch: "false"}))
    assert not any(f.title == "NVIDIA GPU without a working driver" for f in diagnose(facts))


def test_gpus_passed_to_virtual_machines_are_not_a_missing_driver():
    from tests.node_shapes import BARE

    labels = {**BARE, "nvidia.com/gpu.present": "true", "nvidia.com/gpu.workload.config": "vm-passthrough"}
    findings = diagnose(parse_node(node_from_labels(labels)))
    assert overall(findings) != ERROR
    assert by_layer(findings)["driver"].title == "GPUs set aside for virtual machines"
