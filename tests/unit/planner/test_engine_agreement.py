"""The planner's replay places as bench/replay.py does: a slice of the Alibaba trace's whole-GPU tasks on one GPU
model, arriving one a cycle and never leaving, ends with the same allocation and every node in the same state
through jobs.scheduling.decide (the planner) as through bench/replay.py's placement loop, once both use the same
engine configuration (the class index's workload and tie-break). And the kept engines mirror a fresh build."""

from __future__ import annotations

from dataclasses import replace

from bench.planner import agreement
from jobs.scheduling.engines import ClassIndex, Engines
from jobs.scheduling.snapshot import ClassView, JobView
from vocab.names import GPU_RESOURCE

from .engine_cases import H100, node


def test_the_trace_slice_is_placed_as_bench_replay_places_it():
    found = agreement("V100M32", seed=2, nodes_limit=12)
    assert found["nodes"] == 12 and found["tasks"] > 40
    assert found["allocated_gpus_planner"] == found["allocated_gpus_replay"] > 0
    assert found["placed_planner"] == found["placed_replay"] < found["tasks"]  # some did not fit: the slice is full
    assert found["differing_nodes"] == []


def job(job_id: int, count: int, cpu_m: int = 1000) -> JobView:
    return JobView(job_id, 1, 1, count, cpu_m, 1024, 0, False, 0.0)


def test_release_is_the_mirror_of_take():
    cls = ClassView(1, GPU_RESOURCE, H100, 1.0, "H100")
    nodes = [node(f"h{i}", H100, {GPU_RESOURCE: 8}) for i in range(4)]
    engines = Engines(nodes, {1: cls}, {1: [job(1, 2), job(2, 8)]})
    idx = engines.index(1)
    placed = []
    for j in (job(3, 2), job(4, 8), job(5, 1), job(6, 4)):
        target = idx.place(j)
        engines.take(idx, target, j)
        placed.append((target, j))
    for target, j in placed[1::2]:  # two of them leave again
        engines.release(j, [target.name])
    # A fresh index over the same nodes is in the same state as the kept one.
    fresh = ClassIndex(cls, [replace(n, free=dict(n.free)) for n in engines.nodes.values()], [job(1, 2), job(2, 8)])
    assert sorted(sig for sig, _ in idx.placer.states()) == sorted(sig for sig, _ in fresh.placer.states())
    assert (idx.total_free, idx.most_free()) == (fresh.total_free, fresh.most_free()) == (32 - 3, 8)
    assert sum(n.cpu_free_m for n in engines.nodes.values()) == 4 * 64_000 - 2000


def test_stopping_once_every_class_starves_changes_no_decision():
    from jobs.scheduling.decide import decide
    from jobs.scheduling.snapshot import QuotaView, Snapshot

    cls = ClassView(1, GPU_RESOURCE, H100, 1.0, "H100")
    nodes = {f"h{i}": node(f"h{i}", H100, {GPU_RESOURCE: 8}) for i in range(2)}
    for view in nodes.values():
        view.free[GPU_RESOURCE] = 3  # 5 of 8 taken on each node
    # An 8-GPU job that has waited past patience starves the class; the small ones after it only wait.
    queued = [JobView(1, 1, 1, 8, 0, 0, 0, False, 0.0)] + [
        JobView(i, 1, 1, 1, 0, 0, 0, False, 100.0 + i) for i in range(2, 9)
    ]
    snap = Snapshot(
        now=5000.0, nodes=nodes, classes={1: cls}, quotas={(1, 1): QuotaView(64, 64)}, queued=queued, active=[]
    )
    full, short = decide(snap), decide(snap, until_all_starve=True)
    assert full.starving == short.starving == {1: 1}
    assert (full.admit, full.preempt, full.reserved) == (short.admit, short.preempt, short.reserved) == ({}, {}, {})
    assert set(short.wait) == {1} and set(full.wait) == set(range(1, 9))
    assert all("has waited longest" in full.wait[i].message for i in range(2, 9))
