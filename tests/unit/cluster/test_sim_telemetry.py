"""The simulated dcgm-exporter: believable series (training busy, sleeping idle, notebooks bursty), the
exporter's label set, MIG instances with GPU_I_ID, and text the real parser reads."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from cluster.sim.dcgm_exporter import BURST_SECONDS, load_kind, utilisation
from tests.sim_objects import SMALL, job, pod_of
from vocab.dcgm import parse_scrape


def scrape(cluster, node):
    return {(r.gpu_index, r.gpu_instance_id): r for r in parse_scrape(cluster.dcgm_metrics()[node])}


@pytest.fixture
def small(clock):
    return SimulatedCluster(None, scenario=SMALL, clock=clock)


def with_command(manifest, command, env=None):
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["command"] = command
    if env:
        container["env"] = env
    return manifest


def test_idle_cluster_reads_zero_at_idle_power(small):
    readings = scrape(small, "gpu-a")
    assert len(readings) == 8
    assert {r.utilisation for r in readings.values()} == {0}
    assert all(60 <= r.power_w <= 80 for r in readings.values())  # H100 idles near 70 W
    assert "cpu-a" not in small.dcgm_metrics()  # no GPU, no exporter


def test_training_pod_is_busy_after_warm_up_and_attributed(small, clock):
    small.create_workload(job("train", gpus=2))
    clock.advance(120)
    pod = pod_of(small, "train")
    node = pod["spec"]["nodeName"]
    readings = scrape(small, node)
    held = [r for r in readings.values() if r.pod == pod["metadata"]["name"]]
    assert len(held) == 2 and all(r.namespace == "team-a" and r.container == "main" for r in held)
    assert all(80 <= r.utilisation <= 100 for r in held)
    assert all(r.memory_used_mib > 0.5 * (r.memory_used_mib + r.memory_free_mib) for r in held)
    others = [r for r in readings.values() if not r.pod]
    assert len(others) == 6 and {r.utilisation for r in others} == {0}
    # Deterministic: the same moment scraped twice reads the same.
    assert scrape(small, node) == readings


def test_a_pod_that_only_sleeps_holds_its_gpu_idle(small, clock):
    small.create_workload(with_command(job("hold"), ["bash", "-c", "sleep 7200"]))
    clock.advance(600)
    pod = pod_of(small, "hold")
    held = [r for r in scrape(small, pod["spec"]["nodeName"]).values() if r.pod == pod["metadata"]["name"]]
    assert len(held) == 1 and held[0].utilisation == 0 and held[0].memory_used_mib == 0
    log = small.pod_logs("team-a", pod["metadata"]["name"])
    assert "starting" in log and "step" not in log  # it prints no training progress either


def test_load_kinds_and_the_bursty_pattern():
    assert load_kind({"command": ["sleep", "infinity"]}) == "idle"
    assert load_kind({"command": ["bash", "-c", "python train.py; sleep 60"]}) == "train"
    assert load_kind({"env": [{"name": "SIM_GPU_LOAD", "value": "Bursty"}]}) == "bursty"
    busy = [utilisation("bursty", "s", 0.0, t)[0] for t in range(0, 120, 10)]
    quiet = [utilisation("bursty", "s", 0.0, t)[0] for t in range(BURST_SECONDS, BURST_SECONDS + 1800, 10)]
    assert min(busy) >= 60 and max(quiet) < 5
    # Memory stays held after the bursts (a notebook keeps its CUDA context).
    assert utilisation("bursty", "s", 0.0, BURST_SECONDS + 60)[1] > 0.3
    assert utilisation("35", "s", 0.0, 100)[0] == pytest.approx(35, abs=1)


def test_mig_instances_report_engine_activity_with_their_instance_labels(clock):
    scenario = {
        "namespaces": ["team-a"],
        "nodes": [
            {"name": "mig-a", "gpu": {"product": "NVIDIA A100-SXM4-80GB", "count": 1}, "cpu": 64, "memory": "512Gi",
             "mig": {"strategy": "mixed", "config": "all-balanced"}},
        ],
    }  # fmt: skip
    cluster = SimulatedCluster(None, scenario=scenario, clock=clock)
    cluster.create_workload(job("slice", resource="nvidia.com/mig-3g.40gb"))
    clock.advance(300)
    pod = pod_of(cluster, "slice")
    text = cluster.dcgm_metrics()["mig-a"]
    assert 'GPU_I_PROFILE="3g.40gb"' in text and 'DCGM_FI_DEV_GPU_UTIL{gpu="0"' in text
    readings = parse_scrape(text)
    instances = [r for r in readings if r.is_mig]
    assert {r.mig_profile for r in instances} == {"1g.10gb", "2g.20gb", "3g.40gb"}
    assert len({r.gpu_instance_id for r in instances}) == len(instances)
    mine = [r for r in instances if r.pod == pod["metadata"]["name"]]
    assert len(mine) == 1 and mine[0].mig_profile == "3g.40gb" and mine[0].utilisation > 80
    assert all(r.utilisation == 0 for r in instances if r is not mine[0])
