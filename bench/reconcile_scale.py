"""Reconcile at scale: one inventory sync (gpus.reconcile.sync_inventory) of a 5,000-node simulated cluster, and
one job reconcile (jobs.cycle.run.reconcile_jobs) over 20,000 workloads, on the configured database. Prints wall
time and database round trips of each pass: the first (rows created, jobs moved to Running), and a second one
with nothing to change, and the process's peak resident size (``ru_maxrss``) after the inventory and after the
workloads: what a worker that holds this cluster holds.

The cluster is cluster.sim.SimulatedCluster in memory: 3,000 HGX H100 nodes (8 GPUs), 1,000 DGX A100
nodes in MIG mixed all-balanced, 1,000 A10 nodes time-sliced ×4 (40,000 GPUs). The 20,000 workloads are the
portal's own manifests (jobs.render.render_job) for Job rows admitted onto those nodes, created in one
simulator transaction (creating them one call at a time would measure the simulator's scheduler instead).

    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python bench/reconcile_scale.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench .venv/bin/python bench/reconcile_scale.py
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from accounts.models import Team  # noqa: E402
from cluster.sim import (  # noqa: E402
    SimulatedCluster,  # noqa: E402
    job_controller,
    kubelet,
    scheduler,
)
from cluster.sim import clock as sim_clock  # noqa: E402
from cluster.sim.validation import admit_job, validated_job  # noqa: E402
from gpus.models import GPU, MigPartition, Node, ResourceClass  # noqa: E402
from gpus.reconcile import sync_inventory  # noqa: E402
from jobs.choices import JobState  # noqa: E402
from jobs.cycle.result import CycleResult  # noqa: E402
from jobs.cycle.run import reconcile_jobs  # noqa: E402
from jobs.models import Job, JobEvent, Quota  # noqa: E402
from jobs.render import render_job  # noqa: E402

try:
    from gpus.node_pools import PoolTaints  # noqa: E402
except ImportError:  # a checkout from before node pools (bench/sitting.sh runs this file in older ones)
    PoolTaints = None

START = 1_800_000_000.0


def peak_rss(label: str) -> None:
    """The process's peak resident size so far (Linux reports ru_maxrss in KiB)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak resident size {label}: {peak:,.0f} MiB")
    sys.stdout.flush()


def scenario(h100: int, a100: int, a10: int) -> dict:
    return {
        "defaults": {"driver": "550.54.15", "cuda": "12.4"},
        "nodes": [
            {
                "names": [f"h100-{i:05d}" for i in range(h100)],
                "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 8},
                "mig": {"strategy": "single", "config": "all-disabled"},
                "cpu": 224,
                "memory": "2Ti",
            },
            {
                "names": [f"a100-{i:05d}" for i in range(a100)],
                "gpu": {"product": "NVIDIA A100-SXM4-80GB", "count": 8},
                "mig": {"strategy": "mixed", "config": "all-balanced"},
                "cpu": 256,
                "memory": "2Ti",
            },
            {
                "names": [f"a10-{i:05d}" for i in range(a10)],
                "gpu": {"product": "NVIDIA A10", "count": 8},
                "time_slicing": {"replicas": 4, "rename": False, "config": "nvidia-a10"},
                "cpu": 128,
                "memory": "1Ti",
            },
        ],
    }


class Counted:
    """Database round trips (every execute or executemany the backend runs) and time inside the cluster's list
    calls, while a pass runs. Unlike CaptureQueriesContext it has no 9,000-query cap."""

    def __init__(self, sim: SimulatedCluster) -> None:
        self.queries = 0
        self.cluster_seconds = 0.0
        for name in ("list_nodes", "list_pods", "list_workloads"):
            setattr(sim, name, self._timed(getattr(sim, name)))

    def _timed(self, call):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.cluster_seconds += time.perf_counter() - t

        return timed

    def __call__(self, execute, sql, params, many, context):
        self.queries += 1
        return execute(sql, params, many, context)

    def measure(self, label: str, fn) -> None:
        self.queries, self.cluster_seconds = 0, 0.0
        with connection.execute_wrapper(self):
            t = time.perf_counter()
            outcome = fn()
            elapsed = time.perf_counter() - t
        print(
            f"  {label}: {elapsed:.2f} s ({self.cluster_seconds:.2f} s of it in the simulator's list calls), "
            f"{self.queries} queries — {outcome}"
        )
        sys.stdout.flush()


def running_workloads(sim: SimulatedCluster, nodes, count: int, teams: list, owner, prefix: str, **fields) -> list[Job]:
    """``count`` admitted one-GPU-unit jobs named ``<prefix><i>``, spread over ``nodes`` (a Node queryset) and the
    teams, with their workloads made in ``sim`` and each pod bound to its job's node; ``fields``: more Job fields
    (the fleet bench's ``cluster``). The jobs, loaded with what rendering them needs.

    Setup shortcut: the Job controller makes each Job's pod, each pod is bound to the node the portal chose (its
    manifest pins that node, so that is what the simulated scheduler would do), and the kubelet's device pick, which
    scans every pod per pod started, is skipped. Without it the setup is quadratic in the simulator; reconcile is
    what is measured. The manifests are made in one simulator transaction (one call per job would measure the
    simulator's scheduler instead), with the node pools' taints read once for all of them, as the cycle's launch
    reads them."""
    classes = list(ResourceClass.objects.all())
    targets = []
    for node in nodes.order_by("name"):
        for rc in classes:
            if rc.product_label == node.product_label and rc.resource_name in (node.allocatable or {}):
                targets.append((node.name, rc))
                break
    created_at = datetime.fromtimestamp(START, UTC)
    last = Job.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    fields |= {"owner": owner, "image": "nvidia/cuda:12.2.2-base-ubuntu22.04", "command": ["sleep", "86400"],
               "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "state": JobState.ADMITTED,
               "submitted_at": created_at, "admitted_at": created_at, "workload_created_at": created_at}  # fmt: skip
    jobs = [
        Job(team=teams[i % len(teams)], name=f"{prefix}{i}", resource_class=targets[i % len(targets)][1],
            node_name=targets[i % len(targets)][0], **fields)
        for i in range(count)
    ]  # fmt: skip
    Job.objects.bulk_create(jobs, batch_size=2000)
    jobs = list(Job.objects.filter(pk__gt=last).select_related("team", "owner", "resource_class").order_by("pk"))
    assert len(jobs) == count, (len(jobs), count)
    for job in jobs:
        job.workload_name = job.default_workload_name()
    Job.objects.bulk_update(jobs, ["workload_name"], batch_size=2000)
    table = PoolTaints.load() if PoolTaints is not None else None
    for job in jobs:
        job.pool_taints, job.on_managed_node = table, False  # jobs.render: read once for all, as launch does
    node_of = {job.workload_name: job.node_name for job in jobs}
    assign_devices = kubelet._assign_devices
    kubelet._assign_devices = lambda tx, node_name, pod: []
    try:
        with sim._store.transaction() as tx:
            for job in jobs:
                admit_job(tx, validated_job(render_job(job)))
            job_controller.reconcile(tx)
            for key, pod in tx.state["pods"].items():
                if not pod["spec"].get("nodeName"):
                    scheduler._bind(tx, key, node_of[pod["metadata"]["labels"]["job-name"]])
            sim_clock.settle(tx)  # the kubelets take the bound pods
            tx.dirty = True
    finally:
        kubelet._assign_devices = assign_devices
    return jobs


def main() -> None:
    parser = argparse.ArgumentParser(description="Inventory and job reconcile at scale")
    parser.add_argument("--nodes", type=int, default=5000, help="nodes (3/5 H100, 1/5 A100 MIG, 1/5 A10 shared)")
    parser.add_argument("--workloads", type=int, default=20_000)
    args = parser.parse_args()
    now = [START]
    h100, a100 = args.nodes * 3 // 5, args.nodes // 5
    started = time.perf_counter()
    sim = SimulatedCluster(scenario=scenario(h100, a100, args.nodes - h100 - a100), clock=lambda: now[0])
    print(f"database: {connection.vendor}; simulated {args.nodes:,} nodes in {time.perf_counter() - started:.1f} s")
    call_command("migrate", verbosity=0)
    counted = Counted(sim)
    measured = counted.measure
    JobEvent.objects.all().delete()
    Job.objects.all().delete()
    Quota.objects.all().delete()
    MigPartition.objects.all().delete()
    GPU.objects.all().delete()
    Node.objects.all().delete()
    ResourceClass.objects.all().delete()

    print("inventory sync (gpus.reconcile.sync_inventory):")
    measured("first (creates every row)", lambda: sync_inventory(sim).as_dict())
    measured("second (nothing changed)", lambda: sync_inventory(sim).as_dict())
    peak_rss(f"with {args.nodes:,} nodes")

    # 20,000 admitted jobs spread over the nodes, one unit each, and their workloads in the cluster.
    teams = []
    for t in range(20):
        defaults = {"name": f"Bench {t}", "namespace": f"bench-{t}"}
        team, _ = Team.objects.get_or_create(slug=f"bench{t:02d}", defaults=defaults)
        teams.append(team)
        sim.ensure_namespace(team.namespace)
    owner, _ = get_user_model().objects.get_or_create(username="bench")
    t = time.perf_counter()
    jobs = running_workloads(sim, Node.objects.all(), args.workloads, teams, owner, "r")
    made = time.perf_counter() - t
    now[0] += 600  # images pulled, containers started
    t = time.perf_counter()
    pods = sim.list_pods()
    print(f"simulator advanced 10 minutes (pods pulled and started) in {time.perf_counter() - t:.1f} s")
    running = sum(1 for p in pods if p["status"].get("phase") == "Running")
    print(
        f"{len(jobs):,} workloads created in the simulator in {made:.1f} s; {running:,} of {len(pods):,} pods running"
    )

    def reconcile() -> dict:
        result = CycleResult()
        reconcile_jobs(sim, result)
        return {k: v for k, v in result.as_dict().items() if v}

    print("job reconcile (jobs.cycle.run.reconcile_jobs):")
    measured("first (every job Admitted → Running: the mass start)", reconcile)
    measured("second (nothing changed)", reconcile)
    print("inventory sync with the workloads running:")
    measured("sync", lambda: sync_inventory(sim).as_dict())
    measured("again (nothing changed)", lambda: sync_inventory(sim).as_dict())
    peak_rss(f"with {args.nodes:,} nodes and {len(jobs):,} workloads")


if __name__ == "__main__":
    main()
