"""The fleet at scale (issue 32, item 10): N simulated clusters of the same size (default 4 × 5,000 nodes and
20,000 workloads, as bench/reconcile_scale.py builds one), with the same node names (names are unique per cluster
only). Prints, side by side in one sitting, wall and CPU seconds and database round trips of each cluster's quiet
passes, with nothing changed:

- the inventory pass (gpus.fleet.sync: what the tasks reconcile_inventory and sync_cluster run per cluster) and the
  job cycle's pass (jobs.cycle.run.reconcile_jobs then launch: what run_cycle runs per cluster);
- first of the cluster configured in settings alone (a one-cluster portal), then of every cluster of the fleet of
  N, round after round, one cluster after another as a worker would run them; the ratio fleet ÷ alone;
- with the last cluster unreachable: refusing every call, or timing out, while the inventory has not yet marked it
  (the cycle still follows it), in one call as jobs.cycle.run.run_cycle follows the clusters one after another,
  then as the worker runs them, each registered cluster's passes in a task of its own (jobs.tasks.cycle_cluster;
  here a thread each, as the control worker's thread pool): when the others' passes end, beside the timing-out
  one and without it; then once its inventory pass has marked it (gpus.fleet.sync; gpus.fleet.reachable then leaves
  it out of the cycle): the other clusters' passes against the same passes with all reachable;
- the API's list and detail requests' query counts with one cluster and with N.

Memory: one simulated cluster of 5,000 nodes and 20,000 workloads (the simulator's state and the copies its lists
hand out) holds about 1.8 GiB, so the clusters live in state files (SimulatedCluster's state_path) and only the
one being passed is in memory: before each pass (untimed) its file is loaded and read once, so the pass finds the
simulator settled and its list copies made, as a worker's backend (its watch caches) would be. Peak resident size
stays near one cluster's. A cluster's backend is looked up through gpus.fleet.backend_of, which the bench points
at its own simulated clusters.

    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python bench/fleet_scale.py --clusters 4 --nodes 200 --workloads 800
    PORTAL_DATA_DIR=$(mktemp -d) DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench \\
        .venv/bin/python bench/fleet_scale.py
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from rest_framework.test import APIClient  # noqa: E402

from accounts.models import Team  # noqa: E402
from bench.reconcile_scale import START, peak_rss, running_workloads, scenario  # noqa: E402
from cluster.base import ClusterError  # noqa: E402
from cluster.sim import SimulatedCluster  # noqa: E402
from gpus import fleet  # noqa: E402
from gpus.choices import ClusterHealth  # noqa: E402
from gpus.models import GPU, Cluster, MigPartition, Node, ResourceClass, settings_cluster_pk  # noqa: E402
from jobs.cycle.result import CycleResult  # noqa: E402
from jobs.cycle.run import cluster_cycle, launch, reconcile_jobs  # noqa: E402
from jobs.models import Job, JobEvent, Quota  # noqa: E402


class Stored:
    """A simulated cluster kept in its state file, with a clock of its own (``now``); ``load`` brings it into memory
    (and settles it), ``release`` lets it go. Every other attribute is the loaded SimulatedCluster's."""

    def __init__(self, path: Path, scenario_: dict) -> None:
        self.path, self.now = path, START
        self.sim: SimulatedCluster | None = SimulatedCluster(state_path=path, scenario=scenario_, clock=self.clock)

    def clock(self) -> float:
        return self.now

    def load(self) -> None:
        if self.sim is None:
            self.sim = SimulatedCluster(state_path=self.path, clock=self.clock)
        self.sim.list_nodes()  # the clock's advance and the list copies: what a settled backend has already done
        self.sim.list_pods(label_selector=None)
        self.sim.list_workloads()

    def release(self) -> None:
        self.sim = None
        gc.collect()

    def __getattr__(self, name):
        if self.sim is None:
            raise RuntimeError(f"{self.path.name} is not loaded")
        return getattr(self.sim, name)


class Refusing:
    """An unreachable cluster's backend: every call is refused at once (a closed port)."""

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            raise ClusterError("connection refused")

        return refuse


class Stalling:
    """An unreachable cluster's backend: every call waits ``seconds`` and then fails (a host that drops packets:
    the client's timeout)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __getattr__(self, name):
        def stall(*args, **kwargs):
            time.sleep(self.seconds)
            raise ClusterError(f"timed out after {self.seconds:g} s")

        return stall


class Pass:
    """Wall and CPU seconds and database round trips of one pass; with ``Pass.profile`` set (a cProfile.Profile),
    the pass is profiled into it."""

    profile: cProfile.Profile | None = None
    #: Seconds the passes spent in the cyclic garbage collector (gc.callbacks), all passes together.
    collector_seconds = 0.0

    def __init__(self) -> None:
        self.queries = 0

    def __call__(self, execute, sql, params, many, context):
        self.queries += 1
        return execute(sql, params, many, context)

    def run(self, fn) -> tuple[float, float, int]:
        collected = [0.0, 0.0]  # seconds in the cyclic collector, and when the running collection began

        def collector(phase, info):
            if phase == "start":
                collected[1] = time.perf_counter()
            else:
                collected[0] += time.perf_counter() - collected[1]

        gc.callbacks.append(collector)
        try:
            with connection.execute_wrapper(self):
                wall, cpu = time.perf_counter(), time.process_time()
                if Pass.profile is None:
                    fn()
                else:
                    Pass.profile.runcall(fn)
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        finally:
            gc.callbacks.remove(collector)
        Pass.collector_seconds += collected[0]
        return wall, cpu, self.queries


def inventory_pass(name: str) -> tuple[float, float, int]:
    """What the task sync_cluster runs: the cluster's row, then gpus.fleet.sync."""

    def sync():
        fleet.sync(Cluster.objects.get(name=name))

    return Pass().run(sync)


def cycle_pass(cluster: Cluster, backend, home_id: int) -> tuple[float, float, int]:
    """What run_cycle runs per cluster: its reconcile (a ClusterError is the cycle's to report) and its launch."""

    def passes():
        result = CycleResult()
        try:
            reconcile_jobs(backend, result, cluster=cluster, home_id=home_id)
        except ClusterError:
            pass
        launch(backend, result, cluster=cluster, home_id=home_id)

    return Pass().run(passes)


def task_round(clusters: list[Cluster], backends: dict) -> dict[str, float]:
    """One job cycle of the registered clusters as the worker runs it: each cluster's passes
    (jobs.cycle.run.cluster_cycle, what the task cycle_cluster runs) in a thread of its own, as the control worker's
    thread pool runs those tasks side by side. The wall seconds from the round's start to the end of each pass."""
    start = time.perf_counter()
    ended: dict[str, float] = {}

    def one(cluster: Cluster) -> None:
        try:
            cluster_cycle(cluster, backends[cluster.name])
        finally:
            ended[cluster.name] = time.perf_counter() - start
            connection.close()

    threads = [threading.Thread(target=one, args=(cluster,)) for cluster in clusters]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return ended


def load() -> str:
    return "load average " + " ".join(f"{x:.1f}" for x in os.getloadavg())


def median(samples: list[tuple[float, float, int]]) -> tuple[float, float, int]:
    return (
        statistics.median(s[0] for s in samples),
        statistics.median(s[1] for s in samples),
        max(s[2] for s in samples),
    )


def shown(figure: tuple[float, float, int]) -> str:
    return f"{figure[0]:.2f} s wall, {figure[1]:.2f} s CPU, {figure[2]} q"


def api_counts(paths: list[str]) -> dict[str, int]:
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.force_authenticate(get_user_model().objects.get(username="bench-admin"))
    found = {}
    for path in paths:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(path)
            assert response.status_code == 200, (path, response.status_code, response.content[:300])
        found[path] = len(queries)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description="The fleet's passes at scale")
    parser.add_argument("--clusters", type=int, default=4)
    parser.add_argument("--nodes", type=int, default=5000, help="nodes per cluster")
    parser.add_argument("--workloads", type=int, default=20_000, help="workloads per cluster")
    parser.add_argument("--rounds", type=int, default=3, help="rounds over the clusters, each loaded once a round")
    parser.add_argument("--passes", type=int, default=3, help="quiet passes of a cluster each round (medians shown)")
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds a timing-out cluster's calls wait")
    parser.add_argument("--profile", metavar="DIR", help="write cProfile stats of the quiet passes, alone.prof and "
                        "fleet.prof, to DIR (timings then include the profiler's cost)")  # fmt: skip
    args = parser.parse_args()
    assert args.clusters >= 2
    states = Path(settings.DATA_DIR) / "fleet-bench"
    states.mkdir(parents=True, exist_ok=True)
    call_command("migrate", verbosity=0)
    for model in (JobEvent, Job, Quota, MigPartition, GPU, Node, ResourceClass):
        model.objects.all().delete()
    Cluster.objects.exclude(pk=settings_cluster_pk()).delete()
    Cluster.objects.filter(pk=settings_cluster_pk()).update(health=ClusterHealth.REACHABLE, class_totals={})
    teams = [Team.objects.get_or_create(slug=f"bench{t:02d}", defaults={"name": f"Bench {t}",
             "namespace": f"bench-{t}"})[0] for t in range(20)]  # fmt: skip
    owner, _ = get_user_model().objects.get_or_create(username="bench")
    get_user_model().objects.update_or_create(username="bench-admin", defaults={"is_staff": True})
    print(f"database: {connection.vendor}; {args.clusters} clusters of {args.nodes:,} nodes and "
          f"{args.workloads:,} workloads; {load()}")  # fmt: skip
    sys.stdout.flush()

    backends: dict[str, object] = {}
    fleet.backend_of = lambda cluster: backends[cluster.name]  # the bench's clusters, for the product's own lookups
    home = Cluster.objects.get(pk=settings_cluster_pk())
    h100, a100 = args.nodes * 3 // 5, args.nodes // 5
    shape = scenario(h100, a100, args.nodes - h100 - a100)

    def add(cluster: Cluster) -> Stored:
        """Build the cluster, take its inventory, run its workloads and start its jobs; leave it on file."""
        t = time.perf_counter()
        stored = Stored(states / f"{cluster.name}.json", shape)
        for team in teams:
            stored.ensure_namespace(team.namespace)
        backends[cluster.name] = stored
        fleet.sync(cluster)
        running_workloads(stored.sim, Node.objects.filter(cluster=cluster), args.workloads, teams, owner,
                          f"{cluster.name}-", cluster=cluster)  # fmt: skip
        stored.now += 600  # images pulled, containers started
        stored.load()
        result = CycleResult()
        reconcile_jobs(stored, result, cluster=cluster, home_id=home.pk)  # the mass start
        assert result.started == args.workloads, result.as_dict()
        # What a worker's earlier passes leave: the usage of the running pods written, the quiet jobs remembered.
        fleet.sync(cluster)
        cycle_pass(cluster, stored, home.pk)
        stored.release()
        print(f"  {cluster.name}: {args.nodes:,} nodes and {args.workloads:,} running jobs in "
              f"{time.perf_counter() - t:.0f} s")  # fmt: skip
        sys.stdout.flush()
        return stored

    def rounds(names: list[str], count: int) -> dict[str, dict[str, list]]:
        """``count`` rounds over the named clusters, each loaded in turn for ``--passes`` of its inventory pass and
        cycle pass."""
        found: dict[str, dict[str, list]] = {name: {"sync": [], "cycle": []} for name in names}
        Pass.collector_seconds = 0.0
        for _ in range(count):
            for name in names:
                backend = backends[name]
                if isinstance(backend, Stored):
                    backend.load()
                cluster = Cluster.objects.get(name=name)
                for _ in range(args.passes):
                    found[name]["sync"].append(inventory_pass(name))
                    found[name]["cycle"].append(cycle_pass(cluster, backend, home.pk))
                if isinstance(backend, Stored):
                    backend.release()
        passes = 2 * count * args.passes * len(names)
        print(f"  (the cyclic garbage collector ran {Pass.collector_seconds / passes:.3f} s in a pass, on average)")
        return {name: {kind: median(samples) for kind, samples in kinds.items()} for name, kinds in found.items()}

    print(f"the cluster configured in settings alone ({load()}):")
    add(home)
    Pass.profile = cProfile.Profile() if args.profile else None
    alone = rounds([home.name], args.rounds)[home.name]
    if args.profile:
        Pass.profile.dump_stats(Path(args.profile) / "alone.prof")
    print(f"  inventory pass {shown(alone['sync'])}; cycle pass {shown(alone['cycle'])} "
          f"(medians of {args.rounds * args.passes})")  # fmt: skip
    node = Node.objects.filter(cluster=home).order_by("name").first().name
    job = Job.objects.filter(cluster=home).order_by("pk").first().pk
    paths = ["/api/v1/clusters/", f"/api/v1/clusters/{home.name}/", "/api/v1/nodes/?limit=50",
             f"/api/v1/nodes/?cluster={home.name}&limit=50", f"/api/v1/nodes/{node}/",
             f"/api/v1/nodes/{node}/?cluster={home.name}", "/api/v1/jobs/?limit=50",
             f"/api/v1/jobs/?cluster={home.name}&limit=50", f"/api/v1/jobs/{job}/",
             "/api/v1/resource-classes/"]  # fmt: skip
    counts_one = api_counts(paths)
    peak_rss("with one cluster")

    print(f"the other {args.clusters - 1} clusters ({load()}):")
    clusters = [home]
    for i in range(1, args.clusters):
        cluster = Cluster.objects.create(name=f"c{i}", connection="simulated", health=ClusterHealth.REACHABLE)
        add(cluster)
        clusters.append(cluster)
    names = [c.name for c in clusters]
    print(f"the fleet of {args.clusters}, {args.rounds} rounds of {args.passes} passes of every cluster ({load()}):")
    Pass.profile = cProfile.Profile() if args.profile else None
    beside = rounds(names, args.rounds)
    if args.profile:
        Pass.profile.dump_stats(Path(args.profile) / "fleet.prof")
    Pass.profile = None
    for name in names:
        print(f"  {name}: inventory pass {shown(beside[name]['sync'])}; cycle pass {shown(beside[name]['cycle'])}")
    counts_all = api_counts(paths)
    peak_rss(f"with {args.clusters} clusters")

    down = clusters[-1]
    up = names[:-1]
    stored_down = backends[down.name]
    print(f"{down.name} unreachable ({load()}):")

    def cycle_round() -> dict[str, tuple[float, float, int]]:
        """One job cycle's passes: the cluster configured in settings and what gpus.fleet.reachable lists."""
        out = {}
        for cluster, backend in [(home, backends[home.name]), *fleet.reachable()]:
            if isinstance(backend, Stored):
                backend.load()
            out[cluster.name] = cycle_pass(cluster, backend, home.pk)
            if isinstance(backend, Stored):
                backend.release()
        return out

    unmarked = {}
    for label, backend in (("refusing", Refusing()), (f"timing out after {args.timeout:g} s", Stalling(args.timeout))):
        backends[down.name] = backend
        unmarked[label] = cycle_round()
        cycle = unmarked[label]
        wall, cpu = sum(cycle[name][0] for name in up), sum(cycle[name][1] for name in up)
        print(f"  {label}, not yet marked: the cycle's pass of {down.name} {cycle[down.name][0]:.2f} s; the others' "
              f"{wall:.2f} s wall, {cpu:.2f} s CPU in all")  # fmt: skip
    # The worker runs each registered cluster's cycle passes as a task of its own (jobs.tasks.cycle_cluster): with
    # the timing-out cluster among them and without it, when do the others' passes end?
    others = [c for c in clusters[1:-1]]
    for backend in (backends[c.name] for c in others):
        backend.load()
    side_by_side: dict[str, list[dict[str, float]]] = {"without": [], "with": []}
    for _ in range(args.rounds):
        side_by_side["without"].append(task_round(others, backends))
        backends[down.name] = Stalling(args.timeout)
        side_by_side["with"].append(task_round([*others, down], backends))
        Cluster.objects.filter(pk=down.pk).update(health=ClusterHealth.REACHABLE)  # as before the pass marked it
    for backend in (backends[c.name] for c in others):
        backend.release()
    print(f"  as the worker runs them, one task a cluster ({load()}): the others' passes end after "
          + "; ".join(f"{c.name} {statistics.median(r[c.name] for r in side_by_side['without']):.2f} s without "
                      f"{down.name}, {statistics.median(r[c.name] for r in side_by_side['with']):.2f} s beside it "
                      f"timing out (its own pass {statistics.median(r[down.name] for r in side_by_side['with']):.2f} s)"
                      for c in others))  # fmt: skip
    backends[down.name] = Refusing()
    marking = inventory_pass(down.name)
    down.refresh_from_db()
    print(f"  its inventory pass (gpus.fleet.sync) {shown(marking)}: marked {down.health}; the cycle now follows "
          f"{[c.name for c, _ in fleet.reachable()]} beside {home.name}")  # fmt: skip
    marked = rounds(up, args.rounds)
    for name in up:
        print(f"  {name}: inventory pass {shown(marked[name]['sync'])}; cycle pass {shown(marked[name]['cycle'])}")
    backends[down.name] = stored_down
    peak_rss("at the end")

    def ratio(kind: str, wall_or_cpu: int, figures: dict) -> str:
        values = [figures[name][kind][wall_or_cpu] / beside[name][kind][wall_or_cpu] for name in figures]
        return f"{min(values):.2f}–{max(values):.2f}×" if len(values) > 1 else f"{values[0]:.2f}×"

    print("\nsummary (medians; ratios of wall time, CPU time in brackets):")
    for kind, label in (("sync", "inventory pass"), ("cycle", "cycle pass")):
        each = [beside[name][kind] for name in names]
        print(f"  {label}: alone {alone[kind][0]:.2f} s ({alone[kind][1]:.2f} s CPU, {alone[kind][2]} q); "
              f"in the fleet {min(e[0] for e in each):.2f}–{max(e[0] for e in each):.2f} s "
              f"({min(e[1] for e in each):.2f}–{max(e[1] for e in each):.2f} s CPU, "
              f"{min(e[2] for e in each)}–{max(e[2] for e in each)} q); "
              f"fleet ÷ alone {max(e[0] for e in each) / alone[kind][0]:.2f}× at most, "
              f"{statistics.median(e[0] for e in each) / alone[kind][0]:.2f}× median "
              f"({max(e[1] for e in each) / alone[kind][1]:.2f}×, "
              f"{statistics.median(e[1] for e in each) / alone[kind][1]:.2f}×)")  # fmt: skip
        print(f"    with {down.name} marked unreachable ÷ all reachable, the others: {ratio(kind, 0, marked)} "
              f"({ratio(kind, 1, marked)})")  # fmt: skip
    print("API query counts, one cluster → all:")
    for path in paths:
        print(f"  {path}: {counts_one[path]} → {counts_all[path]}")


if __name__ == "__main__":
    main()
