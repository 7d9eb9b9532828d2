"""Long-polls under the production web server: a real gunicorn (gunicorn.conf.py, gthread) with one process that
runs one request at a time (PORTAL_BUSY_REQUESTS=1, accounts.turns). Several clients wait on a queued job
(GET /api/v1/jobs/{id}/wait/) while the same process answers other requests, which it can only do if each waiting
request gives its turn back while it sleeps; when the job changes (cancelled here, in the test process), every wait
answers with the new state.
"""

from __future__ import annotations

import json
import os
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from accounts.models import APIToken
from gpus.models import ResourceClass
from jobs import services
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


def test_waiting_long_polls_hold_no_turn_and_answer_when_the_job_changes(transactional_db, inventory, people,
                                                                            tmp_path):  # fmt: skip
    alice, team = people["alice"], people["vision"]
    rc = ResourceClass.objects.get(key=H100)
    services.set_quota(people["admin"], team, rc, 8, 8)
    fields = {**services.spec_defaults(), "name": "waited", "image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
              "command": ["sleep", "600"], "count": 1}  # fmt: skip
    job = services.submit_job(alice, team, rc, fields).job
    assert job.state == JobState.QUEUED
    _, token = APIToken.issue(alice, "long-poll test")

    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "PORTAL_DATA_DIR": str(tmp_path),
        "PORTAL_WAIT_POLL_SECONDS": "0.2",
        "PORTAL_BUSY_REQUESTS": "1",  # one turn: a wait that kept it would hold every other request back
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "gunicorn.log"
    server, root = start_gunicorn(env, log, workers=1, threads=8)
    base = f"{root}/api/v1/jobs/{job.pk}"
    try:
        with ThreadPoolExecutor(WAITERS) as pool:
            waits = [pool.submit(get, f"{base}/wait/?state=queued&timeout=60", token) for _ in range(WAITERS)]
            # The one process answers other requests, one at a time, while every wait is still waiting.
            for _ in range(10):
                status, body = get(f"{base}/", token, timeout=30)
                assert status == 200 and body["state"] == JobState.QUEUED
            assert not any(wait.done() for wait in waits), [w.result() for w in waits if w.done()]

            services.cancel_job(alice, job)
            answers = [wait.result(timeout=90) for wait in waits]
        for status, body in answers:
            assert status == 200
            assert body["timed_out"] is False and body["state"] == JobState.CANCELLED, body
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]
    finally:
        stop(server)
