"""Redis down: a submission is still accepted (its kick fails soft, is logged, and costs the person under a
second), and once Redis is back the worker and beat admit and launch it. Then Redis dies under a running worker and
beat and comes back: they reconnect by themselves and the next submission is admitted too.

The submitting side runs as its own process with the broker pointed at a redis-server of this test's own on a spare
port (not started, then started, stopped and started again); the database is the test database.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from accounts.models import Team
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import ACTIVE_STATES, JobState
from jobs.models import Job
from tests.sim_objects import DEMO_SCENARIO, H100

from .conftest import REPO
from .processes import start_beat, start_redis, start_worker, stop, wait_for

pytestmark = pytest.mark.integration

SUBMIT = f"""
import time, django
django.setup()
from django.contrib.auth import get_user_model
from accounts.models import Team
from gpus.models import ResourceClass
from jobs import actions
team = Team.objects.get(slug="vision")
rc = ResourceClass.objects.get(key="{H100}")
started = time.monotonic()
job = actions.submit_job(get_user_model().objects.get(username="alice"), team, rc, dict(
    name="while-redis-is-down", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "600"], args=[],
    env=[], count=1, cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=3600,
)).job
print("JOB", job.pk, "SECONDS", round(time.monotonic() - started, 2))
"""


def submit(env: dict[str, str]) -> tuple[Job, float, str]:
    """Submit a job as the web process would, in a process whose broker is the private Redis."""
    done = subprocess.run(
        [sys.executable, "-c", SUBMIT], cwd=REPO, env={**env, "DJANGO_SETTINGS_MODULE": "portal.settings"},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("JOB ")]
    _, pk, _, seconds = line.split()
    return Job.objects.get(pk=int(pk)), float(seconds), done.stderr


def test_submissions_are_accepted_with_redis_down_and_admitted_once_it_is_back(private_broker, people):
    env, where = private_broker["env"], private_broker["dir"]
    cluster = SimulatedCluster(env["PORTAL_SIM_STATE"], scenario=DEMO_SCENARIO)
    sync_inventory(cluster)
    actions.set_quota(people["admin"], Team.objects.get(slug="vision"), ResourceClass.objects.get(key=H100), 4, 4)

    stop(private_broker["redis"])  # Redis goes down before anything is submitted
    job, seconds, stderr = submit(env)
    assert job.state == JobState.QUEUED
    assert "could not queue an admission cycle; the periodic one will admit the job" in stderr
    assert seconds < 5, f"the submission waited {seconds} s for the broker"

    time.sleep(1)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED  # nothing admits it while the broker is down

    redis = start_redis(private_broker["port"], where)
    log = where / "processes.log"
    worker = start_worker(env, log)
    beat = start_beat(env, log, where / "beat-schedule")
    try:

        def launched(job: Job) -> bool:
            job.refresh_from_db()
            return job.state in ACTIVE_STATES and job.workload_created_at is not None

        wait_for(lambda: launched(job), timeout=60, what="the job submitted while Redis was down", log=log)

        # Redis dies under the running worker and beat, and comes back: they reconnect by themselves.
        stop(redis)
        during, _, stderr = submit(env)
        assert during.state == JobState.QUEUED and "could not queue an admission cycle" in stderr
        time.sleep(2)
        redis = start_redis(private_broker["port"], where)
        wait_for(lambda: launched(during), timeout=90, what="the job submitted during the second outage", log=log)
    finally:
        stop(beat)
        stop(worker)
        stop(redis)
    names = [w["metadata"]["name"] for w in cluster.list_workloads("team-vision")]
    assert sorted(names) == sorted([job.workload_name, during.workload_name])
