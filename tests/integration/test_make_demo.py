"""`make demo`, booted once exactly as the README says and driven like a newcomer would: it serves the portal, beat
and the worker run the reconcile, the metrics count it and webhooks may go to loopback; it survives a failed process
(issue 31, item 10: the control loop's Celery worker is killed, then fed a half-written message in the file-system
broker, celery/kombu#1551, the race that stopped a newcomer's demo 12 minutes in); and Ctrl-C stops it all.

The tests run in file order on one worker (one xdist group): each takes the demo as the one before left it."""

import http.cookiejar
import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from .processes import free_port

pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("make-demo")]
REPO = Path(__file__).resolve().parents[2]
#: The control loop's worker finishing the inventory reconcile that beat sends every PORTAL_RECONCILE_INTERVAL.
RECONCILED = re.compile(r"^\S+ worker\.1\s+\|.*Task gpus\.tasks\.reconcile_inventory\[[^\]]+\] succeeded", re.M)


@dataclass
class Demo:
    proc: subprocess.Popen
    base: str
    log_path: Path
    data_dir: Path
    #: (user, password, standing) as `make demo` printed them
    signs: list[tuple[str, str, str]]
    #: signed in as alice
    opener: urllib.request.OpenerDirector
    jar: http.cookiejar.CookieJar = field(default_factory=http.cookiejar.CookieJar)


def control_worker(data_dir: Path) -> int | None:
    """The pid of this demo's control-loop Celery worker (the worker itself, not what keeps it running)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().decode().split("\0")
            environ = (entry / "environ").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        if (
            f"PORTAL_DATA_DIR={data_dir}" in environ
            and any(Path(part).name == "celery" for part in argv[:2])
            and "-Q" in argv
            and argv[argv.index("-Q") + 1] == "control"
            and not any("keep_running" in part for part in argv)
        ):
            return int(entry.name)
    return None


def serves(base: str) -> bool:
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


def wait_for_comeback(proc, base: str, log_path: Path, since: int, gone: int, data_dir: Path) -> None:
    """Until a new control worker runs and has reconciled after ``since`` (an offset into the log), `make demo`
    stays up and the portal answers every probe."""
    deadline = time.monotonic() + 180
    while True:
        output = log_path.read_text()
        assert proc.poll() is None, f"`make demo` stopped:\n{output[-4000:]}"
        assert serves(base), f"the portal stopped serving:\n{output[-4000:]}"
        pid = control_worker(data_dir)
        if pid not in (None, gone) and RECONCILED.search(output, since):
            return
        if time.monotonic() > deadline:
            pytest.fail(f"the control worker did not come back and run tasks:\n{output[since:][-4000:]}")
        time.sleep(1)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """`make demo` on a port of its own, up once it serves and its control worker has reconciled."""
    tmp_path = tmp_path_factory.mktemp("make-demo")
    port = free_port()
    data_dir = (tmp_path / "var").resolve()
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "CI")}
    env.update({"PORTAL_DATA_DIR": str(data_dir), "PORTAL_RECONCILE_INTERVAL": "2"})
    log_path = tmp_path / "demo.log"
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            ["make", "demo", f"PORT={port}"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while not (serves(base) and control_worker(data_dir) and RECONCILED.search(log_path.read_text())):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"`make demo` did not come up:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)
        signs = re.findall(r"^\s+(\w+)\s+/\s+(\S+)\s+\((.+)\)$", log_path.read_text(), flags=re.M)
        jar = http.cookiejar.CookieJar()
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
        login_page = opener.open(f"{base}/login/").read().decode()
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', login_page).group(1)
        password = next((password for user, password, _ in signs if user == "alice"), "")
        form = urllib.parse.urlencode({"username": "alice", "password": password, "csrfmiddlewaretoken": csrf})
        opener.open(urllib.request.Request(f"{base}/login/", data=form.encode(), headers={"Referer": f"{base}/login/"}))
        yield Demo(proc, base, log_path, data_dir, signs, opener, jar)
    finally:
        if proc.poll() is None:  # a test failed before the last one stopped it
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


def test_make_demo_serves_the_portal_its_beat_reconciles_and_webhooks_may_go_to_loopback(demo):
    base, log_path, opener, jar = demo.base, demo.log_path, demo.opener, demo.jar
    # The sign-ins are printed, and alice's (the fixture signed in with it) opens the overview.
    assert {"admin", "alice", "bob"} <= {user for user, _, _ in demo.signs}, log_path.read_text()[-2000:]
    assert ("alice", "lead of Computer Vision") in {(user, standing) for user, _, standing in demo.signs}
    overview = opener.open(f"{base}/").read().decode()
    assert "Log out" in overview
    assert "H100 80GB HBM3" in overview
    assert "gpu-h100-01" in opener.open(f"{base}/nodes/").read().decode()

    # beat → worker: reconcile runs on its own every PORTAL_RECONCILE_INTERVAL seconds.
    deadline = time.monotonic() + 60
    while "gpus.tasks.reconcile_inventory" not in log_path.read_text() or " succeeded in " not in log_path.read_text():
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


def test_make_demo_keeps_serving_when_the_worker_dies_or_reads_a_half_written_message(demo):
    proc, base, log_path, data_dir = demo.proc, demo.base, demo.log_path, demo.data_dir
    # 1. The worker is killed outright (the kernel's out-of-memory killer, a crash).
    killed = control_worker(data_dir)
    since = len(log_path.read_text())
    os.kill(killed, signal.SIGKILL)
    wait_for_comeback(proc, base, log_path, since, killed, data_dir)

    # 2. A message file the writer has not finished (an empty one is what the newcomer's worker read), first in
    # the control queue's order: the worker reading it dies of JSONDecodeError.
    crashed = control_worker(data_dir)
    since = len(log_path.read_text())
    (data_dir / "broker" / "queue" / f"0_{uuid.uuid4()}.control.msg").write_bytes(b"")
    deadline = time.monotonic() + 60
    while "JSONDecodeError" not in log_path.read_text()[since:]:
        if time.monotonic() > deadline:
            pytest.fail(f"the worker never read the half-written message:\n{log_path.read_text()[since:]}")
        time.sleep(0.5)
    since = log_path.read_text().index("JSONDecodeError", since)
    wait_for_comeback(proc, base, log_path, since, crashed, data_dir)
    assert "keep_running: worker " in log_path.read_text()


def test_ctrl_c_stops_everything_even_with_an_event_stream_open(demo):
    proc, base, log_path = demo.proc, demo.base, demo.log_path
    # A browser tab left open on an event stream: Ctrl-C still stops everything without honcho's SIGKILL
    # (the demo's gunicorns give requests in flight 2 s, not gunicorn's default 30 s).
    stream = demo.opener.open(f"{base}/api/v1/teams/vision/events/stream/", timeout=30)
    opening = b"".join(stream.readline() for _ in range(3))  # retry:, a blank line, then the ready event
    assert b"event: ready" in opening, opening
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail("`make demo` did not stop on Ctrl-C within 30 s")
    # honcho sends SIGKILL to what is still running 5 s after the first process stopped; the web and stream servers
    # are never among them (Celery's processes, on a busy machine, may be: they end after their warm shutdown).
    for server in ("web.1", "streams.1"):
        assert f"sending SIGKILL to {server}" not in log_path.read_text(), log_path.read_text()[-3000:]
    # Nothing of the process group is left running.
    time.sleep(0.5)
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)
