"""CPU time per API request, by kind, without a server or a load generator: the production WSGI application
(portal.wsgi, DEBUG off, bench/api_ceiling.py's settings) called in a loop in one process over PostgreSQL, seeded
the way bench/api_load.py seeds (the same SEED), with the same requests (its ``Requests``). On a shared machine
the CPU time of the process (``time.process_time``) moves far less than rates or latencies do; it is what a
request costs the web server, less gunicorn's own share (the parsing of the HTTP request, about 0.2 ms).

Per kind it prints the CPU milliseconds per request (the median of ``--rounds`` rounds of ``--requests``
requests each) and the mix's weighted average (the ``--mix`` of bench/api_load.py). ``--profile KIND`` prints a
cProfile of that kind instead, timed in CPU seconds of the process (waits on PostgreSQL cost nothing there;
cumulative, top 45; ``--callers`` adds who calls what). ``--gevent`` runs the loop under gevent's patching, as
gunicorn's gevent worker runs the application (needs gevent installed; the portal does not depend on it).
``--root`` measures another checkout (e.g. a worktree of the release before, 641ede5) with this same script.
``--against ROOT`` measures two checkouts side by side: both loops run at once, each over a database of its own
seeded by its own code, and take turns, one round of a kind each (the order swapped every round); it prints each
side's median and the median of the rounds' ratios, which on a machine whose speed moves from second to second is
the steadier figure:

    .venv/bin/python bench/api_cpu.py
    .venv/bin/python bench/api_cpu.py --profile list
    .venv/bin/python bench/api_cpu.py --root /tmp/portal-641ede5
    .venv/bin/python bench/api_cpu.py --against /tmp/portal-641ede5 --rounds 15 --requests 60
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import api_load  # noqa: E402 - bench/ is not a package on the child's path

#: Runs in the child, with the checkout's settings: a WSGI call loop, printing one JSON line.
LOOP = r"""
import json, sys
if json.loads(sys.argv[2]).get("gevent"):
    from gevent import monkey
    monkey.patch_all()  # as gunicorn's gevent worker does before it loads the application
import cProfile, io, json, pstats, sys, time
from statistics import median
import django
django.setup()
from django.core.wsgi import get_wsgi_application
sys.path.insert(0, sys.argv[1])
import api_load
app = get_wsgi_application()
args = json.loads(sys.argv[2])
requests = api_load.Requests(args["targets"])
auth = "Bearer " + args["token"]

def environ(method, path, body):
    path, _, query = path.partition("?")
    data = (body or "").encode()
    import io as _io
    return {
        "REQUEST_METHOD": method, "PATH_INFO": path, "QUERY_STRING": query, "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "8000", "SERVER_PROTOCOL": "HTTP/1.1", "REMOTE_ADDR": "127.0.0.1",
        "HTTP_HOST": "127.0.0.1", "HTTP_AUTHORIZATION": auth, "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(data)), "wsgi.input": _io.BytesIO(data), "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr, "wsgi.multithread": True, "wsgi.multiprocess": True, "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }

def call(kind):
    status = []
    body = app(environ(*requests.make(kind)), lambda s, h, e=None: status.append(s))
    b"".join(body)
    if hasattr(body, "close"):
        body.close()
    if not status[0].startswith("2"):
        raise SystemExit(f"{kind}: {status[0]}")

if args.get("serve"):
    # Side by side (--against): warm every kind up, then answer "KIND N" lines with the CPU ms a request of N calls.
    for kind in args["kinds"]:
        for _ in range(20):
            call(kind)
    print("ready", flush=True)
    for line in sys.stdin:
        kind, count = line.split()
        start = time.process_time()
        for _ in range(int(count)):
            call(kind)
        print((time.process_time() - start) / int(count) * 1000, flush=True)
    raise SystemExit(0)
out = {}
for kind in args["kinds"]:
    for _ in range(20):
        call(kind)  # warm-up
    if args["profile"] == kind:
        prof = cProfile.Profile(time.process_time)  # CPU time: the waits on PostgreSQL are not the cost
        prof.enable()
        for _ in range(args["requests"]):
            call(kind)
        prof.disable()
        text = io.StringIO()
        stats = pstats.Stats(prof, stream=text).sort_stats(args["sort"])
        stats.print_stats(args.get("filter") or "", 45)
        if args.get("callers"):
            stats.print_callers(args["callers"])
        print(text.getvalue(), file=sys.stderr)
        continue
    rounds = []
    for _ in range(args["rounds"]):
        start = time.process_time()
        for _ in range(args["requests"]):
            call(kind)
        rounds.append((time.process_time() - start) / args["requests"] * 1000)
    out[kind] = median(rounds)
print(json.dumps(out))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description="CPU milliseconds per API request, by kind (WSGI call loop)")
    parser.add_argument("--pg", default="postgres://postgres@127.0.0.1:5432", help="PostgreSQL server URL")
    parser.add_argument("--db", default="gpu_portal_bench_api_cpu", help="database created and dropped by the bench")
    parser.add_argument("--root", default=str(api_load.ROOT), help="the checkout to measure (default: this one)")
    parser.add_argument("--requests", type=int, default=200, help="requests per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--mix", default=api_load.DEFAULT_MIX, help="shares for the weighted average")
    parser.add_argument("--kinds", default=",".join(api_load.KINDS))
    parser.add_argument("--profile", default="", help="a kind to profile instead of timing")
    parser.add_argument("--sort", default="cumulative", help="cProfile sort key (cumulative, tottime)")
    parser.add_argument("--filter", default="", help="a regular expression the profile's file names match")
    parser.add_argument(
        "--gevent",
        action="store_true",
        help="run the loop under gevent's monkey-patching "
        "(what gunicorn's gevent worker does): cooperative database waits and the connection pool",
    )
    parser.add_argument("--callers", default="", help="with --profile: also who calls the functions matching this")
    parser.add_argument("--seed-jobs", type=int, default=5000)
    parser.add_argument(
        "--against",
        default="",
        help="another checkout to measure side by side: both loops run at once (each over a database of its own), "
        "a round of each kind on one, then on the other, the order swapped every round; prints each side's median "
        "and the median of the rounds' ratios",
    )
    args = parser.parse_args()
    if args.db in ("gpu_portal", "test_gpu_portal"):
        raise SystemExit("Use a database of the bench's own; it is dropped at the end.")
    kinds = [k for k in args.kinds.split(",") if k]
    mix = api_load.parse_mix(args.mix)
    if args.against:
        side_by_side(args, kinds, mix)
        return
    root = Path(args.root).resolve()
    api_load.database(args.pg, args.db, "create")
    try:
        python, env, payload = prepare(args, root, args.db, kinds)
        run = subprocess.run(
            [str(python), "-c", LOOP, str(HERE), json.dumps(payload)],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if run.returncode:
            raise SystemExit(f"the request loop failed:\n{run.stderr[-4000:]}")
        if args.profile:
            print(run.stderr)
        per = json.loads(run.stdout.strip().splitlines()[-1])
        print(f"{root} ({revision(root)}); {args.seed_jobs:,} jobs, PostgreSQL, DEBUG off, WSGI call loop")
        for kind, ms in per.items():
            print(f"  {kind:7}: {ms:6.2f} ms CPU a request (median of {args.rounds} × {args.requests})")
        if all(k in per for k in mix):
            print(f"  mix    : {sum(per[k] * share for k, share in mix.items()):6.2f} ms CPU a request ({args.mix})")
    finally:
        api_load.database(args.pg, args.db, "drop")


def revision(root: Path) -> str:
    return subprocess.run(["git", "-C", str(root), "log", "-1", "--format=%h %s"], capture_output=True, text=True,
                          check=False).stdout.strip()[:70]  # fmt: skip


def prepare(args, root: Path, db: str, kinds: list[str]) -> tuple[Path, dict, dict]:
    """Seed ``db`` (already created) with ``root``'s code; the loop's interpreter, environment and payload."""
    python = root / ".venv/bin/python" if (root / ".venv/bin/python").exists() else Path(sys.executable)
    env = os.environ | {
        "DATABASE_URL": f"{args.pg}/{db}",
        "PORTAL_DATA_DIR": tempfile.mkdtemp(prefix="api-cpu-"),
        "DJANGO_SETTINGS_MODULE": "api_ceiling",
        "PYTHONPATH": f"{root}{os.pathsep}{HERE}",
        "PORTAL_LOG_LEVEL": "WARNING",
        "DJANGO_DEBUG": "false",
    }
    seed = subprocess.run(
        [str(python), "-c", api_load.SEED, str(args.seed_jobs), api_load.H100_CLASS, str(api_load.PIPELINES), "200"],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if seed.returncode:
        raise SystemExit(f"seeding the bench database failed:\n{seed.stderr}")
    seeded = json.loads(seed.stdout.strip().splitlines()[-1])
    payload = seeded | {"kinds": kinds, "requests": args.requests, "rounds": args.rounds,
                        "profile": args.profile, "sort": args.sort,
                        "filter": args.filter, "callers": args.callers, "gevent": args.gevent}  # fmt: skip
    return python, env, payload


def side_by_side(args, kinds: list[str], mix: dict[str, float]) -> None:
    """Both checkouts' loops at once, one round at a time each: on a machine whose speed moves from one second to
    the next, the ratio of two rounds taken within a second of each other moves far less than either round."""
    roots = [Path(args.root).resolve(), Path(args.against).resolve()]
    dbs = [args.db, f"{args.db}_against"]
    loops = []
    try:
        for root, db in zip(roots, dbs, strict=True):
            api_load.database(args.pg, db, "create")
            python, env, payload = prepare(args, root, db, kinds)
            loop = subprocess.Popen(
                [str(python), "-c", LOOP, str(HERE), json.dumps(payload | {"serve": True})],
                cwd=root, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            if loop.stdout.readline().strip() != "ready":
                raise SystemExit(f"{root}: the request loop did not start")
            loops.append(loop)
        taken = {kind: ([], []) for kind in kinds}
        for number in range(args.rounds):
            for kind in kinds:
                order = (0, 1) if number % 2 == 0 else (1, 0)
                for side in order:
                    loops[side].stdin.write(f"{kind} {args.requests}\n")
                    loops[side].stdin.flush()
                    taken[kind][side].append(float(loops[side].stdout.readline()))
        print(f"this: {roots[0]} ({revision(roots[0])})\nagainst: {roots[1]} ({revision(roots[1])})")
        print(f"{args.seed_jobs:,} jobs each, PostgreSQL, DEBUG off, WSGI call loops; {args.rounds} rounds of "
              f"{args.requests} requests a kind a side, ms of CPU a request (medians)")  # fmt: skip
        medians = {}
        for kind, (this, other) in taken.items():
            ratios = [a / b for a, b in zip(this, other, strict=True)]
            medians[kind] = (median(this), median(other))
            print(f"  {kind:7}: this {median(this):6.2f}  against {median(other):6.2f}  this ÷ against "
                  f"{median(ratios):.2f} (rounds {min(ratios):.2f}–{max(ratios):.2f})")  # fmt: skip
        if all(k in medians for k in mix):
            this = sum(medians[k][0] * share for k, share in mix.items())
            other = sum(medians[k][1] * share for k, share in mix.items())
            print(f"  mix    : this {this:6.2f}  against {other:6.2f}  this ÷ against {this / other:.2f} ({args.mix})")
    finally:
        for loop in loops:
            loop.stdin.close()
            loop.wait()
        for db in dbs:
            api_load.database(args.pg, db, "drop")


if __name__ == "__main__":
    main()
