"""The long-poll against a real Celery worker process: a client waits on a queued job with
GET /api/v1/jobs/{id}/wait/?state=queued while the worker's job cycle admits it; the answer comes as soon as the
worker's write is visible. Outside a test transaction, so the wait really closes its database connection before
each pause and reads the worker's committed change with a fresh one."""

import pytest
from django.db import connection
from rest_framework.test import APIClient

from accounts.models import Team
from gpus.models import ResourceClass
from gpus.tasks import reconcile_inventory
from jobs import actions, eventstream
from jobs.choices import JobState
from jobs.tasks import run_cycle

from .processes import wait_for

pytestmark = pytest.mark.integration

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


def test_a_long_poll_answers_when_the_worker_admits_the_job(celery_worker_process, people, settings, monkeypatch):
    settings.PORTAL_WAIT_POLL_SECONDS = 0.2
    worker = celery_worker_process
    reconcile_inventory.apply_async(queue=worker["queue"])
    wait_for(lambda: ResourceClass.objects.filter(key=H100).exists(), what="the inventory", log=worker["log"])
    team = Team.objects.get(slug="vision")
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], team, rc, 8, 8)
    fields = {**actions.spec_defaults(), "name": "waited", "image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
              "command": ["sleep", "600"], "count": 2}  # fmt: skip
    job = actions.submit_job(people["alice"], team, rc, fields).job
    assert job.state == JobState.QUEUED

    pauses = []
    real_sleep = eventstream.sleep

    def pause(seconds):
        pauses.append(connection.connection is None)  # the connection was given back before the pause
        if len(pauses) == 1:
            run_cycle.apply_async(queue=worker["queue"])  # the worker admits it while the request waits
        real_sleep(seconds)

    monkeypatch.setattr(eventstream, "sleep", pause)
    client = APIClient()
    client.force_authenticate(people["alice"])
    response = client.get(f"/api/v1/jobs/{job.pk}/wait/?state=queued&timeout=60")
    assert response.status_code == 200, response.content
    data = response.json()
    assert data["timed_out"] is False and data["state"] in (JobState.ADMITTED, JobState.RUNNING), data
    assert pauses and all(pauses)  # it waited for the worker, holding no database connection meanwhile
