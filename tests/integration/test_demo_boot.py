"""Boot the embedded default exactly as the README says (`make demo`), load a page, then Ctrl-C it."""

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import time
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
        creds = dict(re.findall(r"^\s+(\w+)\s+/\s+(\S+)\s+\((?:admin|member)\)$", output, flags=re.M))
        assert {"admin", "alice", "bob"} <= set(creds), output[-2000:]

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
    finally:
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("`make demo` did not stop on Ctrl-C within 30 s")
    # Nothing of the process group is left running.
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
