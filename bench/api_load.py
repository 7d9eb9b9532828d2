"""The REST API under load: gunicorn on loopback over PostgreSQL, driven at a fixed rate by a bounded load
generator (stdlib threads and http.client), with an API token. Two request kinds run side by side: the job
list (GET /api/v1/jobs/, first page of a team's jobs, with its count) and job submission (POST
/api/v1/jobs/). Prints per kind the achieved rate, p50/p90/p99 latency and errors.

Latency is measured from the moment a request was *due* (open loop), so a server that falls behind shows it
as latency instead of silently sending fewer requests. The load is bounded: a fixed number of requests at a
fixed rate, at most ``--threads`` in flight.

It creates its own database (``gpu_portal_bench_api`` unless ``--db`` says otherwise) and drops it at the end:

    .venv/bin/python bench/api_load.py --pg postgres://postgres@127.0.0.1:5432 --list-rate 40 --submit-rate 10 \\
        --seconds 30
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
sys.path.insert(0, str(ROOT))

from vocab.names import GPU_RESOURCE  # noqa: E402

#: The resource class every bench job asks for (gpus.resources.class_key of the demo's H100 nodes).
H100_CLASS = f"{GPU_RESOURCE}@NVIDIA-H100-80GB-HBM3"


def database(url: str, name: str, action: str) -> None:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL run needs the driver

    with psycopg.connect(f"{url}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if action == "create":
            conn.execute(f'CREATE DATABASE "{name}"')


SEED = r"""
import django, os, sys
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import services
from jobs.models import Job
from accounts.choices import MembershipRole
from accounts.models import APIToken, Membership, Team

call_command("migrate", verbosity=0)
sync_inventory(SimulatedCluster(scenario="demo"))
User = get_user_model()
admin = User.objects.create_user("bench-admin", is_staff=True, is_superuser=True)
user = User.objects.create_user("bench-user")
team = Team.objects.create(slug="bench", name="Bench", namespace="bench")
Membership.objects.create(user=user, team=team, role=MembershipRole.MEMBER)
rc = ResourceClass.objects.get(key=sys.argv[2])
services.set_quota(admin, team, rc, 64, 128)
now = timezone.now()
Job.objects.bulk_create(
    [Job(team=team, owner=user, name=f"seed{i}", image="nvidia/cuda:12.2.2-base-ubuntu22.04", resource_class=rc,
         count=1, cpu_millicores=1000, memory_mb=4096, submitted_at=now) for i in range(int(sys.argv[1]))],
    batch_size=1000,
)
_, raw = APIToken.issue(user, "api load bench")
print(raw)
"""


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def drive(port: int, token: str, list_rate: float, submit_rate: float, seconds: float, threads: int) -> dict:
    """Send the planned requests at their due times; return per kind the latencies and errors."""
    plan: list[tuple[float, str]] = []
    for rate, kind in ((list_rate, "list"), (submit_rate, "submit")):
        if rate > 0:
            plan += [(i / rate, kind) for i in range(int(seconds * rate))]
    plan.sort()
    work: queue.Queue = queue.Queue()
    for item in plan:
        work.put(item)
    results: dict[str, dict] = {k: {"latency": [], "errors": 0, "statuses": {}} for k in ("list", "submit")}
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    started = time.perf_counter() + 0.5
    counter = iter(range(10**9))

    def worker() -> None:
        while True:
            try:
                due, kind = work.get_nowait()
            except queue.Empty:
                return
            delay = started + due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            if kind == "list":
                method, path, body = "GET", "/api/v1/jobs/?team=bench&limit=50", None
            else:
                method, path = "POST", "/api/v1/jobs/"
                body = json.dumps({
                    "team": "bench", "name": f"load-{next(counter)}", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                    "command": ["python", "train.py"], "resource_class": H100_CLASS,
                    "count": 1, "cpu": 4, "memory_mb": 16384,
                })  # fmt: skip
            status = 0
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                status = response.status
                conn.close()
            except OSError:
                status = -1
            latency = time.perf_counter() - (started + due)
            with lock:
                r = results[kind]
                r["latency"].append(latency)
                r["statuses"][status] = r["statuses"].get(status, 0) + 1
                if not 200 <= status < 300:
                    r["errors"] += 1

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    results["elapsed"] = time.perf_counter() - started
    return results


def wait_for(port: int, seconds: float = 30) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            return
        except OSError:
            time.sleep(0.3)
    raise SystemExit(f"gunicorn did not answer on port {port} within {seconds:.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description="API latency under a fixed request rate")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432", help="PostgreSQL server URL")
    parser.add_argument("--db", default="gpu_portal_bench_api", help="database created and dropped by the bench")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--workers", type=int, default=2, help="gunicorn worker processes")
    parser.add_argument("--worker-threads", type=int, default=4, help="threads per gunicorn worker (gthread)")
    parser.add_argument("--list-rate", type=float, default=40, help="job list requests per second")
    parser.add_argument("--submit-rate", type=float, default=10, help="job submissions per second")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--threads", type=int, default=32, help="most requests in flight")
    parser.add_argument("--seed-jobs", type=int, default=5000, help="jobs in the team before the run")
    args = parser.parse_args()
    if args.db in ("gpu_portal", "test_gpu_portal"):
        raise SystemExit("Use a database of the bench's own; it is dropped at the end.")

    database(args.pg, args.db, "create")
    data_dir = tempfile.mkdtemp(prefix="api-load-")
    env = os.environ | {
        "DATABASE_URL": f"{args.pg}/{args.db}",
        "PORTAL_DATA_DIR": data_dir,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
        "PORTAL_LOG_LEVEL": "WARNING",
    }
    server = None
    try:
        seed = subprocess.run(
            [PYTHON, "-c", SEED, str(args.seed_jobs), H100_CLASS],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if seed.returncode:
            raise SystemExit(f"seeding the bench database failed:\n{seed.stderr}")
        token = seed.stdout.strip().splitlines()[-1]
        server = subprocess.Popen(
            [str(Path(PYTHON).with_name("gunicorn")), "portal.wsgi", "-b", f"127.0.0.1:{args.port}", "-w",
             str(args.workers), "-k", "gthread", "--threads", str(args.worker_threads), "--log-level", "warning"],
            cwd=ROOT, env=env,
        )  # fmt: skip
        wait_for(args.port)
        drive(args.port, token, 10, 4, 2, 8)  # warm-up: every worker imports and connects before measuring
        print(
            f"gunicorn {args.workers} workers × {args.worker_threads} threads, PostgreSQL {args.db}; "
            f"{args.seed_jobs:,} jobs in the team; {args.list_rate:g} lists/s + {args.submit_rate:g} submits/s "
            f"for {args.seconds:g} s, at most {args.threads} in flight"
        )
        out = drive(args.port, token, args.list_rate, args.submit_rate, args.seconds, args.threads)
        for kind in ("list", "submit"):
            r = out[kind]
            lat = [x * 1000 for x in r["latency"]]
            if not lat:
                continue
            p50, p90, p99 = (percentile(lat, p) for p in (50, 90, 99))
            print(
                f"  {kind:6}: {len(lat)} requests, {len(lat) / out['elapsed']:.1f}/s, p50 {p50:.0f} ms, "
                f"p90 {p90:.0f} ms, p99 {p99:.0f} ms, mean {statistics.mean(lat):.0f} ms, "
                f"errors {r['errors']} (statuses {r['statuses']})"
            )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        database(args.pg, args.db, "drop")


if __name__ == "__main__":
    main()
