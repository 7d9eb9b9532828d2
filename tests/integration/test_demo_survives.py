"""`make demo` survives a failed process (issue 31, item 10): the control loop's Celery worker is killed, then fed
a half-written message in the file-system broker (celery/kombu#1551, the race that stopped a newcomer's demo 12
minutes in); each time the portal keeps serving, and the worker comes back and runs the beat's tasks again."""

import os
import re
import signal
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from .processes import free_port

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
#: The control loop's worker finishing the inventory reconcile that beat sends every PORTAL_RECONCILE_INTERVAL.
RECONCILED = re.compile(r"^\S+ worker\.1\s+\|.*Task gpus\.tasks\.reconcile_inventory\[[^\]]+\] succeeded", re.M)


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


def test_make_demo_keeps_serving_when_the_worker_dies_or_reads_a_half_written_message(tmp_path):
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
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail("`make demo` did not stop on Ctrl-C within 30 s")
