"""What counting DRA devices costs admission: one pure ``decide`` over the same queue of MIG jobs on the same A100
nodes, once as device-plugin nodes (a fixed layout per GPU: 3g.20gb + 2g.10gb + two 1g.5gb, each profile its own
extended resource) and once as DRA nodes with dynamic MIG (every profile carved on demand from the GPUs' counters,
jobs.scheduling.dra). Side by side in one run, so the ratio holds on any machine; no database.

    .venv/bin/python bench/dra_admission.py                      # 500 nodes × 8 GPUs, 5,000 jobs
    .venv/bin/python bench/dra_admission.py --nodes 100 --jobs 1000 --repeat 5

Prints per setting the wall time of each cycle (the best of ``--repeat``), decisions per second, what was admitted,
and the DRA/device-plugin time ratio.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from jobs.scheduling.decide import decide  # noqa: E402
from jobs.scheduling.dra import DraDevices, DraGpuRow, mig_resource  # noqa: E402
from jobs.scheduling.snapshot import ClassView, JobView, NodeView, QuotaView, Snapshot  # noqa: E402
from vocab.names import mig_resource_name  # noqa: E402

A100 = "NVIDIA-A100-SXM4-40GB"
PROFILES = {"1g.5gb": 1, "2g.10gb": 2, "3g.20gb": 3}
#: The device plugin's layout per GPU (mig-parted: one 3g.20gb, one 2g.10gb, two 1g.5gb).
LAYOUT = {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}
TEAMS = (1, 2, 3, 4)


def classes(dra: bool) -> dict[int, ClassView]:
    return {
        i: ClassView(i, mig_resource(p) if dra else mig_resource_name(p), A100, g / 7, p)
        for i, (p, g) in enumerate(PROFILES.items(), start=1)
    }


def nodes(count: int, gpus: int, dra: bool) -> list[NodeView]:
    out = []
    for i in range(count):
        if dra:
            devices = DraDevices.of(A100, [DraGpuRow(partitionable=True, profiles=tuple(PROFILES))] * gpus)
            allocatable, free = devices.allocatable(), devices.free()
        else:
            devices = None
            allocatable = {mig_resource_name(p): n * gpus for p, n in LAYOUT.items()}
            free = dict(allocatable)
        out.append(
            NodeView(
                name=f"a100-{i:04d}", product_label=A100, team=None, schedulable=True, allocatable=allocatable,
                free=free, cpu_free_m=256_000, memory_free_mb=1_000_000, cpu_capacity_m=256_000,
                memory_capacity_mb=1_000_000, dra=devices,
            )
        )  # fmt: skip
    return out


def queue(count: int, seed: int) -> list[JobView]:
    rng = random.Random(seed)
    return [
        JobView(
            id=i, team=rng.choice(TEAMS), class_id=rng.randint(1, len(PROFILES)), count=rng.choice((1, 1, 1, 2)),
            cpu_m=4000, memory_mb=16_000, priority=50, preemptible=rng.random() < 0.3, submitted=float(i),
        )
        for i in range(1, count + 1)
    ]  # fmt: skip


def cycle(dra: bool, args) -> tuple[float, int, int]:
    best, admitted, waiting = float("inf"), 0, 0
    for _ in range(args.repeat):
        snap = Snapshot(
            now=float(args.jobs), nodes={n.name: n for n in nodes(args.nodes, args.gpus, dra)}, classes=classes(dra),
            quotas={(t, c): QuotaView(10**6, 10**6) for t in TEAMS for c in range(1, len(PROFILES) + 1)},
            queued=queue(args.jobs, args.seed), active=[],
        )  # fmt: skip
        started = time.perf_counter()
        out = decide(snap)
        best = min(best, time.perf_counter() - started)
        admitted, waiting = len(out.admit), len(out.wait)
    return best, admitted, waiting


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    print(f"{args.nodes} A100 nodes × {args.gpus} GPUs, {args.jobs} queued MIG jobs (best of {args.repeat})")
    times = {}
    for label, dra in (("device plugin", False), ("DRA dynamic MIG", True)):
        seconds, admitted, waiting = cycle(dra, args)
        times[label] = seconds
        rate = args.jobs / seconds if seconds else float("inf")
        print(f"  {label:16s} {seconds * 1000:9.1f} ms  {rate:10.0f} decisions/s  ", end="")
        print(f"admitted {admitted}, waiting {waiting}")
    print(f"  DRA / device plugin: {times['DRA dynamic MIG'] / times['device plugin']:.2f}×")


if __name__ == "__main__":
    main()
