"""Real Celery worker and beat processes, a real gunicorn serving the portal, and a real redis-server, that tests
start, kill and restart, and the wait for what they do (wait_for).

Each process runs in a session of its own, so a kill reaches it and its children and nothing else.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from django.conf import settings

from .conftest import REPO

#: Run by ``python -c`` instead of ``celery``: the same worker, with the simulated cluster answering each create
#: 0.5 s late (after it has created the object), so a kill lands between "the cluster made it" and "the portal
#: wrote down that it did", the window a crash must not turn into a duplicate or a lost workload.
SLOW_CREATES = """
import sys, time
from cluster.sim import SimulatedCluster
created = SimulatedCluster.create_workload
def create_then_stall(self, manifest):
    made = created(self, manifest)
    time.sleep(0.5)
    return made
SimulatedCluster.create_workload = create_then_stall
from celery.__main__ import main
sys.argv = ["celery", *sys.argv[1:]]
main()
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(args: list[str], env: dict[str, str], log: Path, *, slow_creates: bool = False) -> subprocess.Popen:
    command = [sys.executable, "-c", SLOW_CREATES, *args] if slow_creates else [sys.executable, "-m", "celery", *args]
    with open(log, "a") as out:
        return subprocess.Popen(
            command, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def start_worker(env: dict[str, str], log: Path, *, slow_creates: bool = False) -> subprocess.Popen:
    """One worker on every queue (the control loop's, webhooks', background's): these tests are about the cycle
    surviving crashes, not about which process runs what (tests/unit/test_worker_queues.py)."""
    queues = [settings.PORTAL_CONTROL_QUEUE, settings.PORTAL_WEBHOOK_QUEUE, settings.PORTAL_BACKGROUND_QUEUE]
    args = ["-A", "portal", "worker", "--pool", "solo", "-Q", ",".join(queues), "--loglevel", "info",
            "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip
    proc = start(args, env, log, slow_creates=slow_creates)
    wait_for_line(proc, log, "ready.")
    return proc


def start_beat(env: dict[str, str], log: Path, schedule: Path) -> subprocess.Popen:
    return start(["-A", "portal", "beat", "--loglevel", "info", "--schedule", str(schedule)], env, log)


def wait_for_line(proc: subprocess.Popen, log: Path, line: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while line not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc, signal.SIGKILL)
            pytest.fail(f"{' '.join(map(str, proc.args[:4]))} did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM) -> None:
    """Signal the process's session (the process and its children), then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


def wait_until_up(proc: subprocess.Popen, answers, seconds: float, interval: float, failure) -> None:
    """Until ``answers()`` is true (an OSError counts as not yet); if the process exits first or ``seconds`` pass,
    kill it and fail the test with ``failure()``."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            if answers():
                return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc, signal.SIGKILL)
            pytest.fail(failure())
        time.sleep(interval)


def start_gunicorn(
    env: dict[str, str], log: Path, *, workers: int, threads: int, ready=None
) -> tuple[subprocess.Popen, str]:
    """gunicorn serving the portal from the checkout (so with its gunicorn.conf.py) on a free port: the process
    and its base URL, once /healthz answers and ``ready()`` (if given) is true."""
    port = free_port()
    with open(log, "w") as out:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "portal.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", str(workers), "--threads", str(threads)],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        urllib.request.urlopen(f"{base}/healthz", timeout=5).read()
        return ready is None or ready(server)

    wait_until_up(server, answers, 60, 0.2, lambda: f"gunicorn did not start:\n{log.read_text()[-3000:]}")
    return server, base


def redis_server_binary() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        reason = "redis-server is not installed (Debian's redis-server package)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    return binary


def start_redis(port: int, workdir: Path) -> subprocess.Popen:
    proc = subprocess.Popen(
        [redis_server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip

    def answers() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")

    wait_until_up(proc, answers, 20, 0.1, lambda: f"redis-server did not start on port {port}")
    return proc


def wait_for(predicate, timeout=60, what="condition", log=None):
    """Polls ``predicate`` every 0.25 s until it holds; fails after ``timeout`` seconds saying ``what`` it waited for,
    with the tail of the worker's ``log`` when given."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    pytest.fail(f"Timed out waiting for {what}." + (f"\nWorker log:\n{log.read_text()[-3000:]}" if log else ""))
