"""Long-polls under the production web server: a real gunicorn (gunicorn.conf.py, gthread) with one process of
eight threads. Several clients wait on a queued job (GET /api/v1/jobs/{id}/wait/) while the same process answers
other requests; when the job changes (cancelled here, in the test process), every wait answers with the new state.

On PostgreSQL (CI) the process draws its connections from a pool of two (DATABASE_POOL_MAX, portal/settings.py):
four waits and ten other requests are all served, and the server never has more than two connections open.
"""

from __future__ import annotations

import json
import os
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connection

from accounts.models import APIToken
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState

from .conftest import worker_database_url
from .processes import start_gunicorn, stop

pytestmark = pytest.mark.integration

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
WAITERS = 4


def get(url: str, token: str, timeout: float = 90) -> tuple[int, dict]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return response.status, json.loads(response.read())


def test_waiting_long_polls_leave_the_process_serving_and_answer_when_the_job_changes(
    transactional_db, inventory, people, tmp_path
):
    alice, team = people["alice"], people["vision"]
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], team, rc, 8, 8)
    fields = {**actions.spec_defaults(), "name": "waited", "image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
              "command": ["sleep", "600"], "count": 1}  # fmt: skip
    job = actions.submit_job(alice, team, rc, fields).job
    assert job.state == JobState.QUEUED
    _, token = APIToken.issue(alice, "long-poll test")

    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "PORTAL_DATA_DIR": str(tmp_path),
        "PORTAL_WAIT_POLL_SECONDS": "0.2",
        "DATABASE_POOL_MAX": "2",  # fewer connections than threads (8) and clients (5 at once)
        "PGAPPNAME": APP_NAME,  # libpq names the server's connections, so the test can count them
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "gunicorn.log"
    server, root = start_gunicorn(env, log, workers=1, threads=8)
    base = f"{root}/api/v1/jobs/{job.pk}"
    counting = ConnectionCount() if connection.vendor == "postgresql" else None
    try:
        with ThreadPoolExecutor(WAITERS) as pool:
            waits = [pool.submit(get, f"{base}/wait/?state=queued&timeout=60", token) for _ in range(WAITERS)]
            # The one process answers other requests while every wait is still waiting.
            for _ in range(10):
                status, body = get(f"{base}/", token, timeout=30)
                assert status == 200 and body["state"] == JobState.QUEUED
            assert not any(wait.done() for wait in waits), [w.result() for w in waits if w.done()]

            actions.cancel_job(alice, job)
            answers = [wait.result(timeout=90) for wait in waits]
        if counting is not None:
            assert 1 <= counting.stop() <= 2, f"the server had {counting.peak} connections open; its pool holds 2"
        for status, body in answers:
            assert status == 200
            assert body["timed_out"] is False and body["state"] == JobState.CANCELLED, body
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        if counting is not None:
            counting.stop()
        stop(server)


APP_NAME = "portal-long-poll-test"


class ConnectionCount:
    """The most connections the server had open at once (pg_stat_activity, sampled every 20 ms on a connection of
    its own) until ``stop()``."""

    def __init__(self):
        import psycopg  # noqa: PLC0415 - PostgreSQL runs only

        self.peak = 0
        self._done = threading.Event()
        self._conn = psycopg.connect(worker_database_url(), autocommit=True)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(0.02):
            (count,) = self._conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [APP_NAME]
            ).fetchone()
            self.peak = max(self.peak, count)

    def stop(self) -> int:
        if not self._done.is_set():
            self._done.set()
            self._thread.join(10)
            self._conn.close()
        return self.peak
