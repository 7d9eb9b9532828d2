"""The API's latency with and without many event streams held open by one identity (issue 30): production's layout on
loopback, the way docker-compose.yml and `make demo` run it. nginx (deploy/proxy/portal.conf.template, started by
deploy/proxy/demo.py) sends long-polls and event streams to the stream server (gunicorn gthread, many threads, as
deploy/35-streams.yaml) and the rest to web (gunicorn with production's flags and gunicorn.conf.py), over PostgreSQL,
with Celery's broker and the shared cache on Redis. The load is bench/api_load.py's (its seed, its request mix and its
open-loop generator, imported from it), sent to the proxy, so the mix's long-polls go where production sends them.

One sitting, runs of the same mix at the same rate: without streams, with ``--streams`` team event streams (GET
/api/v1/teams/bench/events/stream/) held open by the bench's one user, and without them again, ``--pairs`` times
(default 1: three runs), each from the same database (the jobs the run before submitted are deleted first). Each run
with streams is compared with the mean of the runs without just before and after it, so the machine's drift in
between counts on both sides; over several pairs the verdict takes each kind's median ratio. Beside the mix,
/healthz is asked every 0.2 s on a connection of its own. The rate is ``--share`` of the ceiling measured first (a
bare DRF view, closed loop, through the proxy) unless ``--rate`` names one. Each run prints the CPU the web server,
the stream server and the proxy used (cores busy, from /proc), which a shared machine moves less than latencies.
The stream server's cap per identity (PORTAL_STREAMS_PER_IDENTITY) is raised above
``--streams`` plus ``--threads`` for the run (the mix's long-polls, by the same user, count too), so every
stream is really held and the mix is never refused; each stream-server process reads the new timeline events once
every PORTAL_WAIT_POLL_SECONDS (1 s) for all its streams (jobs.eventstream.RECENT), and each stream sends its
team's from there.

Needs nginx (`make demo` installs it), PostgreSQL and Redis on loopback. It creates its own database and drops it:

    .venv/bin/python bench/streams_beside_load.py --streams 200 --seconds 30
    .venv/bin/python bench/streams_beside_load.py --streams 200 --seconds 20 --pairs 3
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median

from api_load import (
    DEFAULT_MIX,
    H100_CLASS,
    KINDS,
    PIPELINES,
    SEED,
    Requests,
    ceiling,
    database,
    drive,
    parse_mix,
    percentile,
    server_cpu,
    wait_for,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class HealthProbe:
    """GET /healthz every ``interval`` seconds on one connection; the latencies (ms) and the failures."""

    def __init__(self, port: int, interval: float = 0.2):
        self.port, self.interval = port, interval
        self.latencies: list[float] = []
        self.failures = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join(30)

    def _run(self) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        while not self._done.wait(self.interval):
            start = time.perf_counter()
            try:
                conn.request("GET", "/healthz")
                response = conn.getresponse()
                response.read()
                ok = response.status == 200
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                ok = False
            self.latencies.append((time.perf_counter() - start) * 1000)
            self.failures += not ok
        conn.close()


def open_streams(port: int, token: str, count: int) -> list[http.client.HTTPConnection]:
    """``count`` team event streams, each open once its first bytes arrived."""
    held = []
    for _ in range(count):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/api/v1/teams/bench/events/stream/",
                     headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"})  # fmt: skip
        response = conn.getresponse()
        if response.status != 200:
            raise SystemExit(f"stream {len(held) + 1} was answered {response.status}: {response.read()[:300]!r}")
        response.read1(64)
        held.append(conn)
    return held


#: Runs in a child with the bench's settings: deletes the jobs a run submitted (and, through the ORM, what hangs on
#: them), so every run starts from the same database: each submission adds a queued job that the pipelines' lists of
#: queued jobs then read, so without this every run read longer pages than the one before. VACUUM ANALYZE then, as
#: after seeding: the deleted rows would otherwise still be read until autovacuum came by.
RESET = r"""
import django, sys
django.setup()
from django.db import connection
from jobs.models import Job
Job.objects.filter(pk__gt=int(sys.argv[1])).delete()
with connection.cursor() as cursor:
    cursor.execute("VACUUM ANALYZE")
"""


def newest_job(url: str) -> int:
    import psycopg  # noqa: PLC0415 - the bench runs on PostgreSQL

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT coalesce(max(id), 0) FROM jobs_job").fetchone()[0]


def summary(out: dict) -> dict[str, dict]:
    rows = {}
    for kind in KINDS:
        r = out[kind]
        lat = [x * 1000 for x in r["latency"]]
        if lat:
            rows[kind] = {"n": len(lat), "p50": percentile(lat, 50), "p99": percentile(lat, 99), "errors": r["errors"]}
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description="API latency with and without event streams held open beside it")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432", help="PostgreSQL server URL")
    parser.add_argument("--db", default="gpu_portal_bench_streams", help="database created and dropped by the bench")
    parser.add_argument("--port", type=int, default=24780, help="the proxy's port; web and streams take the next two")
    parser.add_argument("--broker", default="redis://127.0.0.1:6379/12", help="Celery broker ('' for the default)")
    parser.add_argument("--cache-url", default="redis://127.0.0.1:6379/13", help="CACHE_URL ('' for locmem)")
    parser.add_argument("--workers", type=int, default=0, help="web: gunicorn workers (default: gunicorn.conf.py's)")
    parser.add_argument(
        "--worker-threads", type=int, default=0, help="web: threads per worker (default: gunicorn.conf.py's)"
    )
    parser.add_argument("--stream-workers", type=int, default=2, help="streams: workers (deploy/35-streams.yaml: 2)")
    parser.add_argument("--stream-threads", type=int, default=128, help="streams: threads per worker (128)")
    parser.add_argument("--streams", type=int, default=200, help="event streams held open by the one identity")
    parser.add_argument("--rate", type=float, default=0, help="requests per second (0: --share of the ceiling)")
    parser.add_argument("--share", type=float, default=0.2, help="the rate as a share of the measured ceiling")
    parser.add_argument("--mix", default=DEFAULT_MIX, help=f"shares per kind (default {DEFAULT_MIX})")
    parser.add_argument("--seconds", type=float, default=30, help="length of each run")
    parser.add_argument(
        "--pairs", type=int, default=1, help="runs with streams, each between two without (2 × pairs + 1 runs)"
    )
    parser.add_argument("--ceiling-seconds", type=float, default=8)
    parser.add_argument("--threads", type=int, default=64, help="most requests in flight")
    parser.add_argument("--seed-jobs", type=int, default=5000, help="jobs before the run (4 in 5 the team's)")
    args = parser.parse_args()
    if args.db in ("gpu_portal", "test_gpu_portal"):
        raise SystemExit("Use a database of the bench's own; it is dropped at the end.")
    mix = parse_mix(args.mix)
    python = Path(sys.executable)
    web_port, streams_port = args.port + 1, args.port + 2

    database(args.pg, args.db, "create")
    data_dir = tempfile.mkdtemp(prefix="streams-load-")
    env = os.environ | {
        "DATABASE_URL": f"{args.pg}/{args.db}",
        "PORTAL_DATA_DIR": data_dir,
        "DJANGO_SETTINGS_MODULE": "api_ceiling",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{HERE}",
        "PORTAL_LOG_LEVEL": "WARNING",
        "DJANGO_DEBUG": "false",
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if args.broker:
        env["CELERY_BROKER_URL"] = args.broker
    if args.cache_url:
        env["CACHE_URL"] = args.cache_url
    processes: list[subprocess.Popen] = []
    held: list[http.client.HTTPConnection] = []
    try:
        seed = subprocess.run(
            [str(python), "-c", SEED, str(args.seed_jobs), H100_CLASS, str(PIPELINES), "200"],
            cwd=ROOT, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if seed.returncode:
            raise SystemExit(f"seeding the bench database failed:\n{seed.stderr}")
        seeded = json.loads(seed.stdout.strip().splitlines()[-1])
        token, requests = seeded["token"], Requests(seeded["targets"])
        gunicorn = str(python.with_name("gunicorn"))
        processes.append(subprocess.Popen(
            [gunicorn, "portal.wsgi:application", "--bind", f"127.0.0.1:{web_port}",
             *(["--workers", str(args.workers)] if args.workers else []),
             *(["--threads", str(args.worker_threads)] if args.worker_threads else []), "--log-level", "warning"],
            cwd=ROOT, env=env,
        ))  # fmt: skip
        processes.append(subprocess.Popen(
            [gunicorn, "portal.wsgi:application", "--bind", f"127.0.0.1:{streams_port}", "--workers",
             str(args.stream_workers), "--threads", str(args.stream_threads), "--worker-class", "gthread",
             "--log-level", "warning"],
            cwd=ROOT,
            env=env | {"DATABASE_POOL_MAX": "16", "PORTAL_STREAMS_PER_IDENTITY": str(args.streams + args.threads)},
        ))  # fmt: skip
        processes.append(subprocess.Popen(
            [str(python), str(ROOT / "deploy/proxy/demo.py")], cwd=ROOT,
            env=env | {"PORTAL_PORT": str(args.port), "PORTAL_WEB_PORT": str(web_port),
                       "PORTAL_STREAMS_PORT": str(streams_port)},
        ))  # fmt: skip
        for port in (web_port, streams_port, args.port):
            wait_for(port)
        time.sleep(1)
        if any(proc.poll() is not None for proc in processes):  # another program held one of the ports
            raise SystemExit(f"a server did not start (ports {args.port}-{streams_port} in use?)")
        drive(args.port, token, requests, mix, 40, 3, 16)  # warm-up: every worker imports and connects
        revision = subprocess.run(["git", "-C", str(ROOT), "log", "-1", "--format=%h %s"], capture_output=True,
                                  text=True, check=False).stdout.strip()[:70]  # fmt: skip
        print(f"serving {ROOT} ({revision})")
        conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
        workers, threads = args.workers or conf["workers"], args.worker_threads or conf["threads"]
        print(f"nginx → web: gunicorn {workers} workers × {threads} threads (gunicorn.conf.py); "
              f"streams: gthread {args.stream_workers} × {args.stream_threads}; PostgreSQL {args.db}, Redis; "
              f"{args.seed_jobs:,} jobs; generator: {args.threads} threads on this machine")  # fmt: skip
        rate = args.rate
        if args.ceiling_seconds > 0:
            top, total, errors = ceiling(args.port, token, args.ceiling_seconds, min(args.threads, 16))
            print(f"  ceiling (bare DRF view through the proxy, closed loop, {args.ceiling_seconds:g} s): "
                  f"{top:.0f} requests/s ({total} requests, {errors} errors)")  # fmt: skip
            rate = rate or round(top * args.share, 1)
        if not rate:
            raise SystemExit("--rate 0 needs a ceiling run (--ceiling-seconds above 0)")
        print(f"  open loop: {rate:g} requests/s for {args.seconds:g} s a run "
              f"({', '.join(f'{k} {v:.0%}' for k, v in mix.items())})")  # fmt: skip

        withouts: list[tuple[dict, HealthProbe]] = []
        withs: list[tuple[dict, HealthProbe]] = []
        seeded_upto = newest_job(env["DATABASE_URL"])
        for number in range(2 * args.pairs + 1):
            streaming = number % 2 == 1
            name = f"{'with' if streaming else 'without'} {number // 2 + 1}"
            reset = subprocess.run([str(python), "-c", RESET, str(seeded_upto)], cwd=ROOT, env=env,
                                   capture_output=True, text=True, check=False)  # fmt: skip
            if reset.returncode:
                raise SystemExit(f"resetting the bench database failed:\n{reset.stderr}")
            if streaming:
                started = time.perf_counter()
                held = open_streams(args.port, token, args.streams)
                print(f"  {len(held)} event streams open (one identity) in {time.perf_counter() - started:.1f} s")
            before = [server_cpu(proc.pid) for proc in processes]
            with HealthProbe(args.port) as probe:
                out = drive(args.port, token, requests, mix, rate, args.seconds, args.threads)
            busy = [
                (server_cpu(proc.pid) - used) / out["elapsed"] for proc, used in zip(processes, before, strict=True)
            ]
            print(f"  run {name:10}: server CPU, cores busy: web {busy[0]:.2f}, streams {busy[1]:.2f}, "
                  f"proxy {busy[2]:.2f}")  # fmt: skip
            (withs if streaming else withouts).append((summary(out), probe))
            if streaming:
                for conn in held:
                    conn.close()
                held = []
                time.sleep(2)

        # Each run with streams against the mean of the runs without just before and after it (the machine's drift
        # in between shows as the two differing); over --pairs, the median of those ratios.
        print(f"  {'kind':8} {'p99 without (ms)':>22} {'p99 with (ms)':>18} {'with ÷ around it':>24}  median  errors")
        worst = 0.0
        failures = 0
        for kind in KINDS:
            without = [run[0].get(kind) for run in withouts]
            with_ = [run[0].get(kind) for run in withs]
            if not all(without + with_):
                continue
            ratios = [row["p99"] / ((without[i]["p99"] + without[i + 1]["p99"]) / 2) for i, row in enumerate(with_)]
            middle = median(ratios)
            worst = max(worst, middle)
            errors = sum(r["errors"] for r in without + with_)
            failures += errors
            row = (
                f"  {kind:8} {' '.join(str(round(r['p99'])) for r in without):>22} "
                f"{' '.join(str(round(r['p99'])) for r in with_):>18} "
                f"{' '.join(f'{x:.2f}×' for x in ratios):>24} {middle:6.2f}×  {errors}"
            )
            print(row)
        for label, group in (("without", withouts), ("with", withs)):
            lat = [ms for _, probe in group for ms in probe.latencies]
            print(f"  /healthz {label:8}: {len(lat)} probes, p50 {percentile(lat, 50):.0f} ms, "
                  f"p99 {percentile(lat, 99):.0f} ms, max {max(lat, default=float('nan')):.0f} ms, "
                  f"failures {sum(probe.failures for _, probe in group)}")  # fmt: skip
        health = max((ms for _, probe in withs for ms in probe.latencies), default=float("nan"))
        verdict = "met" if worst <= 1.2 and health < 100 and failures == 0 else "NOT met"
        print(f"  target (every kind's p99 with streams within 1.2× of without, /healthz under 100 ms, no errors): "
              f"{verdict} (worst kind's median {worst:.2f}×, /healthz max with streams {health:.0f} ms)")  # fmt: skip
    finally:
        for conn in held:
            conn.close()
        for proc in reversed(processes):
            proc.terminate()
            proc.wait(timeout=30)
        database(args.pg, args.db, "drop")
        for url in (args.broker, args.cache_url):
            if url.startswith("redis://"):
                import redis  # noqa: PLC0415 - only when the bench used Redis

                redis.Redis.from_url(url).flushdb()


if __name__ == "__main__":
    main()
