"""A job end to end through a real Celery worker process: submit → broker → worker runs job cycles against
the simulated cluster (its state file shared with this process) → the job runs on a node and finishes."""

import pytest

from accounts.models import Team
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.tasks import reconcile_inventory
from jobs import actions
from jobs.choices import EventKind, JobState
from jobs.models import Job
from jobs.tasks import run_cycle
from tests.sim_objects import DEMO_SCENARIO

from .processes import wait_for

pytestmark = pytest.mark.integration


def test_worker_admits_launches_and_finishes_a_job(celery_worker_process, people):
    worker = celery_worker_process
    cluster = SimulatedCluster(worker["sim_state"], scenario=DEMO_SCENARIO)
    reconcile_inventory.apply_async(queue=worker["queue"])
    key = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
    wait_for(lambda: ResourceClass.objects.filter(key=key).exists(), what="the inventory", log=worker["log"])
    team = Team.objects.get(slug="vision")
    actions.set_quota(people["admin"], team, ResourceClass.objects.get(key=key), 8, 8)
    job = actions.submit_job(
        people["alice"],
        team,
        ResourceClass.objects.get(key=key),
        dict(
            name="smoke",
            image="nvidia/cuda:12.2.2-runtime-ubuntu22.04",
            command=["sleep", "3"],
            args=[],
            env=[],
            count=4,
            cpu_millicores=1000,
            memory_mb=4096,
            priority=50,
            preemptible=False,
            max_runtime_seconds=600,
        ),  # fmt: skip
    ).job

    def cycled(state):
        run_cycle.apply_async(queue=worker["queue"])
        return Job.objects.get(pk=job.pk).state == state

    wait_for(lambda: cycled(JobState.RUNNING), timeout=60, what="the job to run", log=worker["log"])
    workloads = cluster.list_workloads("team-vision")
    assert [w["metadata"]["name"] for w in workloads] == [f"gpj-{job.pk}-smoke"]
    wait_for(lambda: cycled(JobState.SUCCEEDED), timeout=60, what="the job to finish", log=worker["log"])
    job.refresh_from_db()
    assert job.node_name.startswith("gpu-h100-") and job.exit_code == 0
    assert {EventKind.ADMITTED, EventKind.CREATED, EventKind.STARTED, EventKind.SUCCEEDED} <= set(
        job.events.values_list("kind", flat=True)
    )
