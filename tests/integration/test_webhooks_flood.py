"""One team's webhooks cannot stall the control loop. The demo's own Celery processes, started from
deploy/Procfile.demo as `make demo` starts them (its workers and beat, on the embedded default's file-system
broker), run job cycles every three seconds while a flood of deliveries goes to a receiver that accepts connections
and never answers: the cycle keeps its cadence, because deliveries go to a queue and a worker of their own.

Before, deliveries shared the one worker with the cycle: on the demo, 80 webhooks of one lead queued 1,766
deliveries and no job cycle ran for 15 minutes. tests/unit/test_worker_queues.py checks the same separation in
docker-compose.yml and deploy/."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core.models import Delivery, Webhook
from tests.procfile import demo_processes

from .conftest import REPO, worker_database_url
from .processes import stop, wait_for_line

pytestmark = pytest.mark.integration

CYCLE_INTERVAL = 3
WEBHOOKS, EVENTS = 30, 3
#: The flood is watched until the receiver has held deliveries for a whole read timeout (two attempts recorded:
#: the attempt is counted when its POST gives up), at least MIN_CYCLES job cycles finished since the flood began,
#: and one more finished after those attempts: the cycle kept its cadence across a worker's worth of hung
#: deliveries. A control loop that waits behind the deliveries never gets there and fails at the deadline.
MIN_CYCLES = 4
DEADLINE = 90  # seconds of flood at most
CYCLE_DONE = re.compile(r"Task jobs\.tasks\.run_cycle\[[^\]]+\] succeeded")


def celery_processes() -> dict[str, list[str]]:
    """The Procfile's Celery lines (its workers and beat), run with this interpreter instead of .venv/bin/celery."""
    return {
        name: [sys.executable, "-m", "celery", *argv[1:]]
        for name, argv in demo_processes().items()
        if Path(argv[0]).name == "celery"
    }


@pytest.fixture
def blackhole():
    """A receiver that takes connections (the kernel completes them) and never reads or answers: each POST waits
    out its read timeout, as against a hung endpoint."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1024)
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"


def test_a_flood_of_deliveries_to_a_dead_receiver_does_not_delay_the_job_cycle(
    transactional_db, people, tmp_path, blackhole, capsys
):
    env = {
        key: value for key, value in os.environ.items() if key not in ("CELERY_BROKER_URL", "PROMETHEUS_MULTIPROC_DIR")
    }
    env.update({
        "DATABASE_URL": worker_database_url(),
        "CELERY_BROKER_URL": "filesystem://",  # the demo's embedded default, in this test's own folder
        "PORTAL_DATA_DIR": str(tmp_path / "var"),
        "PORTAL_SIM_STATE": str(tmp_path / "simcluster.json"),
        "PORTAL_JOB_CYCLE_INTERVAL": str(CYCLE_INTERVAL),
        "PORTAL_WEBHOOK_ALLOW_LOCAL": "1",  # the dead receiver is on 127.0.0.1
        "PYTHONUNBUFFERED": "1",
    })  # fmt: skip
    hooks = [Webhook(team=people["vision"], name=f"hook {n}", url=blackhole, events=["job.*"]) for n in range(WEBHOOKS)]
    Webhook.objects.bulk_create(hooks)

    processes, logs = {}, {}
    try:
        for name, argv in celery_processes().items():
            logs[name] = tmp_path / f"{name}.log"
            with open(logs[name], "w") as out:
                processes[name] = subprocess.Popen(
                    argv, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                )
        for name, proc in processes.items():
            if name != "beat":
                wait_for_line(proc, logs[name], "ready.")

        def cycles_done() -> int:
            return sum(len(CYCLE_DONE.findall(log.read_text())) for log in logs.values())

        deadline = time.monotonic() + 60
        while cycles_done() == 0:  # the cycle runs before the flood
            if time.monotonic() > deadline:
                pytest.fail(
                    "No job cycle ran before the flood:\n" + "\n".join(log.read_text()[-2000:] for log in logs.values())
                )
            time.sleep(0.2)

        # The flood: every webhook takes each event; the portal's own code queues the deliveries (emit, kick).
        flood = textwrap.dedent(f"""
            from django.db import transaction
            from accounts.models import Team
            from core import webhooks
            with transaction.atomic():
                for n in range({EVENTS}):
                    webhooks.emit(Team.objects.get(slug="vision"), "job.failed", {{"n": n}})
        """)  # fmt: skip
        subprocess.run([sys.executable, "manage.py", "shell", "-c", flood], cwd=REPO, env=env, check=True, timeout=120)
        assert Delivery.objects.count() == WEBHOOKS * EVENTS

        seen, done_at, held_at = cycles_done(), [], None
        start = time.monotonic()
        while (now := time.monotonic()) < start + DEADLINE:
            if (count := cycles_done()) > seen:
                done_at += [now] * (count - seen)
                seen = count
            if held_at is None and Delivery.objects.filter(attempt__gte=1).count() >= 2:
                held_at = now
            if held_at is not None and len(done_at) >= MIN_CYCLES and done_at[-1] > held_at:
                break
            time.sleep(0.1)
        attempted = Delivery.objects.filter(attempt__gte=1).count()
    finally:
        for proc in processes.values():
            stop(proc, signal.SIGKILL)

    report = "\n".join(f"--- {name}\n{log.read_text()[-1500:]}" for name, log in logs.items())
    watched = now - start
    assert held_at is not None and attempted >= 2, f"the flood never reached the receiver:\n{report}"
    marks = [start, *done_at, now]
    gaps = [later - earlier for earlier, later in zip(marks, marks[1:])]
    assert len(done_at) >= MIN_CYCLES, f"{len(done_at)} cycles in {watched:.0f} s of flood:\n{report}"
    assert done_at[-1] > held_at, f"no cycle ran after the receiver held deliveries ({watched:.0f} s):\n{report}"
    assert max(gaps) <= 4 * CYCLE_INTERVAL, f"the cycle stopped for {max(gaps):.1f} s during the flood:\n{report}"
    with capsys.disabled():  # for the record
        print(f"\n{watched:.0f} s of flood: {len(done_at)} job cycles (every {CYCLE_INTERVAL} s), longest gap "
              f"{max(gaps):.1f} s; {attempted} of {WEBHOOKS * EVENTS} deliveries attempted")  # fmt: skip
