"""The fleet at scale (issue 32, item 10): N simulated clusters of the same size (default 4 × 5,000 nodes and
20,000 workloads, as bench/reconcile_scale.py builds one), each with the same node names (names are unique per
cluster only). Prints, side by side in one sitting:

- the first cluster's quiet passes (an inventory sync and a job reconcile with nothing changed) while it is the only
  cluster with rows, then the same passes of every cluster once all N hold their nodes and jobs: the ratio is what
  the other clusters' rows cost a cluster's pass;
- the job cycle's reconcile of the reachable clusters with one cluster unreachable (its backend refuses every call)
  against the same with all reachable: what an unreachable cluster adds to the others' passes;
- the API's list and detail requests' query counts with one cluster and with N.

    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python bench/fleet_scale.py --clusters 4 --nodes 1000 --workloads 4000
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench .venv/bin/python bench/fleet_scale.py
"""

from __future__ import annotations

import argparse
import os
import statistics
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
from django.test.utils import CaptureQueriesContext  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from accounts.models import Team  # noqa: E402
from bench.reconcile_scale import START, Counted, peak_rss, scenario  # noqa: E402
from cluster.base import ClusterError  # noqa: E402
from cluster.sim import SimulatedCluster, job_controller, kubelet, scheduler  # noqa: E402
from cluster.sim import clock as sim_clock  # noqa: E402
from cluster.sim.validation import admit_job, validated_job  # noqa: E402
from gpus.choices import ClusterHealth  # noqa: E402
from gpus.models import GPU, Cluster, MigPartition, Node, ResourceClass, settings_cluster_pk  # noqa: E402
from gpus.reconcile import sync_inventory  # noqa: E402
from jobs.choices import JobState  # noqa: E402
from jobs.cycle.result import CycleResult  # noqa: E402
from jobs.cycle.run import reconcile_jobs  # noqa: E402
from jobs.models import Job, JobEvent, Quota  # noqa: E402
from jobs.render import render_job  # noqa: E402

REPEATS = 3


class Refusing:
    """An unreachable cluster's backend: every call is refused at once (a closed port)."""

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            raise ClusterError("connection refused")

        return refuse


def populate(sim: SimulatedCluster, cluster: Cluster, workloads: int, teams: list[Team], owner, now: list[float]):
    """``workloads`` admitted jobs of ``cluster`` spread over its nodes, with their pods bound and running."""
    classes = {rc.resource_name + "@" + rc.product_label: rc for rc in ResourceClass.objects.all()}
    targets = []
    for node in Node.objects.filter(cluster=cluster).order_by("name"):
        for rc in classes.values():
            if rc.product_label == node.product_label and rc.resource_name in (node.allocatable or {}):
                targets.append((node.name, rc))
                break
    created_at = datetime.fromtimestamp(START, UTC)
    first = Job.objects.count()
    fields = {"owner": owner, "image": "nvidia/cuda:12.2.2-base-ubuntu22.04", "command": ["sleep", "86400"],
              "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "state": JobState.ADMITTED, "cluster": cluster,
              "submitted_at": created_at, "admitted_at": created_at, "workload_created_at": created_at}  # fmt: skip
    jobs = [
        Job(team=teams[i % len(teams)], name=f"{cluster.name}-{i}", resource_class=targets[i % len(targets)][1],
            node_name=targets[i % len(targets)][0], **fields)
        for i in range(workloads)
    ]  # fmt: skip
    Job.objects.bulk_create(jobs, batch_size=2000)
    jobs = list(Job.objects.filter(cluster=cluster).select_related("team", "owner", "resource_class"))
    for job in jobs:
        job.workload_name = job.default_workload_name()
    Job.objects.bulk_update(jobs, ["workload_name"], batch_size=2000)
    node_of = {job.workload_name: job.node_name for job in jobs}
    assign_devices = kubelet._assign_devices  # the same setup shortcut as bench/reconcile_scale.py
    kubelet._assign_devices = lambda tx, node_name, pod: []
    try:
        with sim._store.transaction() as tx:
            for job in jobs:
                admit_job(tx, validated_job(render_job(job)))
            job_controller.reconcile(tx)
            for key, pod in tx.state["pods"].items():
                if not pod["spec"].get("nodeName"):
                    scheduler._bind(tx, key, node_of[pod["metadata"]["labels"]["job-name"]])
            sim_clock.settle(tx)
            tx.dirty = True
    finally:
        kubelet._assign_devices = assign_devices
    assert Job.objects.count() - first == workloads


def quiet(counted: Counted, label: str, sim, cluster: Cluster) -> tuple[float, float]:
    """Median seconds of REPEATS quiet inventory syncs and job reconciles of one cluster."""
    syncs, reconciles = [], []
    for _ in range(REPEATS):
        t = time.perf_counter()
        sync_inventory(sim, cluster)
        syncs.append(time.perf_counter() - t)
        t = time.perf_counter()
        reconcile_jobs(sim, CycleResult(), cluster=cluster)
        reconciles.append(time.perf_counter() - t)
    sync, rec = statistics.median(syncs), statistics.median(reconciles)
    print(f"  {label}: quiet inventory sync {sync:.2f} s, quiet job reconcile {rec:.2f} s (median of {REPEATS})")
    sys.stdout.flush()
    return sync, rec


def api_counts(paths: list[str]) -> dict[str, int]:
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.force_authenticate(get_user_model().objects.get(username="bench-admin"))
    found = {}
    for path in paths:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(path).status_code == 200, path
        found[path] = len(queries)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description="The fleet's passes at scale")
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=5000, help="nodes per cluster")
    parser.add_argument("--workloads", type=int, default=20_000, help="workloads per cluster")
    args = parser.parse_args()
    now = [START]
    call_command("migrate", verbosity=0)
    for model in (JobEvent, Job, Quota, MigPartition, GPU, Node, ResourceClass):
        model.objects.all().delete()
    Cluster.objects.exclude(pk=settings_cluster_pk()).delete()
    h100, a100 = args.nodes * 3 // 5, args.nodes // 5
    teams = [Team.objects.get_or_create(slug=f"bench{t:02d}", defaults={"name": f"Bench {t}",
             "namespace": f"bench-{t}"})[0] for t in range(20)]  # fmt: skip
    owner, _ = get_user_model().objects.get_or_create(username="bench")
    get_user_model().objects.update_or_create(username="bench-admin", defaults={"is_staff": True})
    print(f"database: {connection.vendor}; {args.clusters} clusters of {args.nodes:,} nodes and "
          f"{args.workloads:,} workloads")  # fmt: skip

    clusters = [Cluster.objects.get(pk=settings_cluster_pk())]
    clusters += [Cluster.objects.create(name=f"c{i}", connection="simulated", health=ClusterHealth.REACHABLE)
                 for i in range(1, args.clusters)]  # fmt: skip
    sims = []
    for cluster in clusters:
        t = time.perf_counter()
        sim = SimulatedCluster(scenario=scenario(h100, a100, args.nodes - h100 - a100), clock=lambda: now[0])
        for team in teams:
            sim.ensure_namespace(team.namespace)
        sims.append(sim)
        print(f"simulated cluster {cluster.name} in {time.perf_counter() - t:.1f} s")
    counted = Counted(sims[0])

    print("one cluster with rows:")
    sync_inventory(sims[0], clusters[0])
    populate(sims[0], clusters[0], args.workloads, teams, owner, now)
    now[0] += 600
    reconcile_jobs(sims[0], CycleResult(), cluster=clusters[0])  # the mass start
    alone = quiet(counted, clusters[0].name, sims[0], clusters[0])
    node = Node.objects.filter(cluster=clusters[0]).order_by("name").first().name
    paths = ["/api/v1/nodes/?limit=50", f"/api/v1/nodes/{node}/", "/api/v1/jobs/?limit=50", "/api/v1/clusters/",
             "/api/v1/resource-classes/"]  # fmt: skip
    counts_one = api_counts(paths)
    peak_rss("with one cluster")

    print(f"all {args.clusters} clusters with rows:")
    for sim, cluster in zip(sims[1:], clusters[1:], strict=True):
        sync_inventory(sim, cluster)
        populate(sim, cluster, args.workloads, teams, owner, now)
    now[0] += 600
    for sim, cluster in zip(sims[1:], clusters[1:], strict=True):
        reconcile_jobs(sim, CycleResult(), cluster=cluster)
    beside = [quiet(counted, c.name, s, c) for s, c in zip(sims, clusters, strict=True)]
    counts_all = api_counts(paths)
    peak_rss(f"with {args.clusters} clusters")
    first = beside[0]
    print(f"  {clusters[0].name} beside the others ÷ alone: inventory sync {first[0] / alone[0]:.2f}×, "
          f"job reconcile {first[1] / alone[1]:.2f}×")  # fmt: skip

    print("the cycle's reconciles with one cluster unreachable:")

    def passes(backends) -> float:
        t = time.perf_counter()
        for sim, cluster in backends:
            try:
                reconcile_jobs(sim, CycleResult(), cluster=cluster)
            except ClusterError:
                pass
        return time.perf_counter() - t

    reachable = list(zip(sims, clusters, strict=True))
    all_up = statistics.median(passes(reachable[:-1]) for _ in range(REPEATS))
    one_down = statistics.median(passes([*reachable[:-1], (Refusing(), clusters[-1])]) for _ in range(REPEATS))
    print(f"  the {args.clusters - 1} reachable clusters' reconciles: {all_up:.2f} s alone, {one_down:.2f} s with "
          f"{clusters[-1].name} refusing every call ({one_down / all_up:.2f}×)")  # fmt: skip

    print("API query counts, one cluster → all:")
    for path in paths:
        print(f"  {path}: {counts_one[path]} → {counts_all[path]}")


if __name__ == "__main__":
    main()
