"""The capacity planner's replay at scale (issue 15): a seeded synthetic month — 30 days, 50,000 jobs from 12
teams on 500 nodes of mixed products (whole A100s and H100s, A100s carved into MIG 3g.40gb and 1g.10gb, A10s
time-sliced ×4, H100 gangs of 2–8 nodes within a zone) — replayed by planner.engine as the baseline and as a few
proposals. Prints the wall and CPU seconds of each replay and its figures, then the fidelity check (the
history's "observed" starts are a first replay's, so the check measures the replay's own determinism: ~0).

Then the agreement with bench/replay.py: the trace's whole-GPU tasks of one GPU model, arriving one a cycle
and never leaving, placed by the planner's replay (jobs.scheduling.decide each cycle) and by bench/replay.py's
placement loop with the same engine configuration (workload, tie-break): the allocation after each task and
every node's final state must be the same.

    .venv/bin/python -m bench.planner                       # the month, 4 scenarios, and the agreement
    .venv/bin/python -m bench.planner --jobs 5000 --nodes 100 --days 7 --no-agreement
    .venv/bin/python -m bench.planner --profile             # cProfile of the baseline replay
"""

from __future__ import annotations

import argparse
import cProfile
import math
import pstats
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.replay import TRACES, load_nodes, load_tasks, trace_path  # noqa: E402
from bench.replay import replay as trace_replay  # noqa: E402
from jobs.scheduling import placement  # noqa: E402
from jobs.scheduling.snapshot import ClassView, NodeView, QuotaView  # noqa: E402
from planner import engine, engine_metrics, engine_replay, model  # noqa: E402
from vocab.names import GPU_RESOURCE, ZONE_LABEL, mig_resource_name  # noqa: E402

A100, H100, A10 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-A10"
MIG_3G, MIG_1G = mig_resource_name("3g.40gb"), mig_resource_name("1g.10gb")

#: (class id, resource, product label, share of a GPU, name, job sizes (units: weight))
CLASSES = [
    (1, GPU_RESOURCE, A100, 1.0, "A100 SXM4 80GB", {1: 4, 2: 3, 4: 2, 8: 1}),
    (2, MIG_3G, A100, 3 / 7, "A100 SXM4 80GB · MIG 3g.40gb", {1: 6, 2: 3, 4: 1}),
    (3, MIG_1G, A100, 1 / 7, "A100 SXM4 80GB · MIG 1g.10gb", {1: 7, 2: 2, 4: 1}),
    (4, GPU_RESOURCE, H100, 1.0, "H100 80GB HBM3", {1: 3, 2: 2, 4: 2, 8: 3}),
    (5, GPU_RESOURCE, A10 + "-SHARED", 0.25, "A10 · 1/4 time-sliced", {1: 6, 2: 3, 4: 1}),
]
#: Share of the nodes per kind: (product, label, per-node resources, GPUs, MIG-capable)
NODE_KINDS = [
    (0.30, A100, A100, {GPU_RESOURCE: 8}, 8, True),
    (0.20, A100, A100, {MIG_3G: 16}, 8, True),
    (0.10, A100, A100, {MIG_1G: 56}, 8, True),
    (0.30, H100, H100, {GPU_RESOURCE: 8}, 8, True),
    (0.10, A10, A10 + "-SHARED", {GPU_RESOURCE: 16}, 4, False),
]
TEAMS = 12


def synthetic_cluster(nodes: int = 500) -> model.Cluster:
    views, shapes = {}, {}
    counts = [round(share * nodes) for share, *_ in NODE_KINDS]
    counts[-1] = nodes - sum(counts[:-1])
    for (_share, product, label, resources, gpus, mig_capable), count in zip(NODE_KINDS, counts, strict=True):
        kind = next(iter(resources)).rsplit("/", 1)[-1]
        for i in range(count):
            name = f"{product.removeprefix('NVIDIA-').lower()}-{kind}-{i:03d}"
            views[name] = NodeView(
                name, label, None, True, dict(resources), dict(resources), 96_000, 1_000_000, 96_000, 1_000_000,
                topology={ZONE_LABEL: f"zone-{i // 25}"},
            )  # fmt: skip
            shapes[name] = model.NodeShape(name, product, gpus, mig_capable)
    classes = {
        cid: ClassView(cid, resource, label, fraction, name) for cid, resource, label, fraction, name, _ in CLASSES
    }
    units = {cid: 0 for cid in classes}
    for view in views.values():
        for cls in classes.values():
            if view.product_label == cls.product_label:
                units[cls.id] += view.allocatable.get(cls.resource_name, 0)
    # Every team is guaranteed 1/8 of each class (the guarantees add up to 1.5 × capacity, as when not every team
    # uses every class at once) and may borrow up to a third of it.
    quotas = {}
    for team in range(1, TEAMS + 1):
        for cid in classes:
            quotas[(team, cid)] = QuotaView(units[cid] // 8, units[cid] // 3)
    return model.Cluster(views, shapes, classes, quotas, {t: f"team-{t:02d}" for t in range(1, TEAMS + 1)})


def synthetic_history(
    cluster: model.Cluster,
    seed: int = 0,
    days: float = 30,
    jobs: int = 50_000,
    load: float = 0.7,
    gangs: float = 0.02,
    start: float = 1_767_225_600.0,
) -> model.History:
    """Jobs with a daily rhythm (twice as many by day as by night), log-normal run times scaled so that each
    class's demand is ``load`` of its capacity, 40% preemptible; ``gangs`` of the H100 jobs are 2–8 workers of 8
    GPUs, a third of them requiring one zone. ``started`` is None: run ``observe`` for observed starts."""
    rng = random.Random(seed)
    end = start + days * 86_400
    capacity = {cid: 0.0 for cid in cluster.classes}
    for view in cluster.nodes.values():
        for cls in cluster.classes.values():
            if view.product_label == cls.product_label:
                capacity[cls.id] += view.allocatable.get(cls.resource_name, 0)
    weights = [capacity[cid] * fraction for cid, _, _, fraction, _, _ in CLASSES]
    raw = []
    for i in range(jobs):
        while True:  # a daily rhythm by rejection: busiest at 14:00, half as busy at 02:00
            t = rng.uniform(start, end)
            if rng.random() < 0.75 + 0.25 * math.cos(2 * math.pi * ((t - start) / 86_400 - 14 / 24)):
                break
        cid, _, _, _, _, sizes = rng.choices(CLASSES, weights=weights)[0]
        count = rng.choices(list(sizes), weights=list(sizes.values()))[0]
        workers, key, mode = 1, "", ""
        if cid == 4 and rng.random() < gangs:
            workers, count = rng.randint(2, 8), 8
            mode = rng.choice(["", "prefer", "require"])
            key = ZONE_LABEL if mode else ""
        run = min(72 * 3600, rng.lognormvariate(math.log(3 * 3600), 1.0))
        raw.append([i + 1, rng.randint(1, TEAMS), cid, count, t, run, workers, rng.random() < 0.4, key, mode])
    # Scale run times per class so its demand is ``load`` of its capacity over the window.
    demand = {cid: 0.0 for cid in capacity}
    for _, _, cid, count, _, run, workers, *_ in raw:
        demand[cid] += count * workers * run
    scale = {cid: load * capacity[cid] * (end - start) / demand[cid] if demand[cid] else 1.0 for cid in capacity}
    # CPU and memory in proportion to the share of a GPU (a node's 96 cores and ~1 TB over its 8 GPUs), so a node
    # runs out of GPUs before it runs out of CPU.
    share = {cid: fraction for cid, _, _, fraction, _, _ in CLASSES}
    out = []
    for job_id, team, cid, count, t, run, workers, preemptible, key, mode in raw:
        run_s = max(60.0, run * scale[cid])
        out.append(
            model.PastJob(
                id=job_id,
                team=team,
                class_id=cid,
                count=count,
                submitted=t,
                run_s=run_s,
                workers=workers,
                cpu_m=int(12_000 * count * share[cid]),
                memory_mb=int(120_000 * count * share[cid]),
                preemptible=preemptible,
                kind="distributed" if workers > 1 else "batch",
                max_runtime_s=int(run_s) + 3600,
                topology_key=key,
                topology_mode=mode,
            )  # fmt: skip
        )
    out.sort(key=lambda j: (j.submitted, j.id))
    return model.History(start, end, out)


def observe(history: model.History, cluster: model.Cluster, options: engine.Options) -> model.History:
    """The history with ``started`` filled in by one replay (the demo's stand-in for what was observed)."""
    run = engine.replay(history, cluster, options)
    starts = {job_id: rec.first_start for job_id, rec in run.records.items()}
    jobs = [model.PastJob(**{**job.__dict__, "started": starts.get(job.id)}) for job in history.jobs]
    return model.History(history.start, history.end, jobs)


def proposals(cluster: model.Cluster) -> list[model.Proposal]:
    h100 = sorted(n for n, s in cluster.shapes.items() if s.product == H100)
    a10 = sorted(n for n, s in cluster.shapes.items() if s.product == A10)
    mig_3g = sorted(n for n, v in cluster.nodes.items() if MIG_3G in v.allocatable)
    return [
        model.Proposal("20 more H100 nodes", [model.AddNodes(h100[0], 20)]),
        model.Proposal("A10s time-sliced ×2", [model.TimeSlicingChange(tuple(a10), 2)]),
        model.Proposal(
            "half the 3g.40gb A100s as 4×1g.10gb + 1×3g.40gb",
            [model.MigChange(tuple(mig_3g[: len(mig_3g) // 2]), per_gpu=({"1g.10gb": 4, "3g.40gb": 1},))],
        ),
    ]


def _print_scenario(scenario: dict, seconds: tuple[float, float] | None = None) -> None:
    t = scenario["totals"]
    timing = f"{seconds[0]:6.1f} s wall {seconds[1]:6.1f} s CPU  " if seconds is not None else ""
    print(
        f"  {timing}{scenario['name'][:48]:48} ran {t['ran']:>6}/{t['jobs']:<6} never {t['never_ran']:>5}  "
        f"wait p50 {t['wait_p50_s'] / 60:6.1f} min  p95 {t['wait_p95_s'] / 60:7.1f} min  "
        f"alloc {100 * t['allocation_mean']:5.1f}%  capacity {t['capacity_gpus']:7.1f} GPUs  "
        f"stranded {t['stranded_gpu_hours']:9.1f} GPU-h"
    )


def month(args) -> None:
    cluster = synthetic_cluster(args.nodes)
    started = time.perf_counter()
    history = synthetic_history(cluster, args.seed, args.days, args.jobs, load=args.load)
    options = engine.Options(cycle_s=10.0)
    print(f"synthetic history: {len(history.jobs):,} jobs over {args.days:g} days on {len(cluster.nodes)} nodes "
          f"(seed {args.seed}, load {args.load:g}), built in {time.perf_counter() - started:.1f} s")  # fmt: skip
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        engine.replay(history, cluster, options)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(35)
        return
    t, cpu = time.perf_counter(), time.process_time()
    history = observe(history, cluster, options)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    print(f"observed starts from a first replay: {wall:.1f} s wall, {cpu:.1f} s CPU")
    print("replays (wall and CPU seconds of each, marked by run_plan's progress):")
    marks: dict[str, tuple[float, float]] = {}
    last: dict = {"name": None}

    def progress(fraction: float, message: str) -> None:
        name = message.split(" (")[0].removeprefix("Replaying ") if message.startswith("Replaying ") else None
        if name != last["name"]:
            now = (time.perf_counter(), time.process_time())
            if last["name"] is not None:
                marks[last["name"]] = (now[0] - last["t"][0], now[1] - last["t"][1])
            last["name"], last["t"] = name, now

    t, cpu = time.perf_counter(), time.process_time()
    result = engine.run_plan(history, cluster, proposals(cluster), options, progress=progress)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    for scenario in result["scenarios"]:
        _print_scenario(scenario, marks.get(scenario["name"]))
    print(f"run_plan: {len(result['scenarios'])} scenarios in {wall:.1f} s wall, {cpu:.1f} s CPU")
    print("fidelity:", result["fidelity"]["sentence"])
    if args.every_class:
        t, cpu = time.perf_counter(), time.process_time()
        run = engine_replay.Replay(cluster, history, engine_replay.Settings(every_class=True))
        run.run()
        wall, cpu = time.perf_counter() - t, time.process_time() - cpu
        print("the baseline asking every class every cycle (not only those something happened to):")
        _print_scenario(engine_metrics.scenario(run, "baseline, every class", "baseline", [], 3600), (wall, cpu))


# -- the agreement with bench/replay.py --------------------------------------------------------------------------


def agreement(model_name: str = "V100M32", seed: int = 0, nodes_limit: int | None = None, until: float = 1.3) -> dict:
    """The trace's whole-GPU tasks that may run on ``model_name`` placed on that model's nodes, drawn as
    bench/replay.py draws them (seeded, with replacement, until the GPUs asked for reach ``until`` × capacity),
    by bench/replay.py's loop and by the planner's replay (one task a cycle, never leaving, so every cycle
    admits the new task or explains why not). Returns both allocations and the nodes whose final state differs.

    The engine configuration is made the same on both sides: bench/replay.py is given the workload the planner's
    class index measures fragmentation against (the window's tasks plus one of each power-of-two size), the
    index's tie-break (busy nodes before idle ones, then the name), and the nodes of each state in name order
    before every placement, as the replay's kept engines have them at the start of every cycle."""
    nodes = [n for n in load_nodes(trace_path("openb_node_list_gpu_node", TRACES)) if n.model == model_name]
    nodes = nodes[:nodes_limit] if nodes_limit else nodes
    tasks = [
        placement.Demand(t.gpus, placement.WHOLE, t.cpu_m, t.memory_mb)
        for t in load_tasks(trace_path("openb_pod_list_default", TRACES))
        if t.gpus >= 1 and t.milli == placement.WHOLE and (not t.models or model_name in t.models)
    ]
    capacity = sum(len(n.gpu_free) for n in nodes) * placement.WHOLE
    rng, arrived, drawn = random.Random(seed), 0, []  # bench/replay.replay's draws
    while arrived < until * capacity:
        task = tasks[rng.randrange(len(tasks))]
        drawn.append(task)
        arrived += task.gpu_milli
    views = {
        n.name: NodeView(
            n.name,
            model_name,
            None,
            True,
            {GPU_RESOURCE: len(n.gpu_free)},
            {GPU_RESOURCE: len(n.gpu_free)},
            n.cpu_free_m,
            n.memory_free_mb,
            n.cpu_free_m,
            n.memory_free_mb,
        )  # fmt: skip
        for n in nodes
    }
    # One class over the nodes; one team with room for everything; patience longer than the window (a task that
    # does not fit is dropped by bench/replay.py, and here waits without holding anything back).
    huge = 10 * capacity
    cluster = model.Cluster(
        views, {}, {1: ClassView(1, GPU_RESOURCE, model_name, 1.0, model_name)}, {(1, 1): QuotaView(huge, huge)},
        {1: "trace"}, patience=1e15,
    )  # fmt: skip
    jobs = [
        model.PastJob(i + 1, 1, 1, d.gpus, 10.0 * i, 1e12, cpu_m=d.cpu_m, memory_mb=d.memory_mb)
        for i, d in enumerate(drawn)
    ]
    run = engine.replay(model.History(0.0, 10.0 * len(jobs), jobs), cluster, engine.Options(cycle_s=10.0))
    workload = run.engines.index(1).placer.workload

    def busy_then_name(node: placement.Node) -> tuple:
        return (all(free == placement.WHOLE for free in node.gpu_free), node.name)

    theirs = trace_replay(nodes, tasks, seed, until=until, workload=workload, rank=busy_then_name, renew=True)
    ours = {name: view.free[GPU_RESOURCE] for name, view in run.nodes.items()}
    their_nodes = {n.name: sum(1 for f in n.gpu_free if f == placement.WHOLE) for n in theirs.placer.nodes.values()}
    return {
        "model": model_name,
        "nodes": len(nodes),
        "tasks": len(drawn),
        "allocated_gpus_planner": sum(len(n.gpu_free) - ours[n.name] for n in nodes),
        "allocated_gpus_replay": theirs.allocated // placement.WHOLE,
        "placed_planner": sum(1 for r in run.records.values() if r.first_start is not None),
        "placed_replay": theirs.arrived - theirs.failed,
        "differing_nodes": sorted(n for n in ours if ours[n] != their_nodes[n]),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--days", type=float, default=30)
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--load", type=float, default=0.7, help="each class's demand as a share of its capacity")
    parser.add_argument("--profile", action="store_true", help="cProfile the baseline replay and stop")
    parser.add_argument("--no-agreement", action="store_true")
    parser.add_argument(
        "--every-class", action="store_true", help="also replay the baseline asking every class every cycle"
    )
    parser.add_argument("--agreement-only", action="store_true")
    args = parser.parse_args(argv)
    if not args.agreement_only:
        month(args)
    if not args.no_agreement and not args.profile:
        for name in ("V100M32", "T4"):
            found = agreement(name)
            print("agreement with bench/replay.py:", found)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
