"""Placement quality on the Alibaba GPU trace (cluster-trace-gpu-v2023, "openb"), with the protocol of
Weng et al. (USENIX ATC '23): tasks are drawn at random (seeded, with replacement) from a pod list and
placed one at a time on the 1,213 GPU nodes, never leaving, until the GPU they asked for in total reaches
130% of the cluster's GPUs. The figure is the GPU allocation ratio (GPU milli allocated / total) when the
arrived demand passes 100% and 130% of capacity. Tasks that fit nowhere are counted and dropped.

Placement is jobs.scheduling.placement, the engine the admission cycle uses.

    .venv/bin/python -m bench.replay --trace openb_pod_list_default --seeds 0-9
    .venv/bin/python -m bench.replay --trace openb_pod_list_gpuspec33 --seeds 0-9 --policy portal,fgd
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from jobs.scheduling.placement import POLICIES, POLICY_PORTAL, WHOLE, Demand, Node, Placer, Workload

SHARED = Path(os.environ.get("PORTAL_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
TRACES = SHARED / "traces" / "alibaba-gpu-v2023"
DEFAULT_NODES = "openb_node_list_gpu_node"


def trace_path(name: str, folder: Path = TRACES) -> Path:
    path = Path(name)
    if path.suffix == ".csv" and path.exists():
        return path
    return folder / f"{name}.csv"


def load_nodes(path: Path) -> list[Node]:
    with open(path, newline="") as f:
        return [
            Node(row["sn"], row["model"], [WHOLE] * int(row["gpu"]), int(row["cpu_milli"]), int(row["memory_mib"]))
            for row in csv.DictReader(f)
        ]


def load_tasks(path: Path) -> list[Demand]:
    tasks = []
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["num_gpu"])
            milli = int(row["gpu_milli"]) if gpus == 1 else WHOLE
            models = frozenset(m for m in (row.get("gpu_spec") or "").split("|") if m)
            tasks.append(Demand(gpus, milli or WHOLE, int(row["cpu_milli"]), int(row["memory_mib"]), models))
    return tasks


def workload_for(nodes: list[Node], tasks: list[Demand], policy: str) -> Workload:
    """The task-type distribution the score measures fragmentation against: the trace's own tasks (as FGD
    does), and for the portal's policy weighted by how scarce the GPU models of constrained types are."""
    if policy != POLICY_PORTAL:
        return Workload.from_demands(tasks)
    pools: dict[str, int] = {}
    for node in nodes:
        pools[node.model] = pools.get(node.model, 0) + len(node.gpu_free)
    return Workload.from_demands(tasks, pools=pools)


@dataclass
class Result:
    seed: int
    policy: str
    #: Allocated GPU milli / total when the arrived demand first reaches 100% and when it reaches 130%.
    at_100: float
    at_130: float
    arrived: int
    failed: int
    #: GPU milli of the tasks that failed, as a share of capacity.
    failed_gpu: float
    seconds: float
    states: int
    #: CPU time of this process during the replay (the host is shared: wall time includes waiting for a core)
    cpu_seconds: float = 0.0
    #: GPU milli allocated at the end, and the engine holding the final state of every node.
    allocated: int = 0
    placer: Placer | None = field(default=None, repr=False)


def replay(
    nodes: list[Node],
    tasks: list[Demand],
    seed: int,
    policy: str = POLICY_PORTAL,
    until: float = 1.3,
    workload: Workload | None = None,
    rank=None,
    renew: bool = False,
) -> Result:
    """Place tasks drawn from ``tasks`` until the GPU asked for reaches ``until`` × capacity. ``workload`` and
    ``rank`` (the tie-break between equally scored states, jobs.scheduling.placement.Placer) default to the trace's own
    task mix and the node's name; ``renew`` puts each state's nodes in name order before every placement
    (``Placer.renew_order``, as the planner's replay does before every cycle). bench/planner.py passes the
    admission cycle's configuration to compare with the planner."""
    nodes = [Node(n.name, n.model, list(n.gpu_free), n.cpu_free_m, n.memory_free_mb, n.tag) for n in nodes]
    capacity = sum(sum(n.gpu_free) for n in nodes)
    if workload is None:
        workload = workload_for(nodes, tasks, policy)
    started, cpu_started = time.perf_counter(), time.process_time()
    placer = Placer(nodes, workload, policy=policy, seed=seed, rank=rank)
    rng = random.Random(seed)
    arrived = allocated = failed = failed_gpu = count = 0
    at_100 = None
    while arrived < until * capacity:
        task = tasks[rng.randrange(len(tasks))]
        count += 1
        arrived += task.gpu_milli
        if renew:
            placer.renew_order()
        if placer.place(task) is None:
            failed += 1
            failed_gpu += task.gpu_milli
        else:
            allocated += task.gpu_milli
        if at_100 is None and arrived >= capacity:
            at_100 = allocated / capacity
    return Result(
        seed=seed,
        policy=policy,
        at_100=at_100 if at_100 is not None else allocated / capacity,
        at_130=allocated / capacity,
        arrived=count,
        failed=failed,
        failed_gpu=failed_gpu / capacity,
        seconds=time.perf_counter() - started,
        cpu_seconds=time.process_time() - cpu_started,
        states=len(placer._sigs),
        allocated=allocated,
        placer=placer,
    )


def parse_seeds(text: str) -> list[int]:
    seeds: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        seeds.extend(range(int(first), int(last or first) + 1))
    return seeds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", default="openb_pod_list_default", help="pod list name in the trace folder, or a CSV")
    parser.add_argument("--nodes", default=DEFAULT_NODES, help="node list name in the trace folder, or a CSV")
    parser.add_argument("--seeds", default="0-9", help="e.g. 0-9 or 1,3,5")
    parser.add_argument("--policy", default=POLICY_PORTAL, help=f"comma-separated: {', '.join(POLICIES)}")
    parser.add_argument("--until", type=float, default=1.3, help="stop when arrived GPU reaches this × capacity")
    args = parser.parse_args(argv)
    nodes = load_nodes(trace_path(args.nodes))
    tasks = load_tasks(trace_path(args.trace))
    gpus = sum(len(n.gpu_free) for n in nodes)
    print(f"trace {args.trace}: {len(tasks):,} tasks; {len(nodes):,} nodes, {gpus:,} GPUs; seeds {args.seeds}")
    print(
        f"{'policy':8} {'seed':>4} {'alloc@100%':>10} {'alloc@130%':>10} {'tasks':>6} {'failed':>6} {'wall s':>7} "
        f"{'cpu s':>6}"
    )
    for policy in args.policy.split(","):
        results = []
        for seed in parse_seeds(args.seeds):
            r = replay(nodes, tasks, seed, policy, args.until)
            results.append(r)
            print(
                f"{policy:8} {seed:>4} {100 * r.at_100:>9.2f}% {100 * r.at_130:>9.2f}% {r.arrived:>6} {r.failed:>6} "
                f"{r.seconds:>7.2f} {r.cpu_seconds:>6.2f}"
            )
            sys.stdout.flush()
        print(
            f"{policy:8} mean {100 * statistics.mean(r.at_100 for r in results):>9.2f}% "
            f"{100 * statistics.mean(r.at_130 for r in results):>9.2f}% "
            f"{statistics.mean(r.arrived for r in results):>6.0f} {statistics.mean(r.failed for r in results):>6.0f} "
            f"{statistics.mean(r.seconds for r in results):>7.2f} "
            f"{statistics.mean(r.cpu_seconds for r in results):>6.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
