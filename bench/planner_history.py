"""The planner's inputs at scale, on the configured database: the demo's month of history written as the demo
starts it (planner.demo_history.seed_history: synthesis and the bulk writes), then that history copied until the
window holds about ``--jobs`` jobs, read back as the planner reads it (planner.history.window_history: one
streamed query of plain rows) and today's cluster (current_cluster). Prints wall time, rows and database round
trips of each, and the peak resident size after the read.

    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python bench/planner_history.py
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gpu_portal_bench_hist .venv/bin/python bench/planner_history.py
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.demo import seed_people  # noqa: E402
from cluster.sim import SimulatedCluster  # noqa: E402
from gpus.reconcile import sync_inventory  # noqa: E402
from jobs.demo import seed_quotas_and_jobs  # noqa: E402
from jobs.models import Job  # noqa: E402
from planner import demo_history  # noqa: E402
from planner.history import current_cluster, window_history  # noqa: E402

SCENARIO = Path(__file__).resolve().parents[1] / "cluster" / "scenarios" / "demo.yaml"


def timed(label: str, call):
    with CaptureQueriesContext(connection) as queries:
        began = time.perf_counter()
        result = call()
        seconds = time.perf_counter() - began
    print(f"{label}: {seconds:.2f} s, {len(queries)} queries")
    sys.stdout.flush()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=50_000, help="about how many jobs the window holds when read")
    args = parser.parse_args()
    call_command("migrate", verbosity=0)
    if Job.objects.exists():
        sys.exit("The database already has jobs: point DATABASE_URL / PORTAL_DATA_DIR at an empty one.")
    with tempfile.TemporaryDirectory() as tmp:
        sync_inventory(SimulatedCluster(Path(tmp) / "sim.json", scenario=SCENARIO))
        seed_people(Path(tmp) / "creds.txt")
        seed_quotas_and_jobs()
    now = timezone.now()
    start, end = demo_history.window(now)
    made = timed("seed_history (the demo's start)", lambda: demo_history.seed_history(now))
    print(f"  {made:,} jobs written")
    columns = ", ".join(f.column for f in Job._meta.concrete_fields if not f.primary_key)
    table = Job._meta.db_table
    copy = f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {table} WHERE submitted_at < %s"  # noqa: S608
    with connection.cursor() as cursor:
        while Job.objects.filter(submitted_at__lt=end).count() * 2 <= args.jobs:
            cursor.execute(copy, [end])
    history = timed("window_history (30 days)", lambda: window_history(start, end, now=now))
    print(f"  {len(history.jobs):,} jobs, {len(history.group_caps):,} array caps")
    print(f"  peak resident size: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MiB")
    cluster = timed("current_cluster", current_cluster)
    print(f"  {len(cluster.nodes)} nodes, {len(cluster.classes)} classes, {len(cluster.quotas)} quotas")


if __name__ == "__main__":
    main()
