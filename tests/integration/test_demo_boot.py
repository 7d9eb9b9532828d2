"""Boot the embedded default exactly as the README says (`make demo`), load a page, then Ctrl-C it."""

import http.cookiejar
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_make_demo_serves_the_portal_and_stops_on_ctrl_c(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CI")}
    env.update({"PORTAL_DATA_DIR": str(tmp_path / "var"), "PORTAL_RECONCILE_INTERVAL": "2"})
    log_path = tmp_path / "demo.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["make", "demo", f"PORT={port}"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"`make demo` did not come up:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)

        output = log_path.read_text()
        signs = re.findall(r"^\s+(\w+)\s+/\s+(\S+)\s+\((.+)\)$", output, flags=re.M)
        creds = {user: password for user, password, _ in signs}
        assert {"admin", "alice", "bob"} <= set(creds), output[-2000:]
        assert ("alice", "lead of Computer Vision") in {(user, standing) for user, _, standing in signs}

        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        login_page = opener.open(f"{base}/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page).group(1)
        form = urllib.parse.urlencode({"username": "alice", "password": creds["alice"], "csrfmiddlewaretoken": csrf})
        req = urllib.request.Request(f"{base}/login/", data=form.encode(), headers={"Referer": f"{base}/login/"})
        overview = opener.open(req).read().decode()
        assert "H100 80GB HBM3" in overview
        assert "gpu-h100-01" in opener.open(f"{base}/nodes/").read().decode()

        # beat → worker: reconcile runs on its own every PORTAL_RECONCILE_INTERVAL seconds.
        deadline = time.monotonic() + 60
        while (
            "gpus.tasks.reconcile_inventory" not in log_path.read_text() or " succeeded in " not in log_path.read_text()
        ):
            if time.monotonic() > deadline:
                pytest.fail(f"beat/worker never ran the reconcile task:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)

        # web, worker and beat share one Prometheus multiprocess directory: the web's /metrics (open to localhost)
        # counts the worker's reconciles.
        deadline = time.monotonic() + 60
        while True:
            metrics = urllib.request.urlopen(f"{base}/metrics", timeout=10).read().decode()
            counted = re.search(r"^gpuportal_inventory_reconcile_duration_seconds_count (\S+)$", metrics, flags=re.M)
            if counted and float(counted.group(1)) >= 1:
                break
            if time.monotonic() > deadline:
                pytest.fail("/metrics never counted the worker's reconciles:\n" + metrics[-3000:])
            time.sleep(0.5)

        # A newcomer can try webhooks with a receiver on this machine (the demo allows loopback, nothing else).
        csrf = next(cookie.value for cookie in jar if cookie.name == "csrftoken")
        for url, status in (("http://127.0.0.1:9/hook", 201), ("http://10.1.2.3/hook", 400)):
            body = {"team": "vision", "name": f"try {url}", "url": url, "events": ["job.*"]}
            req = urllib.request.Request(
                f"{base}/api/v1/webhooks/", data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json", "X-CSRFToken": csrf, "Referer": f"{base}/"},
            )  # fmt: skip
            try:
                answered = opener.open(req).status
            except urllib.error.HTTPError as refused:
                answered = refused.status
            assert answered == status, url

        # A browser tab left open on an event stream: Ctrl-C still stops everything without honcho's SIGKILL
        # (the demo's gunicorns give requests in flight 2 s, not gunicorn's default 30 s).
        stream = opener.open(f"{base}/api/v1/teams/vision/events/stream/", timeout=30)
        opening = b"".join(stream.readline() for _ in range(3))  # retry:, a blank line, then the ready event
        assert b"event: ready" in opening, opening
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("`make demo` did not stop on Ctrl-C within 30 s")
    # honcho sends SIGKILL to what is still running 5 s after the first process stopped; the web and stream servers
    # are never among them (Celery's processes, on a busy machine, may be: they end after their warm shutdown).
    for server in ("web.1", "streams.1"):
        assert f"sending SIGKILL to {server}" not in log_path.read_text(), log_path.read_text()[-3000:]
    # Nothing of the process group is left running.
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
