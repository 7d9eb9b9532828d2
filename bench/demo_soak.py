"""A soak of `make demo` (issue 31, item 10): does the embedded default stay up for hours under a newcomer's kind of
use? It starts `make demo` on its own port and data folder, signs in as the demo's alice (lead of vision) and admin,
issues each a token over the API, and then, for ``--seconds``, drives a scripted workload over HTTP through the
demo's proxy: alice submits jobs and cancels some, launches notebooks and stops them, creates services and stops
them, and reads her lists; admin previews carves (time-slicing on an A10 node) and carves the MIG node back and forth
between two GPU Operator presets. Every ``--check-every`` seconds it checks that each of the demo's processes is
up (the process deploy/keep_running.py keeps running, and for web, streams and the proxy that they answer) and prints
one progress line. At the end it prints a summary (requests by kind and answer, errors, restarts, processes up at the
end), stops the demo with Ctrl-C's signal and says whether it stopped without honcho's SIGKILL.

An error is an answer the workload did not expect: a 5xx, a refused or reset connection, a timeout. A 4xx the
portal explains (a quota, a node already being carved) is counted by its code, not as an error.

    .venv/bin/python bench/demo_soak.py --seconds 7200 --port 18200

The demo's log is ``<data dir>/demo.log`` (the data dir is printed first; ``--data-dir`` picks one).
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
MIG_1G = "nvidia.com/mig-1g.10gb@NVIDIA-A100-SXM4-80GB"
MIG_NODE, A10_NODE = "gpu-a100-mig-01", "gpu-a10-01"
MIG_PRESETS = ("all-1g.10gb", "all-balanced")
PROCESSES = ("proxy", "web", "streams", "worker", "worker-side", "beat")


class Portal:
    """One signed-in identity with an API token, counting every request by kind and answer."""

    def __init__(self, base: str, tally: collections.Counter, errors: list[str]):
        self.base, self.tally, self.errors = base, tally, errors
        self.http = requests.Session()

    def sign_in(self, username: str, password: str) -> None:
        page = self.http.get(f"{self.base}/login/", timeout=30).text
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        answer = self.http.post(
            f"{self.base}/login/",
            data={"username": username, "password": password, "csrfmiddlewaretoken": csrf},
            headers={"Referer": f"{self.base}/login/"},
            timeout=30,
        )
        answer.raise_for_status()
        issued = self.http.post(
            f"{self.base}/api/v1/tokens/",
            json={"name": f"soak {time.time():.0f}", "days": 2, "scope": "manage"},
            headers={"X-CSRFToken": self.http.cookies["csrftoken"], "Referer": f"{self.base}/"},
            timeout=30,
        )
        issued.raise_for_status()
        self.http.headers["Authorization"] = f"Bearer {issued.json()['token']}"

    def call(self, kind: str, method: str, path: str, **kwargs) -> requests.Response | None:
        try:
            answer = self.http.request(method, f"{self.base}{path}", timeout=60, **kwargs)
        except requests.RequestException as exc:
            self.tally[(kind, "error")] += 1
            self.errors.append(f"{time.strftime('%H:%M:%S')} {kind} {method} {path}: {exc}")
            return None
        self.tally[(kind, answer.status_code)] += 1
        if answer.status_code >= 500:
            self.errors.append(f"{time.strftime('%H:%M:%S')} {kind} {method} {path}: {answer.status_code}")
        return answer


class Workload:
    """alice's and admin's scripted use of the demo, one step at a time."""

    def __init__(self, alice: Portal, admin: Portal, rng: random.Random):
        self.alice, self.admin, self.rng = alice, admin, rng
        self.jobs: list[int] = []
        self.notebooks: list[int] = []
        self.services: list[int] = []
        self.serial = 0
        self.mig_preset = 0

    def created(self, answer: requests.Response | None, into: list[int]) -> None:
        if answer is not None and answer.status_code == 201:
            into.append(answer.json()["id"])

    def step(self) -> None:
        self.serial += 1
        n = self.serial
        kind = self.rng.choices(
            ["submit", "cancel", "notebook", "notebook-stop", "service", "service-stop", "read", "carve-preview",
             "carve"],
            weights=[6, 3, 1, 1, 1, 1, 6, 1, 0.2],
        )[0]  # fmt: skip
        if kind == "submit":
            body = {
                "team": "vision", "name": f"soak-{n}", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                "command": ["sleep", str(self.rng.choice([30, 90, 300]))], "resource_class": H100,
                "count": self.rng.choice([1, 1, 2]), "cpu": 2, "memory_mb": 8192,
            }  # fmt: skip
            self.created(self.alice.call(kind, "POST", "/api/v1/jobs/", json=body), self.jobs)
        elif kind == "cancel" and self.jobs:
            self.alice.call(kind, "POST", f"/api/v1/jobs/{self.jobs.pop(self.rng.randrange(len(self.jobs)))}/cancel/")
        elif kind == "notebook" and len(self.notebooks) < 2:
            body = {"team": "vision", "name": f"nb-{n}", "resource_class": MIG_1G, "cpu": 2, "memory_mb": 8192}
            self.created(self.alice.call(kind, "POST", "/api/v1/notebooks/", json=body), self.notebooks)
        elif kind == "notebook-stop" and self.notebooks:
            self.alice.call(kind, "POST", f"/api/v1/notebooks/{self.notebooks.pop(0)}/stop/")
        elif kind == "service" and len(self.services) < 2:
            body = {
                "team": "vision", "name": f"svc-{n}", "image": "vllm/vllm-openai:v0.4.0", "command": ["python", "s.py"],
                "resource_class": H100, "count": 1, "port": 8000, "min_replicas": 1, "max_replicas": 2,
            }  # fmt: skip
            self.created(self.alice.call(kind, "POST", "/api/v1/services/", json=body), self.services)
        elif kind == "service-stop" and self.services:
            self.alice.call(kind, "DELETE", f"/api/v1/services/{self.services.pop(0)}/")
        elif kind == "carve-preview":
            body = {"node": A10_NODE, "kind": "time-slicing", "replicas": self.rng.choice([2, 4, 8]), "dry_run": True}
            self.admin.call(kind, "POST", "/api/v1/node-config-operations/", json=body)
        elif kind == "carve":
            self.mig_preset = 1 - self.mig_preset
            body = {"node": MIG_NODE, "kind": "mig", "preset": MIG_PRESETS[self.mig_preset]}
            self.admin.call(kind, "POST", "/api/v1/node-config-operations/", json=body)
        else:
            path = self.rng.choice(["/api/v1/jobs/?limit=20", "/api/v1/notebooks/", "/api/v1/services/", "/"])
            self.alice.call("read", "GET", path)


def demo_processes(data_dir: Path) -> dict[str, tuple[int, int | None]]:
    """This demo's processes by name: (pid of what keeps it running, pid of the command it runs or None)."""
    keepers, parents = {}, {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            stat = (entry / "stat").read_text()
            environ = (entry / "environ").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
        if f"PORTAL_DATA_DIR={data_dir}" in environ and "deploy/keep_running.py" in argv:
            keepers[argv[argv.index("deploy/keep_running.py") + 1]] = int(entry.name)
    children = {ppid: pid for pid, ppid in parents.items()}
    return {name: (pid, children.get(pid)) for name, pid in keepers.items()}


def answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=10).status_code == 200
    except requests.RequestException:
        return False


def check(data_dir: Path, port: int) -> dict[str, bool]:
    """Which of the demo's processes are up: running, and for the servers answering /healthz on their own port."""
    found = demo_processes(data_dir)
    up = {name: name in found and found[name][1] is not None for name in PROCESSES}
    up["proxy"] = up["proxy"] and answers(f"http://127.0.0.1:{port}/healthz")
    up["web"] = up["web"] and answers(f"http://127.0.0.1:{port + 1}/healthz")
    up["streams"] = up["streams"] and answers(f"http://127.0.0.1:{port + 2}/healthz")
    return up


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, required=True, help="how long to drive the workload")
    parser.add_argument("--port", type=int, default=18200, help="the demo's PORT (it also uses the next two)")
    parser.add_argument("--data-dir", type=Path, help="the demo's PORTAL_DATA_DIR (default: a new temporary one)")
    parser.add_argument("--check-every", type=float, default=30.0, help="seconds between process checks")
    parser.add_argument("--pace", type=float, default=2.0, help="mean seconds between workload steps")
    parser.add_argument("--seed", type=int, default=31)
    args = parser.parse_args()
    data_dir = (args.data_dir or Path(tempfile.mkdtemp(prefix="demo-soak-"))).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "demo.log"
    print(f"demo_soak: data dir {data_dir}, log {log_path}, port {args.port}, {args.seconds:.0f} s", flush=True)

    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CI")}
    env["PORTAL_DATA_DIR"] = str(data_dir)
    with open(log_path, "w") as log:
        demo = subprocess.Popen(
            ["make", "demo", f"PORT={args.port}"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{args.port}"
    began = time.monotonic()
    while not answers(f"{base}/healthz"):
        if demo.poll() is not None or time.monotonic() - began > 1200:
            print(f"demo_soak: `make demo` did not come up:\n{log_path.read_text()[-3000:]}", flush=True)
            return 1
        time.sleep(1)
    print(f"demo_soak: up after {time.monotonic() - began:.0f} s", flush=True)

    tally: collections.Counter = collections.Counter()
    errors: list[str] = []
    passwords = dict(line.split(" ", 1) for line in (data_dir / "demo-credentials.txt").read_text().splitlines())
    alice, admin = Portal(base, tally, errors), Portal(base, tally, errors)
    alice.sign_in("alice", passwords["alice"])
    admin.sign_in("admin", passwords["admin"])
    workload = Workload(alice, admin, random.Random(args.seed))

    checks, down_seen = 0, collections.Counter()
    seen_pids: dict[str, set[int]] = collections.defaultdict(set)
    up: dict[str, bool] = {}
    start = time.monotonic()
    next_check = start
    try:
        while True:
            now = time.monotonic()
            if now >= next_check:
                up = check(data_dir, args.port)
                checks += 1
                for name, (_, child) in demo_processes(data_dir).items():
                    if child is not None:
                        seen_pids[name].add(child)
                for name, is_up in up.items():
                    down_seen[name] += not is_up
                restarts = log_path.read_text(errors="replace").count("keep_running: ")
                print(
                    f"demo_soak: {now - start:6.0f} s  up: {sum(up.values())}/{len(up)} "
                    f"{' '.join(n for n, u in up.items() if not u) or 'all'}{'' if all(up.values()) else ' down'}  "
                    f"requests: {sum(tally.values())}  errors: {len(errors)}  restarts: {restarts}",
                    flush=True,
                )
                next_check = now + args.check_every
                if demo.poll() is not None:
                    print(f"demo_soak: `make demo` exited with {demo.returncode}", flush=True)
                    break
            if now - start >= args.seconds:
                break
            workload.step()
            time.sleep(workload.rng.expovariate(1 / args.pace))
    finally:
        up = check(data_dir, args.port) if demo.poll() is None else dict.fromkeys(PROCESSES, False)
        output = log_path.read_text(errors="replace")
        stop_began = time.monotonic()
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGINT)
            try:
                demo.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(demo.pid, signal.SIGKILL)
        stopped_in = time.monotonic() - stop_began
        stop_log = log_path.read_text(errors="replace")[len(output) :]

    print(f"\ndemo_soak summary ({time.monotonic() - start:.0f} s of workload, {checks} process checks)")
    print("requests by kind and answer:")
    for (kind, code), count in sorted(tally.items(), key=lambda item: (item[0][0], str(item[0][1]))):
        print(f"  {kind:<14} {code!s:<6} {count}")
    print(f"errors (5xx, refused or reset connections, timeouts): {len(errors)}")
    for line in errors[:20]:
        print(f"  {line}")
    print(f"restarts (deploy/keep_running.py): {output.count('keep_running: ')}")
    for line in re.findall(r"^.*keep_running: .*$", output, flags=re.M)[:20]:
        print(f"  {line}")
    print("pids seen per process (a restart shows as a new one): " + ", ".join(
        f"{name} {len(seen_pids[name])}" for name in PROCESSES))  # fmt: skip
    print("checks a process was down: " + ", ".join(f"{name} {down_seen[name]}" for name in PROCESSES))
    print(f"processes up at the end: {sum(up.values())}/{len(PROCESSES)} " + " ".join(
        f"{name}={'up' if is_up else 'DOWN'}" for name, is_up in up.items()))  # fmt: skip
    print(f"Ctrl-C: stopped in {stopped_in:.1f} s, honcho SIGKILL needed: {'SIGKILL' in stop_log}")
    return 0 if all(up.values()) and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
