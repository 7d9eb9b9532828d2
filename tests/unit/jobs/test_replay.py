"""The trace replay (bench/replay.py) on small slices of the real Alibaba trace: it runs, follows the protocol,
and its accounting adds up. No timings are asserted."""

from __future__ import annotations

import csv

import pytest

from bench.replay import TRACES, load_nodes, load_tasks, main, parse_seeds, replay, trace_path
from jobs.scheduling.placement import POLICIES, WHOLE, Demand


@pytest.fixture(scope="module")
def trace():
    nodes = load_nodes(trace_path("openb_node_list_gpu_node"))
    tasks = load_tasks(trace_path("openb_pod_list_default"))
    return nodes, tasks


def test_the_trace_loads_as_published(trace):
    nodes, tasks = trace
    assert len(nodes) == 1213 and sum(len(n.gpu_free) for n in nodes) == 6212
    assert len(tasks) == 8152
    assert {n.model for n in nodes} == {"P100", "T4", "V100M16", "V100M32", "A10", "G2", "G3"}
    assert all(t.milli == WHOLE for t in tasks if t.gpus != 1)
    spec = load_tasks(trace_path("openb_pod_list_gpuspec33"))
    assert Demand(1, WHOLE, 0, 0, frozenset({"V100M16", "V100M32"})).models in {t.models for t in spec}
    multi = load_tasks(trace_path("openb_pod_list_multigpu50"))  # a file without the gpu_spec column
    assert {t.gpus for t in multi} >= {0, 1, 2, 4, 8} and not any(t.models for t in multi)


@pytest.mark.parametrize("policy", POLICIES)
def test_replay_of_a_slice_follows_the_protocol_and_adds_up(trace, policy):
    nodes, tasks = trace
    nodes = nodes[::20]  # 61 nodes of every model
    capacity = sum(len(n.gpu_free) for n in nodes) * WHOLE
    result = replay(nodes, tasks, seed=3, policy=policy)
    assert 0 < result.at_100 <= result.at_130 <= 1
    assert result.allocated == round(result.at_130 * capacity)
    final = result.placer.nodes.values()
    assert sum(WHOLE * len(n.gpu_free) - sum(n.gpu_free) for n in final) == result.allocated
    assert all(0 <= f <= WHOLE for n in final for f in n.gpu_free)
    assert all(n.cpu_free_m >= 0 and n.memory_free_mb >= 0 for n in final)
    # The run stops once the GPU asked for reaches 130% of capacity; what did not fit is counted.
    assert result.arrived > result.failed > 0
    assert result.at_130 + result.failed_gpu >= 1.3 - 8 * WHOLE / capacity
    # Same seed, same answer.
    again = replay(nodes, tasks, seed=3, policy=policy)
    assert (again.at_100, again.at_130, again.failed) == (result.at_100, result.at_130, result.failed)


def test_the_input_nodes_are_not_changed(trace):
    nodes, tasks = trace
    nodes = nodes[:30]
    replay(nodes, tasks, seed=0)
    assert all(f == WHOLE for n in nodes for f in n.gpu_free)


def test_command_line_on_csv_files(tmp_path, capsys):
    node_csv, pod_csv = tmp_path / "nodes.csv", tmp_path / "pods.csv"
    with open(node_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        w.writerows([["a", 32000, 65536, 2, "T4"], ["b", 32000, 65536, 4, "V100M16"]])
    with open(pod_csv, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec"])
        w.writerows(
            [["p0", 1000, 1024, 1, 500, ""], ["p1", 2000, 2048, 2, 1000, "V100M16"], ["p2", 500, 512, 0, 0, ""]]
        )
    assert main(["--nodes", str(node_csv), "--trace", str(pod_csv), "--seeds", "0-1", "--policy", "portal,fgd"]) == 0
    out = capsys.readouterr().out
    assert "3 tasks; 2 nodes, 6 GPUs; seeds 0-1" in out
    assert len([line for line in out.splitlines() if line.startswith(("portal", "fgd"))]) == 6
    assert parse_seeds("0-2,5") == [0, 1, 2, 5]
    assert TRACES.name == "alibaba-gpu-v2023"
