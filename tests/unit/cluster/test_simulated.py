"""The embedded simulated cluster behaves like Kubernetes + the NVIDIA GPU Operator (no Django here)."""

from __future__ import annotations

import json
import multiprocessing
import re
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.base import MANAGED_BY_LABEL, ClusterBackend, Conflict, Invalid, NotFound
from cluster.sim import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    SimulatedCluster,
    selector_matches,
)
from cluster.sim.pod_resources import decode_quantity
from tests.clock import FakeClock
from tests.realdata import doc_blocks, real_json
from tests.sim_objects import SMALL, h100_node, job, pod_of, scheduled_condition
from vocab.products import layout_fits, lookup_product, preset_mig_configs, sanitise_product_name

DEMO = Path(__file__).resolve().parents[3] / "cluster" / "scenarios" / "demo.yaml"
MIG_PROFILE_KEY = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb(?:\+me)?)\.(.+)$")


def workload(cluster, name: str, namespace: str = "team-a") -> dict:
    return next(j for j in cluster.list_workloads(namespace) if j["metadata"]["name"] == name)


def nvidia_labels(node: dict) -> dict:
    return {k: v for k, v in node["metadata"]["labels"].items() if k.startswith("nvidia.com/")}


def gpu_resources(node: dict, section: str = "capacity") -> dict:
    return {k: v for k, v in node["status"][section].items() if k.startswith("nvidia.com/")}


@pytest.fixture
def demo(clock) -> SimulatedCluster:
    cluster = SimulatedCluster(None, scenario=DEMO, clock=clock)
    cluster.ensure_namespace("team-a")
    return cluster


@pytest.fixture
def small(clock) -> SimulatedCluster:
    return SimulatedCluster(None, scenario=SMALL, clock=clock)


# ---------------------------------------------------------------------------------------------------------------
# Quantities, selectors, product facts
# ---------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("4Gi", 4 * 2**30), ("16G", 16 * 10**9), ("1e3", 1000), ("2", 2), (3, 3), ("1.5", 1.5)],
)
def test_the_api_server_accepts_quantities(small, text, value):
    assert decode_quantity(text) == pytest.approx(value)
    assert small.create_workload(job("q", cpu=text))["metadata"]["name"] == "q"


@pytest.mark.parametrize("bad", ["", "4 Gi", "abc", "1.2.3"])
def test_the_api_server_refuses_garbage_quantities(small, bad):
    with pytest.raises(ValueError):
        decode_quantity(bad)
    message = (
        f'spec.template.spec.containers[0].resources.limits[cpu]: Invalid value: "{bad}": quantities must match '
        "the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )
    with pytest.raises(Invalid, match=re.escape(message)):
        small.create_workload(job("q", cpu=bad))
    assert small.list_workloads() == []


def test_the_api_server_trims_quantities_like_quantity_unmarshal_json(small):
    assert decode_quantity(" 2 ") == 2
    assert small.create_workload(job("q", cpu=" 2"))["metadata"]["name"] == "q"


def test_label_selectors():
    labels = {"app": "x", "tier": "gpu"}
    assert selector_matches("app=x,tier=gpu", labels)
    assert selector_matches("app==x,!missing", labels)
    assert not selector_matches("app=y", labels)
    assert selector_matches("tier", labels) and not selector_matches("!tier", labels)
    assert selector_matches("app!=y", labels) and not selector_matches("app!=x", labels)
    assert selector_matches("tier in (cpu, gpu)", labels) and not selector_matches("tier notin (gpu)", labels)
    assert selector_matches(None, labels) and not selector_matches("missing", {})


def test_sanitised_product_names_match_gfd():
    assert sanitise_product_name("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert sanitise_product_name("NVIDIA A100-SXM4-40GB") == "NVIDIA-A100-SXM4-40GB"
    assert sanitise_product_name("Tesla T4") == "Tesla-T4"


def test_mig_geometry():
    a100 = lookup_product("NVIDIA A100-SXM4-80GB")
    assert layout_fits(a100, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})
    assert layout_fits(a100, {"1g.10gb": 7})
    assert not layout_fits(a100, {"3g.40gb": 3}), "two 3g instances at most"
    assert not layout_fits(a100, {"4g.40gb": 1, "3g.40gb": 1, "1g.10gb": 1}), "only 7 compute slices"
    assert not layout_fits(a100, {"2g.20gb": 3, "1g.10gb": 2}), "1g cannot start at slice 7"
    assert preset_mig_configs(lookup_product("NVIDIA A100-SXM4-40GB"))["all-1g.10gb"] == {"1g.10gb": 4}
    assert preset_mig_configs(lookup_product("Tesla T4")) == {"all-disabled": None}


# ---------------------------------------------------------------------------------------------------------------
# Nodes as GFD, the GPU Operator and the device plugin would present them
# ---------------------------------------------------------------------------------------------------------------


def test_simulated_cluster_is_a_cluster_backend(demo):
    assert isinstance(demo, ClusterBackend)
    assert demo.name == "simulated"


def _mig_label_shapes(labels: dict) -> dict[str, set[str]]:
    shapes: dict[str, set[str]] = {}
    for key in labels:
        match = MIG_PROFILE_KEY.match(key)
        if match:
            shapes.setdefault(match.group(1), set()).add(match.group(2))
    return shapes


def test_demo_mig_mixed_node_labels_have_the_shape_of_the_real_capture(demo):
    real = real_json("01")
    node = demo.get_node("gpu-a100-mig-01")
    labels = node["metadata"]["labels"]
    real_suffixes = set().union(*_mig_label_shapes(real).values())
    sim_shapes = _mig_label_shapes(labels)
    assert set(sim_shapes) == {"1g.10gb", "2g.20gb", "3g.40gb"}
    for profile, suffixes in sim_shapes.items():
        assert suffixes == real_suffixes, profile
        prefix = f"nvidia.com/mig-{profile}"
        for suffix in suffixes - {"product", "sharing-strategy"}:
            assert labels[f"{prefix}.{suffix}"].isdigit(), (suffix, labels[f"{prefix}.{suffix}"])
        assert labels[f"{prefix}.product"] == f"{labels['nvidia.com/gpu.product']}-MIG-{profile}"
        assert labels[f"{prefix}.sharing-strategy"] == real["nvidia.com/mig-1g.10gb.sharing-strategy"]
    # The rest of the nvidia.com/ keys are the real node's too (nvsm is only deployed on DGX systems).
    real_other = {k for k in real if k.startswith("nvidia.com/") and not MIG_PROFILE_KEY.match(k)}
    sim_other = {k for k in labels if k.startswith("nvidia.com/") and not MIG_PROFILE_KEY.match(k)}
    assert sim_other == real_other - {"nvidia.com/gpu.deploy.nvsm"}
    assert labels["nvidia.com/mig.config"] == "all-balanced"
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert labels["nvidia.com/gpu.replicas"] == real["nvidia.com/gpu.replicas"] == "0"
    assert gpu_resources(node) == {
        "nvidia.com/mig-1g.10gb": "16",
        "nvidia.com/mig-2g.20gb": "8",
        "nvidia.com/mig-3g.40gb": "8",
    }


@pytest.mark.parametrize(
    ("capture", "mig"),
    [("01", {"strategy": "mixed", "config": "all-balanced"}), ("02", {"strategy": "single", "config": "all-disabled"})],
)
def test_h100_labels_equal_the_real_node(capture, mig):
    """The same hardware and config as the captured node yields the captured nvidia.com/ labels, value for value."""
    real = real_json(capture)
    scenario = {
        "nodes": [
            {
                "name": "s4124-0073",
                "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 1, "machine": "PIO-4124GS-TNR-01-NC24B"},
                "mig": mig,
                "driver": "550.54.15",
                "cuda": "12.4",
            }
        ]
    }
    labels = nvidia_labels(SimulatedCluster(None, scenario=scenario).get_node("s4124-0073"))
    ignored = {"nvidia.com/gfd.timestamp", "nvidia.com/gpu.deploy.nvsm"}
    expected = {k: v for k, v in real.items() if k.startswith("nvidia.com/") and k not in ignored}
    assert {k: v for k, v in labels.items() if k not in ignored} == expected
    assert labels["nvidia.com/gfd.timestamp"].isdigit() and len(labels["nvidia.com/gfd.timestamp"]) == 10


def _doc_block(title: str) -> str:
    (block,) = [block for block in doc_blocks("10") if title in block]
    return block


def _doc_json_blocks(block: str) -> list[dict]:
    return [json.loads(textwrap.dedent(m)) for m in re.findall(r"(?ms)^      \{\n.*?^      \}$", block)]


def _doc_capacity(block: str) -> dict[str, str]:
    section = block.split("Capacity:", 1)[1].split("...", 1)[0]
    return dict(re.findall(r"^\s*(nvidia\.com/\S+):\s+(\d+)\s*$", section, re.M))


def _a100_doc_node(mig: dict, memory_mb: int | None = None) -> dict:
    scenario = {
        "nodes": [
            {
                "name": "dgx",
                # The R450 driver of the capture printed the name without the "NVIDIA " prefix.
                "gpu": {"product": "A100-SXM4-40GB", "count": 1, "memory_mb": memory_mb, "machine": "NVIDIA DGX"},
                "mig": mig,
                "driver": "450.80.02",
                "cuda": "11.0",
            }
        ]
    }
    return SimulatedCluster(None, scenario=scenario).get_node("dgx")


def _assert_doc_labels(expected: dict, node: dict, rename: dict | None = None) -> None:
    labels = node["metadata"]["labels"]
    for key, value in expected.items():
        if key in ("nvidia.com/gfd.timestamp", "nvidia.com/gpu.machine"):
            continue
        for old, new in (rename or {}).items():
            key = key.replace(old, new)
        assert labels.get(key) == value, key


def test_single_strategy_matches_the_real_a100_capture():
    single = _doc_block("The single strategy")
    (expected,) = _doc_json_blocks(single)
    node = _a100_doc_node({"strategy": "single", "config": "all-1g.5gb"})
    assert gpu_resources(node) == _doc_capacity(single) == {"nvidia.com/gpu": "7"}
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "A100-SXM4-40GB-MIG-1g.5gb"
    _assert_doc_labels(expected, node)


def test_mixed_and_none_strategies_match_the_real_a100_capture():
    none, mixed = _doc_block("The none strategy"), _doc_block("The mixed strategy")
    expected_mixed = _doc_json_blocks(mixed)[0]
    node = _a100_doc_node({"strategy": "mixed", "layout": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}}, memory_mb=40537)
    assert gpu_resources(node) == _doc_capacity(mixed)
    # The capture's old GFD mislabelled 3g.20gb as 3g.21gb (NVIDIA/gpu-feature-discovery#7).
    _assert_doc_labels(expected_mixed, node, rename={"mig-3g.21gb": "mig-3g.20gb"})
    expected_none = _doc_json_blocks(none)[0]
    node = _a100_doc_node({"strategy": "none", "config": "all-disabled"}, memory_mb=40537)
    assert gpu_resources(node) == _doc_capacity(none) == {"nvidia.com/gpu": "1"}
    _assert_doc_labels(expected_none, node)


def test_demo_single_strategy_node(demo):
    node = demo.get_node("gpu-a100-40g-01")
    labels = node["metadata"]["labels"]
    assert gpu_resources(node) == gpu_resources(node, "allocatable") == {"nvidia.com/gpu": "28"}
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    assert labels["nvidia.com/gpu.count"] == "28"
    assert labels["nvidia.com/gpu.memory"] == "4864"
    assert labels["nvidia.com/mig.strategy"] == "single"
    assert labels["nvidia.com/mig.config"] == "all-1g.5gb"
    assert labels["nvidia.com/cuda.driver-version.full"] == "535.161.08"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "12.2"


def test_demo_h100_nodes(demo):
    nodes, _ = demo.list_nodes("nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3")
    assert [n["metadata"]["name"] for n in nodes] == [f"gpu-h100-{i:02d}" for i in range(1, 9)]
    for node in nodes:
        assert gpu_resources(node) == {"nvidia.com/gpu": "8"}
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in node["spec"]["taints"]
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.")
        assert int(node["metadata"]["resourceVersion"]) > 0 and node["metadata"]["uid"]
    cordoned = [n for n in nodes if n["spec"].get("unschedulable")]
    assert [n["metadata"]["name"] for n in cordoned] == ["gpu-h100-08"]
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in cordoned[0]["spec"]["taints"]


def test_device_plugin_missing_node_has_labels_but_no_gpu_resources(demo):
    node = demo.get_node("gpu-t4-01")
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "Tesla-T4"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/gpu.present"] == "true"
    assert gpu_resources(node) == {} and gpu_resources(node, "allocatable") == {}


def test_time_sliced_node_advertises_replicas(demo):
    node = demo.get_node("gpu-a10-01")
    labels = node["metadata"]["labels"]
    assert gpu_resources(node) == {"nvidia.com/gpu": "16"}
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-A10-SHARED"
    assert labels["nvidia.com/gpu.count"] == "4"
    assert labels["nvidia.com/gpu.replicas"] == "4"
    assert labels["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    key = labels["nvidia.com/device-plugin.config"]
    config = demo.get_config_map("gpu-operator", "time-slicing-config")
    assert "replicas: 4" in config["data"][key]


def test_renamed_time_slicing_advertises_gpu_shared():
    scenario = {
        "nodes": [
            {"name": "t4", "gpu": {"product": "Tesla T4", "count": 4}, "time_slicing": {"replicas": 4, "rename": True}}
        ]
    }
    node = SimulatedCluster(None, scenario=scenario).get_node("t4")
    assert gpu_resources(node) == {"nvidia.com/gpu.shared": "16"}
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert node["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "4"


def test_cpu_nodes_have_no_gpu_labels_or_taints(demo):
    for name in ("worker-cpu-01", "worker-cpu-02"):
        node = demo.get_node(name)
        assert nvidia_labels(node) == {}
        assert "taints" not in node["spec"]
        assert gpu_resources(node) == {}


def test_not_ready_node_from_scenario():
    scenario = {"nodes": [h100_node("down", ready=False)]}
    node = SimulatedCluster(None, scenario=scenario).get_node("down")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False"
    assert {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"} in node["spec"]["taints"]


def test_unknown_node_is_not_found(demo):
    with pytest.raises(NotFound):
        demo.get_node("nope")


# ---------------------------------------------------------------------------------------------------------------
# Scheduler
# ---------------------------------------------------------------------------------------------------------------


def test_job_binds_when_it_fits(small):
    created = small.create_workload(job("train", gpus=4))
    assert created["status"]["active"] == 1 and created["status"]["startTime"]
    pod = pod_of(small, "train")
    assert pod["spec"]["nodeName"] in ("gpu-a", "gpu-b")
    assert scheduled_condition(pod)["status"] == "True"
    assert re.fullmatch(r"train-[bcdfghjklmnpqrstvwxz2456789]{5}", pod["metadata"]["name"])
    assert pod["metadata"]["labels"]["job-name"] == "train"
    assert pod["metadata"]["labels"]["controller-uid"] == created["metadata"]["uid"]
    assert pod["metadata"]["labels"]["portal-job"] == "train"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
    events = small.pod_events("team-a", pod["metadata"]["name"])
    assert events[0]["reason"] == "Scheduled"


def test_least_allocated_spreads_jobs(small):
    small.create_workload(job("one", gpus=2))
    small.create_workload(job("two", gpus=2))
    assert {pod_of(small, "one")["spec"]["nodeName"], pod_of(small, "two")["spec"]["nodeName"]} == {"gpu-a", "gpu-b"}


def test_pending_with_scheduler_message_then_retried_when_capacity_frees(small):
    small.create_workload(job("big-a", gpus=8))
    small.create_workload(job("big-b", gpus=8))
    small.create_workload(job("waiting", gpus=1))
    pod = pod_of(small, "waiting")
    assert "nodeName" not in pod["spec"]
    assert pod["status"]["phase"] == "Pending"
    condition = scheduled_condition(pod)
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    assert condition["message"] == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    (event,) = [e for e in small.pod_events("team-a", pod["metadata"]["name"]) if e["reason"] == "FailedScheduling"]
    assert event["type"] == "Warning" and event["message"] == condition["message"]
    assert event["involvedObject"]["kind"] == "Pod" and event["involvedObject"]["name"] == pod["metadata"]["name"]
    assert event["count"] == 1 and event["firstTimestamp"] and event["lastTimestamp"]
    assert event["source"]["component"] == "default-scheduler"

    assert small.delete_workload("team-a", "big-a") is True
    assert small.delete_workload("team-a", "big-a") is False
    pod = pod_of(small, "waiting")
    assert pod["spec"]["nodeName"] in ("gpu-a", "gpu-b")
    assert scheduled_condition(pod)["status"] == "True"
    assert not [p for p in small.list_pods("team-a") if p["metadata"]["labels"]["job-name"] == "big-a"]


def test_demo_message_counts_every_node_once(demo):
    demo.create_workload(job("no-toleration", gpus=1, tolerate=False))
    message = scheduled_condition(pod_of(demo, "no-toleration"))["message"]
    # 16 nodes: the cordoned H100; 13 tainted (7 H100, A100 single, A10, the EKS L4 node group's taint, and the T4
    # without plugin, the MIG mixed node and the MPS node, which also lack nvidia.com/gpu: kube-scheduler v1.20 runs
    # TaintToleration before NodeResourcesFit and reports the first plugin that fails); 2 CPU nodes without
    # nvidia.com/gpu.
    assert message == (
        "0/16 nodes are available: 1 node(s) were unschedulable, 13 node(s) had taint {nvidia.com/gpu: present}, "
        "that the pod didn't tolerate, 2 Insufficient nvidia.com/gpu."
    )


def test_toleration_lets_the_pod_onto_tainted_gpu_nodes(small):
    small.create_workload(job("untolerated", tolerate=False))
    message = scheduled_condition(pod_of(small, "untolerated"))["message"]
    assert "2 node(s) had taint {nvidia.com/gpu: present}, that the pod didn't tolerate" in message
    assert "1 Insufficient nvidia.com/gpu" in message
    small.create_workload(job("tolerated"))
    assert pod_of(small, "tolerated")["spec"]["nodeName"].startswith("gpu-")


def test_an_untolerated_taint_is_reported_before_affinity_and_resources(small):
    """kube-scheduler v1.20's filter order (NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, ...,
    NodeResourcesFit): a tainted node the pod neither tolerates nor is pinned to, and that lacks what it asks,
    is reported for its taint."""
    pinned = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["cpu-a"]}]}]}}}  # fmt: skip
    small.create_workload(job("pinned", gpus=9, tolerate=False, affinity=pinned))
    message = scheduled_condition(pod_of(small, "pinned"))["message"]
    assert message == (
        "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) had taint {nvidia.com/gpu: present}, "
        "that the pod didn't tolerate."
    )


def test_cpu_only_pod_goes_to_an_untainted_node(small):
    small.create_workload(job("cpu-job", gpus=0, tolerate=False, cpu="2", memory="4Gi"))
    assert pod_of(small, "cpu-job")["spec"]["nodeName"] == "cpu-a"


def test_node_affinity_and_selector(demo):
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A10-SHARED"]}
                        ]
                    }
                ]
            }
        }
    }
    demo.create_workload(job("a10", affinity=affinity))
    assert pod_of(demo, "a10")["spec"]["nodeName"] == "gpu-a10-01"

    not_h100 = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "nvidia.com/gpu.product", "operator": "NotIn", "values": ["NVIDIA-H100-80GB-HBM3"]},
                            {"key": "nvidia.com/mig.strategy", "operator": "DoesNotExist"},
                            {"key": "nvidia.com/gpu.present", "operator": "Exists"},
                        ]
                    }
                ]
            }
        }
    }
    demo.create_workload(job("not-h100", affinity=not_h100))
    assert pod_of(demo, "not-h100")["spec"]["nodeName"] == "gpu-a10-01"

    demo.create_workload(job("nowhere", node_selector={"nvidia.com/gpu.product": "NVIDIA-B200"}))
    message = scheduled_condition(pod_of(demo, "nowhere"))["message"]
    assert "node(s) didn't match node selector" in message


def test_mig_resources_schedule_on_the_mixed_node(demo):
    demo.create_workload(job("slice", resource="nvidia.com/mig-3g.40gb", gpus=2))
    assert pod_of(demo, "slice")["spec"]["nodeName"] == "gpu-a100-mig-01"


def test_cordoned_node_never_gets_pods(demo):
    for i in range(14):
        demo.create_workload(job(f"fill-{i}", gpus=8))
    bound = [p["spec"].get("nodeName") for p in demo.list_pods("team-a")]
    assert "gpu-h100-08" not in bound
    # 7 schedulable H100s, the 28-slot single-strategy A100 node (3 pods) and the 16-replica A10 node (2 pods).
    assert sum(1 for n in bound if n) == 12
    waiting = [p for p in demo.list_pods("team-a") if not p["spec"].get("nodeName")]
    assert all("1 node(s) were unschedulable" in scheduled_condition(p)["message"] for p in waiting)


def test_cpu_and_memory_requests_are_accounted(small):
    small.create_workload(job("hog", gpus=0, tolerate=False, cpu="15", memory="8Gi"))
    small.create_workload(job("second", gpus=0, tolerate=False, cpu="2", memory="1Gi"))
    assert pod_of(small, "hog")["spec"]["nodeName"] == "cpu-a"
    message = scheduled_condition(pod_of(small, "second"))["message"]
    assert message == (
        "0/3 nodes are available: 1 Insufficient cpu, 2 node(s) had taint {nvidia.com/gpu: present}, "
        "that the pod didn't tolerate."
    )


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[*settings.default.suppress_health_check, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=1, max_value=8)), min_size=1, max_size=25))
def test_never_overcommits_and_pending_pods_really_do_not_fit(ops):
    cluster = SimulatedCluster(None, scenario=SMALL, clock=FakeClock())
    created: list[str] = []
    for index, (create, gpus) in enumerate(ops):
        if create or not created:
            name = f"j{index}"
            cluster.create_workload(job(name, gpus=gpus))
            created.append(name)
        else:
            cluster.delete_workload("team-a", created.pop(gpus % len(created)))
        nodes = {n["metadata"]["name"]: n for n in cluster.list_nodes()[0]}
        used: dict[str, int] = {}
        for pod in cluster.list_pods("team-a"):
            node = pod["spec"].get("nodeName")
            gpus_wanted = int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
            if node:
                used[node] = used.get(node, 0) + gpus_wanted
        for node, count in used.items():
            assert count <= int(nodes[node]["status"]["allocatable"]["nvidia.com/gpu"]), (node, count)
        for pod in cluster.list_pods("team-a"):
            if not pod["spec"].get("nodeName"):
                wanted = int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
                free = [8 - used.get(n, 0) for n in ("gpu-a", "gpu-b")]
                assert max(free) < wanted, "a pending pod that fits must have been bound"


# ---------------------------------------------------------------------------------------------------------------
# Admission: validation, namespaces, idempotency
# ---------------------------------------------------------------------------------------------------------------


def test_create_is_idempotent(small):
    first = small.create_workload(job("same"))
    again = small.create_workload(job("same", gpus=3))
    assert again["metadata"]["uid"] == first["metadata"]["uid"]
    assert len(small.list_workloads("team-a")) == 1
    assert len(small.list_pods("team-a")) == 1


def test_job_of_another_owner_is_a_conflict(small):
    manifest = job("foreign")
    manifest["metadata"]["labels"] = {MANAGED_BY_LABEL: "someone-else"}
    small.create_workload(manifest)
    with pytest.raises(Conflict):
        small.create_workload(job("foreign"))


@pytest.mark.parametrize("name", ["Bad_Name", "-leading", "a" * 64, ""])
def test_invalid_name_is_invalid(small, name):
    with pytest.raises(Invalid, match="is invalid"):
        small.create_workload(job(name))


def test_invalid_specs_are_invalid(small):
    fractional = job("half-gpu")
    fractional["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "0.5"
    with pytest.raises(Invalid, match="must be an integer"):
        small.create_workload(fractional)
    always = job("always")
    always["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    with pytest.raises(Invalid, match='Unsupported value: "Always"'):
        small.create_workload(always)
    requests_only = job("requests-only")
    requests_only["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    with pytest.raises(Invalid, match="Limit must be set"):
        small.create_workload(requests_only)
    assert small.list_workloads() == []


def test_missing_namespace_is_not_found(small):
    with pytest.raises(NotFound, match='namespaces "ghost" not found'):
        small.create_workload(job("x", namespace="ghost"))
    small.ensure_namespace("ghost", labels={"team": "ghost"})
    assert small.create_workload(job("x", namespace="ghost"))["metadata"]["namespace"] == "ghost"


def test_ensure_namespace_is_idempotent(small):
    first = small.ensure_namespace("team-b", {"a": "1"})
    again = small.ensure_namespace("team-b", {"a": "1"})
    assert first["metadata"]["uid"] == again["metadata"]["uid"]
    assert first["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
    assert again["metadata"]["labels"]["kubernetes.io/metadata.name"] == "team-b"
    with pytest.raises(Invalid):
        small.ensure_namespace("Team_B")


def test_listing_filters_by_managed_by_label(small):
    small.create_workload(job("ours"))
    foreign = job("theirs")
    foreign["metadata"]["labels"] = {"app": "other"}
    foreign["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    small.create_workload(foreign)
    # create_workload marks what it creates as the portal's, like the real backend does.
    assert {j["metadata"]["name"] for j in small.list_workloads()} == {"ours", "theirs"}
    assert len(small.list_pods("team-a", label_selector="portal-job=ours")) == 1
    assert len(small.list_pods("team-a", label_selector="!portal-job")) == 1
    assert len(small.list_pods(label_selector=None)) == 2


# ---------------------------------------------------------------------------------------------------------------
# Lifecycle on the injected clock
# ---------------------------------------------------------------------------------------------------------------


def test_lifecycle_follows_the_clock(small, clock):
    small.create_workload(job("timed", annotations={DURATION_ANNOTATION: "60"}))
    pod = pod_of(small, "timed")
    name = pod["metadata"]["name"]
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    with pytest.raises(Exception, match="waiting to start"):
        small.pod_logs("team-a", name)

    clock.advance(5)
    pod = pod_of(small, "timed")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    assert pod["status"]["podIP"].startswith("10.244.")
    reasons = [e["reason"] for e in small.pod_events("team-a", name)]
    assert reasons == ["Scheduled", "Pulling", "Pulled", "Created", "Started"]
    assert workload(small, "timed")["status"]["active"] == 1
    assert "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-" in small.pod_logs("team-a", name)

    clock.advance(30)
    assert pod_of(small, "timed")["status"]["phase"] == "Running"
    clock.advance(30)
    pod = pod_of(small, "timed")
    assert pod["status"]["phase"] == "Succeeded"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0 and terminated["reason"] == "Completed"
    status = workload(small, "timed")["status"]
    assert status["succeeded"] == 1 and "active" not in status
    assert status["completionTime"] == terminated["finishedAt"]
    assert [c["type"] for c in status["conditions"]] == ["Complete"]
    logs = small.pod_logs("team-a", name, tail_lines=2).splitlines()
    assert len(logs) == 2 and "finished" in logs[-1]

    # A finished pod no longer holds its GPU.
    small.create_workload(job("after", gpus=8))
    small.create_workload(job("after-2", gpus=8))
    assert pod_of(small, "after-2")["spec"].get("nodeName")


def test_freed_gpus_are_handed_over_when_they_free_up_not_when_someone_looks(small, clock):
    small.create_workload(job("first", gpus=8, annotations={DURATION_ANNOTATION: "60"}))
    small.create_workload(job("second", gpus=8))
    small.create_workload(job("next", gpus=8))
    clock.advance(500)  # nobody calls in between
    pod = pod_of(small, "next")
    assert pod["status"]["phase"] == "Running"
    finished = pod_of(small, "first")["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"]
    assert finished == pod["status"]["startTime"], "bound the moment the first job's pod ended"
    scheduled = next(e for e in small.pod_events("team-a", pod["metadata"]["name"]) if e["reason"] == "Scheduled")
    assert scheduled["firstTimestamp"] == finished


def test_runs_until_deleted_without_a_duration(small, clock):
    small.create_workload(job("forever"))
    clock.advance(10_000)
    assert pod_of(small, "forever")["status"]["phase"] == "Running"


def test_sleep_command_sets_the_duration(small, clock):
    manifest = job("sleeper")
    manifest["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "-c", "nvidia-smi -L; sleep 30"]
    small.create_workload(manifest)
    clock.advance(40)
    assert pod_of(small, "sleeper")["status"]["phase"] == "Succeeded"


def test_active_deadline_fails_the_job_and_frees_the_gpus(small, clock):
    small.create_workload(job("slow", gpus=8, deadline=100))
    small.create_workload(job("slow-2", gpus=8))
    small.create_workload(job("queued", gpus=8))
    assert not pod_of(small, "queued")["spec"].get("nodeName")
    clock.advance(101)
    status = workload(small, "slow")["status"]
    (condition,) = status["conditions"]
    assert condition["type"] == "Failed" and condition["reason"] == "DeadlineExceeded"
    assert status["failed"] == 1 and "active" not in status
    assert not [p for p in small.list_pods("team-a") if p["metadata"]["labels"]["job-name"] == "slow"]
    assert pod_of(small, "queued")["spec"].get("nodeName"), "the freed GPUs went to the waiting job"


def test_failing_container_retries_up_to_the_backoff_limit(small, clock):
    small.create_workload(
        job("crash", backoff_limit=1, annotations={DURATION_ANNOTATION: "5", EXIT_CODE_ANNOTATION: "3"})
    )
    clock.advance(10)
    pods = [p for p in small.list_pods("team-a") if p["metadata"]["labels"]["job-name"] == "crash"]
    assert [p["status"]["phase"] for p in pods] == ["Failed"]
    assert pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    clock.advance(19)  # failed at +9 s; the replacement comes after a 10 s back-off and fails 9 s later
    pods = [p for p in small.list_pods("team-a") if p["metadata"]["labels"]["job-name"] == "crash"]
    assert sorted(p["status"]["phase"] for p in pods) == ["Failed", "Failed"]
    status = workload(small, "crash")["status"]
    assert status["failed"] == 2
    assert status["conditions"][-1]["reason"] == "BackoffLimitExceeded"


def test_image_that_does_not_exist_cannot_be_pulled(small, clock):
    small.create_workload(job("typo", image="registry.example.com/team/doesnotexist:1.0"))
    clock.advance(4)
    pod = pod_of(small, "typo")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["containerStatuses"][0]["state"]["waiting"]["reason"] == "ErrImagePull"
    clock.advance(15)
    pod = pod_of(small, "typo")
    waiting = pod["status"]["containerStatuses"][0]["state"]["waiting"]
    assert waiting["reason"] == "ImagePullBackOff"
    assert waiting["message"] == 'Back-off pulling image "registry.example.com/team/doesnotexist:1.0"'
    messages = [(e["type"], e["reason"], e["message"]) for e in small.pod_events("team-a", pod["metadata"]["name"])]
    assert ("Warning", "Failed", "Error: ErrImagePull") in messages
    assert ("Warning", "Failed", "Error: ImagePullBackOff") in messages
    assert any(
        m.startswith('Failed to pull image "registry.example.com/team/doesnotexist:1.0"') for _, _, m in messages
    )
    assert workload(small, "typo")["status"]["active"] == 1
    clock.advance(3600)
    assert pod_of(small, "typo")["status"]["phase"] == "Pending", "it never starts"


def test_pod_logs_of_unknown_pod_is_not_found(small):
    with pytest.raises(NotFound):
        small.pod_logs("team-a", "ghost-abcde")
    assert small.pod_events("team-a", "ghost-abcde") == []


def test_not_ready_node_evicts_after_the_toleration(small, clock):
    small.create_workload(job("evictee", gpus=8, node_selector={"kubernetes.io/hostname": "gpu-a"}))
    clock.advance(5)
    small.set_node_ready("gpu-a", False)
    clock.advance(299)
    assert pod_of(small, "evictee")["spec"]["nodeName"] == "gpu-a"
    clock.advance(2)
    pod = pod_of(small, "evictee")  # the Job's replacement
    assert "nodeName" not in pod["spec"]
    assert "{node.kubernetes.io/not-ready: }" in scheduled_condition(pod)["message"]
    small.set_node_ready("gpu-a", True)
    assert pod_of(small, "evictee")["spec"]["nodeName"] == "gpu-a"


def test_pod_tolerating_not_ready_forever_stays(small, clock):
    manifest = job("stubborn", node_selector={"kubernetes.io/hostname": "gpu-b"})
    manifest["spec"]["template"]["spec"]["tolerations"].append(
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"}
    )
    small.create_workload(manifest)
    small.set_node_ready("gpu-b", False)
    clock.advance(10_000)
    assert pod_of(small, "stubborn")["status"]["phase"] == "Running"


# ---------------------------------------------------------------------------------------------------------------
# Node labels, watch, MIG Manager, device plugin config, ConfigMaps
# ---------------------------------------------------------------------------------------------------------------


def test_patch_labels_and_watch(small):
    nodes, rv = small.list_nodes()
    patched = small.patch_node_labels("gpu-a", {"gpu-portal.io/team": "vision"})
    assert patched["metadata"]["labels"]["gpu-portal.io/team"] == "vision"
    assert int(patched["metadata"]["resourceVersion"]) > int(rv)
    events = list(small.watch_nodes(rv, timeout_seconds=1))
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("MODIFIED", "gpu-a")]
    removed = small.patch_node_labels("gpu-a", {"gpu-portal.io/team": None})
    assert "gpu-portal.io/team" not in removed["metadata"]["labels"]
    _, rv2 = small.list_nodes()
    assert list(small.watch_nodes(rv2, timeout_seconds=0)) == []
    same = small.patch_node_labels("gpu-a", {"gpu-portal.io/team": None})
    assert same["metadata"]["resourceVersion"] == removed["metadata"]["resourceVersion"], "no-op patch keeps RV"
    with pytest.raises(Invalid):
        small.patch_node_labels("gpu-a", {"bad key!": "x"})
    with pytest.raises(NotFound):
        small.patch_node_labels("nope", {"a": "b"})
    small.remove_node("cpu-a")
    events = list(small.watch_nodes(rv2, timeout_seconds=0))
    assert [(e.type, e.object["metadata"]["name"]) for e in events] == [("DELETED", "cpu-a")]
    assert {e.type for e in small.watch_nodes(None, timeout_seconds=0)} == {"ADDED"}


def test_add_node_from_scenario_spec_and_from_node_object(small):
    added = small.add_node(h100_node("gpu-c", count=4))
    assert gpu_resources(added) == {"nvidia.com/gpu": "4"}
    with pytest.raises(Conflict):
        small.add_node(h100_node("gpu-c"))
    clone = small.get_node("gpu-a")
    clone["metadata"]["name"] = "gpu-clone"
    copied = small.add_node(clone)
    assert copied["metadata"]["uid"] != clone["metadata"]["uid"]
    assert gpu_resources(copied) == {"nvidia.com/gpu": "8"}
    small.create_workload(job("on-clone", node_selector={"kubernetes.io/hostname": "gpu-a"}))
    assert pod_of(small, "on-clone")["spec"]["nodeName"] == "gpu-a"


def test_mig_manager_applies_a_new_config(demo, clock):
    node = demo.patch_node_labels("gpu-h100-01", {"nvidia.com/mig.config": "all-1g.10gb"})
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/mig.config.state"] == "pending"
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    clock.advance(31)
    node = demo.get_node("gpu-h100-01")
    labels = node["metadata"]["labels"]
    assert labels["nvidia.com/mig.config.state"] == "success"
    assert labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb"
    assert labels["nvidia.com/gpu.count"] == "56" and labels["nvidia.com/gpu.memory"] == "9984"
    assert gpu_resources(node, "allocatable") == {"nvidia.com/gpu": "56"}


def test_mig_manager_fails_unknown_configs_and_busy_gpus(demo, clock):
    demo.patch_node_labels("gpu-h100-01", {"nvidia.com/mig.config": "all-9g.99gb"})
    demo.create_workload(job("busy", node_selector={"kubernetes.io/hostname": "gpu-h100-02"}))
    demo.patch_node_labels("gpu-h100-02", {"nvidia.com/mig.config": "all-balanced"})
    clock.advance(31)
    for name in ("gpu-h100-01", "gpu-h100-02"):
        node = demo.get_node(name)
        assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "failed", name
        assert gpu_resources(node, "allocatable") == {"nvidia.com/gpu": "8"}, "the old layout stays"


def test_custom_mig_parted_config_from_a_config_map(demo, clock):
    config = """
version: v1
mig-configs:
  half-3g:
    - devices: [0, 1, 2, 3]
      mig-enabled: false
    - device-filter: ["0x20B210DE"]
      devices: [4, 5, 6, 7]
      mig-enabled: true
      mig-devices:
        "3g.40gb": 2
"""
    demo.apply_config_map("gpu-operator", "custom-mig-parted-config", {"config.yaml": config})
    demo.patch_node_labels("gpu-a100-mig-01", {"nvidia.com/mig.config": "half-3g"})
    clock.advance(31)
    node = demo.get_node("gpu-a100-mig-01")
    assert node["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    # Resources the plugin stopped advertising linger at 0 in the kubelet's node status.
    assert gpu_resources(node) == {
        "nvidia.com/gpu": "4",
        "nvidia.com/mig-1g.10gb": "0",
        "nvidia.com/mig-2g.20gb": "0",
        "nvidia.com/mig-3g.40gb": "8",
    }


def test_device_plugin_config_label_switches_time_slicing(demo):
    sharing = """
version: v1
flags:
  migStrategy: single
sharing:
  timeSlicing:
    renameByDefault: true
    resources:
    - name: nvidia.com/gpu
      replicas: 2
"""
    cm = demo.apply_config_map(
        "gpu-operator",
        "time-slicing-config",
        {
            "h100-ts2": sharing,
            "nvidia-a10": demo.get_config_map("gpu-operator", "time-slicing-config")["data"]["nvidia-a10"],
        },
    )
    again = demo.apply_config_map("gpu-operator", "time-slicing-config", cm["data"])
    assert again["metadata"]["resourceVersion"] == cm["metadata"]["resourceVersion"], "unchanged data: no write"
    node = demo.patch_node_labels("gpu-h100-03", {"nvidia.com/device-plugin.config": "h100-ts2"})
    assert gpu_resources(node) == {"nvidia.com/gpu": "0", "nvidia.com/gpu.shared": "16"}
    assert node["metadata"]["labels"]["nvidia.com/gpu.replicas"] == "2"
    assert node["metadata"]["labels"]["nvidia.com/gpu.sharing-strategy"] == "time-slicing"
    assert gpu_resources(demo.get_node("gpu-a10-01")) == {"nvidia.com/gpu": "16"}, "other nodes keep theirs"
    node = demo.patch_node_labels("gpu-h100-03", {"nvidia.com/device-plugin.config": None})
    assert gpu_resources(node) == {"nvidia.com/gpu": "8", "nvidia.com/gpu.shared": "0"}


def test_config_maps(small):
    with pytest.raises(NotFound):
        small.get_config_map("team-a", "settings")
    created = small.apply_config_map("team-a", "settings", {"a": "1"}, labels={"x": "y"})
    assert created["metadata"]["labels"] == {MANAGED_BY_LABEL: "gpu-portal", "x": "y"}
    replaced = small.apply_config_map("team-a", "settings", {"b": "2"})
    assert replaced["data"] == {"b": "2"}
    assert int(replaced["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert small.get_config_map("team-a", "settings")["data"] == {"b": "2"}
    with pytest.raises(NotFound):
        small.apply_config_map("ghost", "settings", {})


# ---------------------------------------------------------------------------------------------------------------
# Persistence and concurrency
# ---------------------------------------------------------------------------------------------------------------


def test_state_survives_a_new_instance(tmp_path, clock):
    path = tmp_path / "sim" / "state.json"
    first = SimulatedCluster(path, scenario=SMALL, clock=clock)
    first.create_workload(job("kept"))
    first.patch_node_labels("gpu-b", {"team": "vision"})
    _, rv = first.list_nodes()
    assert path.exists()

    second = SimulatedCluster(path, scenario=None, clock=clock)
    assert pod_of(second, "kept")["spec"]["nodeName"]
    assert second.get_node("gpu-b")["metadata"]["labels"]["team"] == "vision"
    _, rv2 = second.list_nodes()
    assert int(rv2) >= int(rv)
    second.create_workload(job("more"))
    assert int(second.list_nodes()[1]) > int(rv2), "resourceVersion keeps increasing across instances"
    assert {j["metadata"]["name"] for j in first.list_workloads()} == {"kept", "more"}

    second.reset()
    assert first.list_workloads() == []
    assert "team" not in first.get_node("gpu-b")["metadata"]["labels"]
    assert [n["metadata"]["name"] for n in first.list_nodes()[0]] == ["cpu-a", "gpu-a", "gpu-b"]


def _create_many(path: str, prefix: str, count: int) -> None:
    cluster = SimulatedCluster(path, scenario=SMALL)
    for i in range(count):
        cluster.create_workload(job(f"{prefix}-{i}", gpus=1 + i % 3))


def test_two_processes_never_overcommit(tmp_path):
    path = str(tmp_path / "shared.json")
    SimulatedCluster(path, scenario=SMALL)
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_create_many, args=(path, prefix, 12)) for prefix in ("p", "q")]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    cluster = SimulatedCluster(path)
    pods = cluster.list_pods("team-a")
    assert len(pods) == 24 and len(cluster.list_workloads("team-a")) == 24
    used: dict[str, int] = {}
    for pod in pods:
        if pod["spec"].get("nodeName"):
            node = pod["spec"]["nodeName"]
            used[node] = used.get(node, 0) + int(pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
    assert set(used) == {"gpu-a", "gpu-b"}
    assert all(count <= 8 for count in used.values()), used
    assert sum(used.values()) >= 14, "the cluster is nearly full, not left idle"


# ---------------------------------------------------------------------------------------------------------------
# Notebook objects: claims, Services, kernels
# ---------------------------------------------------------------------------------------------------------------


def _claim(name: str = "home", namespace: str = "team-a") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "20Gi"}}},
    }


def _with_volume(manifest: dict, claim: str = "home", load: str | None = None) -> dict:
    pod = manifest["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "home", "persistentVolumeClaim": {"claimName": claim}}]
    pod["containers"][0]["command"] = ["start-notebook.py"]
    if load:
        pod["containers"][0]["env"] = [{"name": "SIM_GPU_LOAD", "value": load}]
    return manifest


def test_a_pod_waits_for_its_claim_and_runs_once_it_is_bound(demo, clock):
    demo.create_workload(_with_volume(job("nb", gpus=1)))
    clock.advance(5)
    pod = pod_of(demo, "nb")
    assert pod["status"]["phase"] == "Pending"
    assert 'persistentvolumeclaim "home" not found' in scheduled_condition(pod)["message"]
    claim = demo.ensure_pvc(_claim())
    assert claim["status"]["phase"] == "Bound" and claim["spec"]["volumeName"].startswith("pvc-")
    demo.create_workload(job("nudge", gpus=1))  # any change lets the scheduler retry
    clock.advance(10)
    assert pod_of(demo, "nb")["spec"].get("nodeName")


def test_claims_and_services_are_idempotent_validated_and_survive_a_restart(tmp_path, clock):
    cluster = SimulatedCluster(tmp_path / "state.json", scenario=DEMO, clock=clock)
    cluster.ensure_namespace("team-a")
    uid = cluster.ensure_pvc(_claim())["metadata"]["uid"]
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nb-1", "namespace": "team-a"},
               "spec": {"selector": {"app": "nb"}, "ports": [{"port": 80, "targetPort": 8888}]}}  # fmt: skip
    ip = cluster.ensure_service(service)["spec"]["clusterIP"]
    again = SimulatedCluster(tmp_path / "state.json", clock=clock)
    assert again.get_pvc("team-a", "home")["metadata"]["uid"] == uid
    assert again.ensure_service(service)["spec"]["clusterIP"] == ip
    with pytest.raises(Invalid, match="spec.ports"):
        again.ensure_service({**service, "metadata": {"name": "nb-2", "namespace": "team-a"}, "spec": {}})
    with pytest.raises(Invalid, match="storage"):
        again.ensure_pvc({**_claim("other"), "spec": {}})
    with pytest.raises(NotFound):
        again.ensure_pvc(_claim(namespace="nowhere"))
    assert again.delete_pvc("team-a", "home") is True and again.delete_pvc("team-a", "home") is False


@pytest.mark.parametrize(("load", "state"), [("idle", "idle"), ("train", "busy"), ("bursty", "busy")])
def test_kernels_follow_the_load_model(demo, clock, load, state):
    demo.ensure_pvc(_claim())
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "nb", "namespace": "team-a"},
               "spec": {"selector": {"app": "nb"}, "ports": [{"port": 80, "targetPort": 8888}]}}  # fmt: skip
    demo.ensure_service(service)
    demo.create_workload(_with_volume(job("nb", gpus=1), load=load))
    assert demo.notebook_kernels("team-a", "nb", "nope") is None
    clock.advance(30)
    pod = pod_of(demo, "nb")
    [kernel] = demo.notebook_kernels("team-a", "nb", pod["metadata"]["name"])
    assert kernel["execution_state"] == state
    if load == "bursty":
        clock.advance(20 * 60)  # past the bursts: idle since the end of the last one
        [kernel] = demo.notebook_kernels("team-a", "nb", pod["metadata"]["name"])
        assert kernel["execution_state"] == "idle" and kernel["last_activity"]
