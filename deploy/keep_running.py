"""`make demo`'s restart of what died (deploy/Procfile.demo): runs one demo process and starts it again whenever it
exits on its own, so that one failed process does not take the demo down.

honcho stops every process when one of them exits and has no restart of its own, so each line of the Procfile runs
its command under this script: ``python deploy/keep_running.py NAME -- COMMAND...``. The command runs in this
script's process group, which honcho signals as one (it starts each line in a session of its own): on SIGTERM or
SIGINT (Ctrl-C reaches honcho, honcho sends SIGTERM) the command gets the signal too, this script waits for it and
exits with its code, and nothing is restarted; honcho's SIGKILL, when something does not stop, takes both. When the
command exits without being asked to (a crash, the kernel's out-of-memory kill, a bad message in the file-system
broker: celery/kombu#1551), the exit is reported on stderr and the command starts again after a pause that doubles
with each quick failure (1 s, 2 s, ... up to 30 s) and falls back to 1 s once a run has lasted a minute. A command
that cannot be started at all (not found, not executable) is reported and not retried: exit code 127.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time

#: Pauses before a restart: the first, the longest, and how long a run must last for the next pause to be the first.
FIRST_PAUSE_SECONDS = 1.0
LONGEST_PAUSE_SECONDS = 30.0
STEADY_RUN_SECONDS = 60.0
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def describe(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", help="the process's name in the messages (the Procfile's)")
    parser.add_argument("command", nargs="+", help="the command and its arguments, after --")
    args = parser.parse_args(argv)

    stopping = threading.Event()
    child: subprocess.Popen | None = None

    def stop(signum, _frame):
        stopping.set()
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for signum in STOP_SIGNALS:
        signal.signal(signum, stop)

    pause = FIRST_PAUSE_SECONDS
    restarts = 0
    while True:
        started = time.monotonic()
        try:
            child = subprocess.Popen(args.command)  # noqa: S603 - the Procfile's own command line
        except OSError as exc:
            # Not a failure a restart mends (a typo, a missing install): say so and stop, as a shell would.
            print(f"keep_running: cannot start {args.name}: {exc}", file=sys.stderr, flush=True)
            return 127
        returncode = child.wait()
        if stopping.is_set():
            return returncode if returncode >= 0 else 0
        ran = time.monotonic() - started
        if ran >= STEADY_RUN_SECONDS:
            pause = FIRST_PAUSE_SECONDS
        restarts += 1
        print(
            f"keep_running: {args.name} {describe(returncode)} after {ran:.0f} s; restart {restarts} in {pause:.0f} s",
            file=sys.stderr,
            flush=True,
        )
        # A stop signal during the pause ends the wait at once and nothing is restarted.
        if stopping.wait(pause):
            return 0
        pause = min(pause * 2, LONGEST_PAUSE_SECONDS)


if __name__ == "__main__":
    sys.exit(main())
