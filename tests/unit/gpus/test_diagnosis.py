"""Layer-by-layer node diagnosis."""

from gpus.diagnosis import ERROR, OK, WARNING, diagnose, overall
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
