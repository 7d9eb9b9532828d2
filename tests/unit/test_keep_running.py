"""deploy/keep_running.py, the demo's restart of what died: a command that exits on its own starts again; honcho's
stop (SIGTERM to the process group) stops it for good; every line of deploy/Procfile.demo runs under it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procfile import KEEP_RUNNING, demo_lines

REPO = Path(__file__).resolve().parents[2]
#: Counts its starts in a file; the first run fails, the later ones run until stopped.
FAILS_ONCE = """
import sys, time
from pathlib import Path
starts = Path(sys.argv[1])
starts.write_text(starts.read_text() + "start\\n" if starts.exists() else "start\\n")
if starts.read_text().count("start") == 1:
    sys.exit(3)
time.sleep(120)
"""


def wait_until(condition, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"never: {what}")
        time.sleep(0.1)


def test_a_command_that_exits_on_its_own_starts_again_and_a_stop_stops_it_for_good(tmp_path):
    starts = tmp_path / "starts"
    log = tmp_path / "keep_running.log"
    with open(log, "w") as out:
        keeper = subprocess.Popen(
            [sys.executable, "deploy/keep_running.py", "flaky", "--", sys.executable, "-c", FAILS_ONCE, str(starts)],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_until(lambda: starts.exists() and starts.read_text().count("start") == 2, "a second start")
        # How long Python took to start and exit depends on the machine's load; the code and the first pause do not.
        assert re.search(r"keep_running: flaky exited with code 3 after \d+ s; restart 1 in 1 s", log.read_text())
        os.killpg(keeper.pid, signal.SIGTERM)  # what honcho does on Ctrl-C
        assert keeper.wait(timeout=30) == 0
    finally:
        if keeper.poll() is None:
            os.killpg(keeper.pid, signal.SIGKILL)
    assert starts.read_text().count("start") == 2, "a stop must not restart the command"
    with pytest.raises(ProcessLookupError):
        os.killpg(keeper.pid, 0)  # the command went with it


def test_a_stop_during_the_pause_restarts_nothing(tmp_path):
    with open(tmp_path / "log", "w") as out:
        keeper = subprocess.Popen(
            [sys.executable, "deploy/keep_running.py", "dies", "--", sys.executable, "-c", "import sys; sys.exit(1)"],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    try:
        wait_until(lambda: "restart 1" in (tmp_path / "log").read_text(), "the first restart's notice")
        restarts = (tmp_path / "log").read_text().count("keep_running:")
        os.killpg(keeper.pid, signal.SIGTERM)
        assert keeper.wait(timeout=30) == 0
    finally:
        if keeper.poll() is None:
            os.killpg(keeper.pid, signal.SIGKILL)
    assert (tmp_path / "log").read_text().count("keep_running:") == restarts


def test_every_demo_process_runs_under_keep_running():
    for name, argv in demo_lines().items():
        assert argv[:3] == [*KEEP_RUNNING, name] and argv[3] == "--", f"{name}: {argv}"


def test_a_command_that_cannot_start_is_not_retried_and_says_why(tmp_path):
    done = subprocess.run(
        [sys.executable, "deploy/keep_running.py", "typo", "--", str(tmp_path / "no-such-program")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 127
    assert done.stderr.startswith("keep_running: cannot start typo: ") and "no-such-program" in done.stderr
