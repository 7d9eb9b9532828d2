"""Utilisation end to end: the scrape and maintenance tasks run in a real Celery worker process, which reads the
simulated cluster's dcgm-exporter text, stores samples attributed to a running job, and flags it idle."""

import pytest
from django.utils import timezone

from cluster.sim import SimulatedCluster
from core.models import Notification
from gpus.tasks import reconcile_inventory
from jobs.tasks import detect_idle, run_cycle
from telemetry.models import GpuSample
from telemetry.tasks import maintain_telemetry, scrape_dcgm
from tests.sim_objects import DEMO_SCENARIO

from .processes import wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def short_idle_window(monkeypatch):
    """The worker reads settings from its environment: a 2-minute idle window instead of 30."""
    monkeypatch.setenv("PORTAL_IDLE_WINDOW_SECONDS", "120")


def test_worker_scrapes_attributes_and_flags_an_idle_job(short_idle_window, celery_worker_process, people):
    from gpus.models import ResourceClass
    from jobs import actions
    from jobs.models import Job

    worker = celery_worker_process
    SimulatedCluster(worker["sim_state"], scenario=DEMO_SCENARIO)
    reconcile_inventory.apply_async(queue=worker["queue"])
    wait_for(lambda: ResourceClass.objects.filter(present=True).exists(), what="the inventory", log=worker["log"])
    rc = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3")
    actions.set_quota(people["admin"], people["vision"], rc, 8, 8)
    job = actions.submit_job(
        people["alice"], people["vision"], rc,
        {"name": "holder", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "infinity"],
         "args": [], "env": [], "count": 1, "cpu_millicores": 2000, "memory_mb": 8192, "priority": 0,
         "preemptible": False, "max_runtime_seconds": 3600},
    ).job  # fmt: skip

    def running():
        run_cycle.apply_async(queue=worker["queue"])  # no result backend: watch the database instead
        job.refresh_from_db()
        return job.state == "running"

    wait_for(running, timeout=60, what="the job to run", log=worker["log"])
    scrape_dcgm.apply_async(queue=worker["queue"])
    mine = GpuSample.objects.filter(job_id=job.pk)
    wait_for(mine.exists, what="the scrape to store the job's GPU", log=worker["log"])
    assert mine.count() == 1 and mine.get().util_pct == 0 and mine.get().team_id == people["vision"].pk
    assert GpuSample.objects.filter(job_id__isnull=True).count() > 50
    # As if the job had run, idle, through the (2-minute) window: its first reading 100 s ago.
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timezone.timedelta(minutes=5))
    GpuSample.objects.filter(job_id=job.pk).update(ts=timezone.now() - timezone.timedelta(seconds=100))
    scrape_dcgm.apply_async(queue=worker["queue"])
    wait_for(lambda: mine.count() == 2, what="the second scrape", log=worker["log"])
    maintain_telemetry.apply_async(queue=worker["queue"])
    detect_idle.apply_async(queue=worker["queue"])
    wait_for(lambda: Job.objects.get(pk=job.pk).idle_since is not None, what="the idle flag", log=worker["log"])
    assert Notification.objects.filter(user=people["alice"], kind="job.idle").count() == 1
