"""Admission at scale: 10,000 queued jobs from 20 teams with quotas onto 5,000 nodes / 40,000 GPUs (whole
H100s, A100 MIG 3g.40gb / 1g.10gb slices and ×4 time-sliced A10s), through the real cycle code on the
configured database. Two cycles per setting: the first admits what fits and explains the rest, the second
only explains the waiting (nothing changed in between). Prints, per cycle, the wall time, the CPU time of this
process (the rest is the database and waiting for the CPU on a shared host), the time inside the pure
``decide`` (placement engine included), decisions per second and database round trips; then a summary line
per setting. ``--jobs 2500,10000,20000`` shows the round trips do not grow with the queue. ``--gangs`` (by
default ``0,0.05``: both in one run) sets the share of distributed jobs: 2–16 workers of 4 or 8 H100s each, a
third requiring one zone (30 zones of 100 H100 nodes), a third preferring one.

    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python bench/admission_scale.py            # SQLite
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench .venv/bin/python bench/admission_scale.py

The script uses only what the release before the speed-up work (641ede5) has too, so the same command measures
before and after.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.models import Team  # noqa: E402
from gpus.models import Node, ResourceClass  # noqa: E402
from gpus.resources import class_key  # noqa: E402
from jobs import kinds  # noqa: E402
from jobs.batch.kind import BatchKind  # noqa: E402
from jobs.choices import JobKind  # noqa: E402
from jobs.cycle.admit import admit  # noqa: E402
from jobs.cycle.result import CycleResult  # noqa: E402
from jobs.kinds.base import Demand  # noqa: E402
from jobs.models import Job, Quota  # noqa: E402
from vocab.names import CPU_RESOURCE, GPU_RESOURCE, MEMORY_RESOURCE, ZONE_LABEL, mig_resource_name  # noqa: E402

try:
    from jobs.scheduling import decide  # noqa: E402
except ImportError:  # releases before the scheduling package (ffb770a and older): the same function, timed there
    from jobs import admission as decide  # noqa: E402

MIG_3G = mig_resource_name("3g.40gb")
MIG_1G = mig_resource_name("1g.10gb")

#: (class key, resource, product label, kind, fraction, units per node, nodes)
CLASSES = [
    (class_key(GPU_RESOURCE, "H100"), GPU_RESOURCE, "H100", "gpu", 1.0, 8, 3000),
    (class_key(MIG_3G, "A100"), MIG_3G, "A100", "mig", 3 / 7, 16, 1000),
    (class_key(MIG_1G, "A100"), MIG_1G, "A100", "mig", 1 / 7, 8, 0),  # same A100 nodes
    (class_key(GPU_RESOURCE, "A10-SHARED"), GPU_RESOURCE, "A10-SHARED", "shared", 0.25, 32, 1000),
]


class BenchGangKind(BatchKind):
    """Stands in for the distributed kind where it is not registered: one pod per worker."""

    name = JobKind.DISTRIBUTED

    def demand(self, job) -> Demand:
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=job.workers)


def build(rng: random.Random, queued: int = 10_000, gangs: float = 0.0) -> None:
    call_command("migrate", verbosity=0)
    Job.objects.all().delete()
    Quota.objects.all().delete()
    Node.objects.all().delete()
    ResourceClass.objects.all().delete()
    now = timezone.now()
    nodes = []
    for _key, resource, product, _kind, _fraction, units, count in CLASSES:
        for i in range(count):
            allocatable = {CPU_RESOURCE: "128", MEMORY_RESOURCE: "1024Gi", resource: str(units)}
            if product == "A100":
                allocatable[MIG_1G] = "8"
            nodes.append(
                Node(
                    name=f"{product.lower()}-{i:05d}",
                    product=product,
                    product_label=product,
                    allocatable=allocatable,
                    capacity=allocatable,
                    ready=True,
                    gpu_count=8 if product != "A10-SHARED" else 8,
                    last_seen=now,
                    cuda_version="12.4",
                    labels={ZONE_LABEL: f"{product.lower()}-zone-{i // 100:02d}"},
                )  # fmt: skip
            )
    Node.objects.bulk_create(nodes, batch_size=1000)
    classes = [
        ResourceClass(key=key, kind=kind, resource_name=resource, product=product, product_label=product,
                      gpu_fraction=fraction, allocatable=units * max(count, 1000))
        for key, resource, product, kind, fraction, units, count in CLASSES
    ]  # fmt: skip
    ResourceClass.objects.bulk_create(classes)
    classes = list(ResourceClass.objects.all())
    User = get_user_model()
    teams = []
    for t in range(20):
        defaults = {"name": f"Team {t}", "namespace": f"ns-{t}"}
        team, _ = Team.objects.get_or_create(slug=f"team{t:02d}", defaults=defaults)
        teams.append(team)
    owner, _ = User.objects.get_or_create(username="bench")
    Quota.objects.bulk_create(
        [Quota(team=t, resource_class=rc, guaranteed=rc.allocatable // 25, limit=rc.allocatable // 10)
         for t in teams for rc in classes]
    )  # fmt: skip
    jobs = []
    h100 = next(rc for rc in classes if rc.product == "H100")
    for i in range(queued):
        rc = rng.choice(classes)
        job = Job(team=rng.choice(teams), owner=owner, name=f"j{i}", image="nvidia/cuda:12.2.2-base-ubuntu22.04",
                  resource_class=rc, count=rng.choice([1, 1, 1, 2, 4, 8]), cpu_millicores=4000, memory_mb=16384,
                  priority=rng.choice([0, 50, 50, 100]), preemptible=rng.random() < 0.5, submitted_at=now)  # fmt: skip
        if rng.random() < gangs:
            job.kind, job.resource_class, job.workers, job.count = (
                JobKind.DISTRIBUTED,
                h100,
                rng.randint(2, 16),
                rng.choice([4, 8]),
            )
            job.topology_mode = rng.choice(["", "prefer", "require"])
            job.topology_key = ZONE_LABEL if job.topology_mode else ""
        jobs.append(job)
    Job.objects.bulk_create(jobs, batch_size=1000)


def main() -> None:
    parser = argparse.ArgumentParser(description="Admission at scale")
    parser.add_argument("--jobs", default="10000", help="queued jobs; a comma-separated list runs each in turn")
    parser.add_argument("--gangs", default="0,0.05", help="share of the jobs that are gangs; a list runs each in turn")
    args = parser.parse_args()
    if JobKind.DISTRIBUTED not in kinds.registered():
        kinds.register(BenchGangKind())
    decide_seconds = []
    real_decide = decide.decide

    def timed_decide(snap):
        t = time.perf_counter()
        try:
            return real_decide(snap)
        finally:
            decide_seconds.append(time.perf_counter() - t)

    decide.decide = timed_decide
    runs = [(int(n), float(g)) for n in args.jobs.split(",") for g in args.gangs.split(",")]
    summary = []
    for queued, gangs in runs:
        rng = random.Random(7)
        started = time.perf_counter()
        build(rng, queued, gangs)
        made = Job.objects.filter(workers__gt=1).count()
        print(f"database: {connection.vendor}; built 5,000 nodes / 40,000 GPUs (whole, MIG, time-sliced), 20 teams "
              f"and {queued:,} queued jobs ({made} gangs) in {time.perf_counter() - started:.1f} s")  # fmt: skip
        figures = []
        for label in ("first cycle (admits)", "second cycle (explains the waiting)"):
            result = CycleResult()
            decide_seconds.clear()
            with CaptureQueriesContext(connection) as queries:
                t, cpu = time.perf_counter(), time.process_time()
                admit(result)
                elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
            decided = result.admitted + result.waiting
            figures.append((elapsed, decided / elapsed))
            print(
                f"  {label}: {elapsed:.2f} s (CPU {cpu:.2f} s, {sum(decide_seconds):.2f} s in decide), "
                f"{result.admitted} admitted, {result.waiting} waiting, {decided / elapsed:,.0f} decisions/s, "
                f"{len(queries)} queries"
            )
        summary.append(
            f"{queued:,} queued, {gangs:.0%} gangs: {figures[0][1]:,.0f} decisions/s in the first cycle "
            f"({figures[0][0]:.2f} s); a cycle that only explains waits: {figures[1][0]:.2f} s"
        )
    print("summary (" + connection.vendor + "):")
    for line in summary:
        print("  " + line)


if __name__ == "__main__":
    main()
