"""The REST API under a pipeline-shaped load: gunicorn on loopback over PostgreSQL, with the production server
settings, driven at a fixed total rate by a bounded open-loop load generator on the same machine (stdlib
threads and http.client, one keep-alive connection per generator thread), with a team member's API token.

Request kinds (their shares of the total rate: ``--mix``):

- ``detail``: GET /api/v1/jobs/{id}/ of one of the team's queued jobs (a pipeline polling its job);
- ``wait``: GET /api/v1/jobs/{id}/wait/?after_event=E&timeout=5 where E is older than the job's newest timeline
  event, so the long-poll answers at once (it measures the wait endpoint's work, not a sleep; a wait that did
  not answer at once would show as ~5 s);
- ``list``: first pages of the filtered job lists pipelines ask for, in turn: the team's newest 50
  (?team=bench&limit=50), a pipeline's queued jobs (?team=bench&state=queued&label=pipeline=pN&limit=20) and a
  pipeline's unfinished jobs across the user's teams (?state=queued&state=running&label=pipeline=pN);
- ``submit``: POST /api/v1/jobs/ (a 1-GPU job with a pipeline label);
- ``ceiling``: GET /bench/ceiling/, a bare DRF APIView returning a small dict, with the same middleware, token
  authentication and permission class (bench/api_ceiling.py adds it on top of the production settings; the
  product has no such route). It runs in the mix (its latency under the same load) and, first, alone and closed
  loop for ``--ceiling-seconds`` (as many requests as the server answers: the ceiling rate). The report gives
  the ratio of the mix's served rate to that ceiling.

Latency is counted from the moment a request was *due* (open loop), so a server that falls behind shows it as
latency instead of silently sending fewer requests. Beside the rates it prints the CPU time the server's
processes used per request (the ceiling's and the mix's, from /proc): on a shared machine that figure moves far
less than the rates do. The load is bounded: a fixed number of requests at a fixed
rate, at most ``--threads`` in flight.

The server is ``gunicorn portal.wsgi:application`` run from the checkout (reading its gunicorn.conf.py: its worker
class, sync, its workers and threads, which the Dockerfile and deploy/30-web.yaml pass too, and its worker
set-up, portal.webprocess; ``--workers`` and ``--worker-threads`` override them), DEBUG off, and the production
settings (the connection pool, DATABASE_POOL_MAX, whose connections prepare repeated queries,
DATABASE_PREPARE_THRESHOLD); ``--server-env NAME=VALUE`` changes a setting for the server only
(``DATABASE_PREPARE_THRESHOLD=0``: no prepared statements). The seeded database is vacuumed and analysed before the
run, as autovacuum keeps a production one. Beside each kind's
latencies it prints how late the generator itself sent its requests (p99): a figure near the latencies means the
machine, not the server, fell behind.
``--rate-of-ceiling 0.2`` drives the mix at 20% of the ceiling measured first in the same run instead of a fixed
``--rate`` (on a shared machine a fixed rate means a different load from one run to the next).
``--worker-class`` overrides gunicorn.conf.py's (``gevent`` needs gevent installed; the portal does not depend on
it). ``--root`` serves another checkout (the release before, e.g. a worktree of ffb770a, which reads its own
gunicorn.conf.py) with this same script and this directory's api_ceiling.py.
``--against ROOT --pairs N`` runs this checkout and ROOT in turn, N runs each (the order swapped every pair), and
prints each pair's ratios, this side ÷ the other (the mix's CPU a request, the ceiling's, and mix ÷ ceiling), with
their median: one pair on a machine whose speed moves can land either way.
It creates its own database (``gpu_portal_bench_api`` unless ``--db`` says otherwise) and drops it at the end:

    .venv/bin/python bench/api_load.py --rate 200 --seconds 60
    .venv/bin/python bench/api_load.py --rate-of-ceiling 0.2 --seconds 30
    .venv/bin/python bench/api_load.py --rate 200 --seconds 60 --mix detail=50,wait=25,list=12,submit=8,ceiling=5
    .venv/bin/python bench/api_load.py --rate 100 --seconds 60 --root /tmp/portal-641ede5
    .venv/bin/python bench/api_load.py --rate-of-ceiling 0.2 --seconds 30 --against /tmp/before --pairs 8
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import queue
import runpy
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PYTHON = sys.executable

#: The resource class every bench job asks for (gpus.resources.class_key of the demo's H100 nodes).
H100_CLASS = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
KINDS = ("detail", "wait", "list", "submit", "ceiling")
DEFAULT_MIX = "detail=50,wait=25,list=12,submit=8,ceiling=5"
#: Pipelines (label values) the seeded jobs are spread over.
PIPELINES = 50


def database(url: str, name: str, action: str) -> None:
    import psycopg  # noqa: PLC0415 - only the PostgreSQL run needs the driver

    with psycopg.connect(f"{url}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if action == "create":
            conn.execute(f'CREATE DATABASE "{name}"')


# Only models and functions that exist in the release before this work (641ede5, ffb770a) too; set_quota moved from
# jobs.services to jobs.actions since.
SEED = r"""
import django, json, sys
django.setup()
from datetime import timedelta
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
try:
    from jobs.actions import set_quota
except ImportError:
    from jobs.services import set_quota
from jobs.models import Job, JobEvent
from accounts.choices import MembershipRole
from accounts.models import APIToken, Membership, Team

jobs, pipelines, targets = int(sys.argv[1]), int(sys.argv[3]), int(sys.argv[4])
call_command("migrate", verbosity=0)
sync_inventory(SimulatedCluster(scenario="demo"))
User = get_user_model()
admin = User.objects.create_user("bench-admin", is_staff=True, is_superuser=True)
user = User.objects.create_user("bench-user")
team = Team.objects.create(slug="bench", name="Bench", namespace="bench")
other = Team.objects.create(slug="bench-other", name="Bench other", namespace="bench-other")
Membership.objects.create(user=user, team=team, role=MembershipRole.MEMBER)
rc = ResourceClass.objects.get(key=sys.argv[2])
set_quota(admin, team, rc, 64, 128)
now = timezone.now()
# Most jobs ended, some queued, a few running; newest first in the list is the last ones made.
def state(i):
    return "queued" if i % 10 == 0 else "running" if i % 25 == 1 else "succeeded" if i % 7 else "failed"
rows = [
    Job(team=other if i % 5 == 3 else team, owner=admin if i % 5 == 3 else user, name=f"seed{i}",
        image="nvidia/cuda:12.2.2-base-ubuntu22.04", resource_class=rc, count=1, cpu_millicores=1000,
        memory_mb=4096, state=state(i), submitted_at=now - timedelta(seconds=jobs - i),
        labels={"pipeline": f"p{i % pipelines}", "run": str(i)})
    for i in range(jobs)
]
Job.objects.bulk_create(rows, batch_size=1000)
# The jobs a pipeline polls: queued jobs of the team, each with two timeline events.
polled = list(Job.objects.filter(team=team, state="queued").order_by("-id").values_list("pk", flat=True)[:targets])
JobEvent.objects.bulk_create(
    [JobEvent(job_id=pk, kind="submitted", message="Submitted.", at=now) for pk in polled]
    + [JobEvent(job_id=pk, kind="waiting", message="Waiting for a node.", at=now) for pk in polled]
)
first = dict(JobEvent.objects.filter(job_id__in=polled, kind="submitted").values_list("job_id", "pk"))
_, raw = APIToken.issue(user, "api load bench")
# A production database is vacuumed and analysed by autovacuum; a freshly seeded one is not, and autovacuum's first
# pass would land in the middle of the measured minute (and the planner would guess row counts of 1 until then).
from django.db import connection
with connection.cursor() as cursor:
    cursor.execute("VACUUM ANALYZE")
print(json.dumps({"token": raw, "targets": [[pk, first[pk]] for pk in polled]}))
"""


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def parse_mix(text: str) -> dict[str, float]:
    mix = {}
    for part in text.split(","):
        name, _, share = part.partition("=")
        name = name.strip()
        if name not in KINDS:
            raise SystemExit(f"--mix: unknown kind {name!r}; kinds: {', '.join(KINDS)}")
        mix[name] = float(share)
    total = sum(mix.values())
    if total <= 0:
        raise SystemExit("--mix: the shares add up to nothing")
    return {k: v / total for k, v in mix.items() if v > 0}


class Requests:
    """The request of each kind, in turn (targets and filters cycle, so every kind touches many rows)."""

    def __init__(self, targets: list[list[int]]):
        self.targets = targets
        self.lock = threading.Lock()
        self.n = {k: 0 for k in KINDS}

    def make(self, kind: str) -> tuple[str, str, str | None]:
        with self.lock:
            n = self.n[kind]
            self.n[kind] += 1
        job, first_event = self.targets[n % len(self.targets)]
        if kind == "detail":
            return "GET", f"/api/v1/jobs/{job}/", None
        if kind == "wait":
            return "GET", f"/api/v1/jobs/{job}/wait/?after_event={first_event}&timeout=5", None
        if kind == "ceiling":
            return "GET", "/bench/ceiling/", None
        pipeline = f"p{n % PIPELINES}"
        if kind == "list":
            return (
                "GET",
                (
                    "/api/v1/jobs/?team=bench&limit=50",
                    f"/api/v1/jobs/?team=bench&state=queued&label=pipeline={pipeline}&limit=20",
                    f"/api/v1/jobs/?state=queued&state=running&label=pipeline={pipeline}",
                )[n % 3],
                None,
            )
        body = {
            "team": "bench", "name": f"load-{n}", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
            "command": ["python", "train.py"], "resource_class": H100_CLASS, "count": 1, "cpu": 4,
            "memory_mb": 16384, "labels": {"pipeline": pipeline},
        }  # fmt: skip
        return "POST", "/api/v1/jobs/", json.dumps(body)


def send(conns: dict, port: int, headers: dict, method: str, path: str, body: str | None) -> int:
    """One request on this thread's keep-alive connection (a new one after an error or a close)."""
    for attempt in (1, 2):
        conn = conns.get("c")
        if conn is None:
            conn = conns["c"] = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            response.read()
            if response.getheader("Connection", "").lower() == "close":
                conn.close()
                conns.pop("c", None)
            return response.status
        except (OSError, http.client.HTTPException):
            conn.close()
            conns.pop("c", None)
            if attempt == 2:
                return -1
    return -1


def drive(port: int, token: str, requests: Requests, mix: dict[str, float], rate: float, seconds: float,
          threads: int) -> dict:  # fmt: skip
    """Send the planned requests at their due times (kinds interleaved evenly); latencies and errors per kind."""
    plan: list[tuple[float, str]] = []
    for kind, share in mix.items():
        kind_rate = rate * share
        plan += [((i + 0.5) / kind_rate, kind) for i in range(int(seconds * kind_rate))]
    plan.sort()
    work: queue.Queue = queue.Queue()
    for item in plan:
        work.put(item)
    results: dict = {k: {"latency": [], "late": [], "errors": 0, "statuses": {}} for k in KINDS}
    lock = threading.Lock()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    started = time.perf_counter() + 0.5

    def worker() -> None:
        conns: dict = {}
        while True:
            try:
                due, kind = work.get_nowait()
            except queue.Empty:
                break
            delay = started + due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            sent = time.perf_counter()
            status = send(conns, port, headers, *requests.make(kind))
            latency = time.perf_counter() - (started + due)
            with lock:
                r = results[kind]
                r["latency"].append(latency)
                r["late"].append(sent - (started + due))
                r["statuses"][status] = r["statuses"].get(status, 0) + 1
                if not 200 <= status < 300:
                    r["errors"] += 1
        if conns.get("c") is not None:
            conns["c"].close()

    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    results["elapsed"] = time.perf_counter() - started
    return results


def ceiling(port: int, token: str, seconds: float, threads: int) -> tuple[float, int, int]:
    """Closed loop on the bare endpoint: (requests/s answered, requests, errors)."""
    headers = {"Authorization": f"Bearer {token}"}
    stop = time.perf_counter() + seconds
    counts = {"ok": 0, "errors": 0}
    lock = threading.Lock()

    def worker() -> None:
        conns: dict = {}
        while time.perf_counter() < stop:
            status = send(conns, port, headers, "GET", "/bench/ceiling/", None)
            with lock:
                counts["ok" if status == 200 else "errors"] += 1

    start = time.perf_counter()
    pool = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    total = counts["ok"] + counts["errors"]
    return counts["ok"] / (time.perf_counter() - start), total, counts["errors"]


def server_cpu(pid: int) -> float:
    """CPU seconds (user + system) a server and every process under it (gunicorn's master and workers; nginx's
    under deploy/proxy/demo.py) have used so far (Linux /proc). Less noisy than rates on a shared machine: what
    serving cost, whatever else the cores did meanwhile."""
    tick = os.sysconf("SC_CLK_TCK")
    parents, used = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])  # fields[1]: the parent's pid
        used[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    total = 0.0
    for process, seconds in used.items():
        ancestor = process
        while ancestor not in (pid, 0, 1) and ancestor in parents:
            ancestor = parents[ancestor]
        if ancestor == pid:
            total += seconds
    return total


def wait_for(port: int, seconds: float = 60) -> None:
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


def without_options(argv: list[str], names: tuple[str, ...]) -> list[str]:
    """``argv`` less the options ``names`` and their values (``--name value`` and ``--name=value``)."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word in names:
            skip = True
        elif not word.startswith(tuple(f"{name}=" for name in names)):
            kept.append(word)
    return kept


def pairs(args) -> None:
    """Run this script on ``args.root`` and on ``args.against`` in turn, ``args.pairs`` times each (the order
    swapped every pair, so neither side always runs first), and print every run's figures, then each pair's
    ratios (this side ÷ the other) and their median: on a machine whose speed moves from minute to minute a single
    pair can land either way, the median of several is the figure to compare."""
    sides = {"this": str(Path(args.root).resolve()), "other": str(Path(args.against).resolve())}
    argv = without_options(sys.argv[1:], ("--against", "--pairs", "--root", "--summary"))
    runs: dict[str, list[dict]] = {"this": [], "other": []}
    with tempfile.TemporaryDirectory(prefix="api-load-pairs-") as scratch:
        for number in range(args.pairs):
            for side in ("this", "other") if number % 2 == 0 else ("other", "this"):
                summary = Path(scratch) / f"{side}-{number}.json"
                child = subprocess.run([PYTHON, __file__, *argv, "--root", sides[side], "--summary", str(summary)],
                                       capture_output=True, text=True, check=False)  # fmt: skip
                if child.returncode:
                    raise SystemExit(f"the run of {sides[side]} failed:\n{child.stdout}{child.stderr}")
                run = json.loads(summary.read_text())
                runs[side].append(run)
                p99 = " / ".join(f"{run['p99_ms'][kind]:.0f}" if kind in run["p99_ms"] else "–" for kind in KINDS)
                ceiling = ""
                if run["ceiling"]:
                    ceiling = f"ceiling {run['ceiling']:.0f}/s at {run['ceiling_cpu_ms']:.2f} ms, "
                print(f"pair {number + 1}, {side:5} ({sides[side]}): {ceiling}mix {run['mix_cpu_ms']:.2f} ms a "
                      f"request; p99 {p99} ms ({' / '.join(KINDS)}); errors {run['errors']}; "
                      f"target {'met' if run['met'] else 'NOT met'}", flush=True)  # fmt: skip
    figures = {"mix's CPU a request": lambda run: run["mix_cpu_ms"]}
    if all(run["ceiling"] for run in runs["this"] + runs["other"]):
        figures["ceiling's CPU a request"] = lambda run: run["ceiling_cpu_ms"]
        figures["mix ÷ ceiling (CPU a request)"] = lambda run: run["mix_cpu_ms"] / run["ceiling_cpu_ms"]
    print(f"this ÷ other, pair by pair ({args.pairs} pairs):")
    for name, figure in figures.items():
        ratios = sorted(figure(mine) / figure(theirs) for mine, theirs in zip(runs["this"], runs["other"], strict=True))
        print(f"  {name}: median {median(ratios):.2f} (from {ratios[0]:.2f} to {ratios[-1]:.2f}; "
              f"{', '.join(f'{r:.2f}' for r in ratios)})")  # fmt: skip
    for side in ("this", "other"):
        met = sum(run["met"] for run in runs[side])
        print(f"  {side}: the p99 target met in {met} of {len(runs[side])} runs")


def main() -> None:
    parser = argparse.ArgumentParser(description="API latency under a fixed pipeline-shaped request rate")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432", help="PostgreSQL server URL")
    parser.add_argument("--db", default="gpu_portal_bench_api", help="database created and dropped by the bench")
    parser.add_argument("--root", default=str(ROOT), help="the checkout to serve (default: this one)")
    parser.add_argument("--port", type=int, default=18765)
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/14", help="Celery broker ('' for the default)")
    parser.add_argument("--cache-url", default="redis://127.0.0.1:6379/15", help="CACHE_URL ('' for locmem)")
    parser.add_argument(
        "--worker-class",
        default="",
        help="gunicorn worker class (default: the served checkout's gunicorn.conf.py, production's)",
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="gunicorn workers (default: the served checkout's gunicorn.conf.py)"
    )
    parser.add_argument(
        "--worker-threads",
        type=int,
        default=0,
        help="gthread: threads per worker (default: the served checkout's gunicorn.conf.py)",
    )
    parser.add_argument("--worker-connections", type=int, default=250, help="gevent: connections a worker holds")
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        help="NAME=VALUE for the server (repeatable): e.g. DATABASE_PREPARE_THRESHOLD=0",
    )
    parser.add_argument("--rate", type=float, default=200, help="requests per second, all kinds together")
    parser.add_argument(
        "--rate-of-ceiling",
        type=float,
        default=0,
        help="drive the mix at this share of the ceiling measured first (e.g. 0.2), instead of --rate",
    )
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"shares per kind (default {DEFAULT_MIX})")
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--ceiling-seconds", type=float, default=10, help="closed-loop ceiling run first (0: none)")
    parser.add_argument("--threads", type=int, default=64, help="most requests in flight")
    parser.add_argument("--seed-jobs", type=int, default=5000, help="jobs before the run (4 in 5 the team's)")
    parser.add_argument(
        "--against",
        default="",
        help="another checkout: run this one and it in turn, --pairs times (the order swapped every pair)",
    )
    parser.add_argument("--pairs", type=int, default=4, help="with --against: how many runs of each side")
    parser.add_argument("--summary", default="", help="write the run's figures to this JSON file")
    args = parser.parse_args()
    if args.against:
        pairs(args)
        return
    if args.db in ("gpu_portal", "test_gpu_portal"):
        raise SystemExit("Use a database of the bench's own; it is dropped at the end.")
    if args.rate_of_ceiling > 0 and args.ceiling_seconds <= 0:
        raise SystemExit("--rate-of-ceiling needs the ceiling run (--ceiling-seconds above 0).")
    mix = parse_mix(args.mix)
    root = Path(args.root).resolve()
    python = root / ".venv/bin/python" if (root / ".venv/bin/python").exists() else Path(PYTHON)

    database(args.pg, args.db, "create")
    data_dir = tempfile.mkdtemp(prefix="api-load-")
    env = os.environ | {
        "DATABASE_URL": f"{args.pg}/{args.db}",
        "PORTAL_DATA_DIR": data_dir,
        "DJANGO_SETTINGS_MODULE": "api_ceiling",
        "PYTHONPATH": f"{root}{os.pathsep}{HERE}",
        "PORTAL_LOG_LEVEL": "WARNING",
        "DJANGO_DEBUG": "false",
    }
    # As production runs (deploy/20-config.yaml): Celery's broker and the shared cache on Redis, so a submission's
    # kick and every request's throttle check cost what they cost there ("" leaves the embedded defaults).
    if args.broker:
        env["CELERY_BROKER_URL"] = args.broker
    if args.cache_url:
        env["CACHE_URL"] = args.cache_url
    server = None
    try:
        seed = subprocess.run(
            [str(python), "-c", SEED, str(args.seed_jobs), H100_CLASS, str(PIPELINES), "200"],
            cwd=root, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if seed.returncode:
            raise SystemExit(f"seeding the bench database failed:\n{seed.stderr}")
        seeded = json.loads(seed.stdout.strip().splitlines()[-1])
        token, requests = seeded["token"], Requests(seeded["targets"])
        server = subprocess.Popen(
            [str(python.with_name("gunicorn")), "portal.wsgi:application", "--bind", f"127.0.0.1:{args.port}",
             *(["--worker-class", args.worker_class] if args.worker_class else []),
             *(["--workers", str(args.workers)] if args.workers else []),
             *(["--threads", str(args.worker_threads)] if args.worker_threads else []),
             "--worker-connections", str(args.worker_connections), "--log-level", "warning"],
            cwd=root, env=env | dict(item.split("=", 1) for item in args.server_env),
        )  # fmt: skip
        wait_for(args.port)
        drive(args.port, token, requests, mix, 40, 3, 16)  # warm-up: every worker imports and connects
        revision = subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s"], capture_output=True,
                                  text=True, check=False).stdout.strip()[:70]  # fmt: skip
        print(f"serving {root} ({revision})")
        conf = runpy.run_path(str(root / "gunicorn.conf.py"))
        workers, threads = args.workers or conf.get("workers"), args.worker_threads or conf.get("threads")
        per_worker = (f"{args.worker_connections} connections" if args.worker_class == "gevent"
                      else f"{threads} threads")  # fmt: skip
        worker_class = args.worker_class or conf.get("worker_class")
        print(
            f"gunicorn {worker_class}, {workers} workers × {per_worker}, PostgreSQL {args.db}; "
            f"{args.seed_jobs:,} jobs; generator: {args.threads} threads on this machine"
            + "".join(f"; {item}" for item in args.server_env)
        )
        top = top_cpu = None
        if args.ceiling_seconds > 0:
            before = server_cpu(server.pid)
            top, total, errors = ceiling(args.port, token, args.ceiling_seconds, min(args.threads, 16))
            top_cpu = (server_cpu(server.pid) - before) / max(total, 1) * 1000
            print(f"  ceiling (bare DRF view, closed loop, {args.ceiling_seconds:g} s): {top:.0f} requests/s "
                  f"({total} requests, {errors} errors), server CPU {top_cpu:.2f} ms a request")  # fmt: skip
        if args.rate_of_ceiling > 0:
            args.rate = round(top * args.rate_of_ceiling, 1)
        shares = ", ".join(f"{k} {v:.0%}" for k, v in mix.items())
        print(f"  open loop: {args.rate:g} requests/s for {args.seconds:g} s ({shares})")
        before = server_cpu(server.pid)
        out = drive(args.port, token, requests, mix, args.rate, args.seconds, args.threads)
        used = server_cpu(server.pid) - before
        served = 0
        worst = 0.0
        failures = 0
        p99s = {}
        for kind in KINDS:
            r = out[kind]
            lat = [x * 1000 for x in r["latency"]]
            if not lat:
                continue
            served += len(lat) - r["errors"]
            failures += r["errors"]
            p50, p90, p99 = (percentile(lat, p) for p in (50, 90, 99))
            worst = max(worst, p99)
            p99s[kind] = p99
            late = percentile([x * 1000 for x in r["late"]], 99)
            print(
                f"  {kind:7}: {len(lat):6} requests, {len(lat) / out['elapsed']:6.1f}/s, p50 {p50:5.0f} ms, "
                f"p90 {p90:5.0f} ms, p99 {p99:5.0f} ms, max {max(lat):5.0f} ms, errors {r['errors']} "
                f"(statuses {r['statuses']}); sent late p99 {late:.0f} ms"
            )
        rate = served / out["elapsed"]
        ratio = f", {rate / top:.0%} of the ceiling" if top else ""
        per = used / max(served + failures, 1) * 1000
        cost = f" ({per / top_cpu:.1f} × the ceiling's)" if top_cpu else ""
        print(f"  server CPU: {per:.2f} ms a request of the mix{cost}, {used / out['elapsed']:.2f} cores busy")
        verdict = "met" if worst < 50 and failures == 0 and rate >= 0.98 * args.rate else "NOT met"
        print(f"  total  : {rate:.1f} requests/s served{ratio}; worst p99 {worst:.0f} ms, errors {failures}; "
              f"target (p99 < 50 ms every kind, no errors) {verdict}")  # fmt: skip
        if args.summary:
            Path(args.summary).write_text(json.dumps({
                "ceiling": top, "ceiling_cpu_ms": top_cpu, "mix_cpu_ms": per, "p99_ms": p99s, "errors": failures,
                "met": verdict == "met",
            }))  # fmt: skip
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        database(args.pg, args.db, "drop")
        for url in (args.broker, args.cache_url):
            if url.startswith("redis://"):
                import redis  # noqa: PLC0415 - only when the bench used Redis

                redis.Redis.from_url(url).flushdb()  # the kicks no worker took, the throttle counts


if __name__ == "__main__":
    main()
