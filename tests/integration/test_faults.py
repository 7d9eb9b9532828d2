"""Crashes mid-cycle: a real Celery worker and beat are killed (SIGKILL, no warm shutdown) while the worker is
creating workloads, at the worst moment (the cluster has made a workload the database does not know of yet), then
restarted. The cycles that follow converge: every job gets exactly one workload (nothing twice), every admitted
job has its workload recorded (nothing lost), and the cluster holds nothing else.

The processes talk through a redis-server of their own on a spare port, so no other test's worker takes their
tasks; the simulated cluster's state file is shared with this process.
"""

from __future__ import annotations

import signal
import time
from collections import Counter

import pytest

from accounts.models import Team
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import ACTIVE_STATES
from jobs.models import Job
from tests.sim_objects import DEMO_SCENARIO

from .processes import start_beat, start_worker, stop, wait_for

pytestmark = pytest.mark.integration

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
JOBS = 6


def submit_jobs(people, count: int) -> list[Job]:
    team = Team.objects.get(slug="vision")
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], team, rc, count, count)
    request = dict(
        image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "600"], args=[], env=[], count=1,
        cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    return [actions.submit_job(people["alice"], team, rc, {**request, "name": f"k{i}"}).job for i in range(count)]


def workload_names(cluster: SimulatedCluster) -> list[str]:
    return [w["metadata"]["name"] for w in cluster.list_workloads("team-vision")]


def test_worker_and_beat_killed_mid_cycle_leave_nothing_twice_and_nothing_lost(private_broker, people):
    env, where = private_broker["env"], private_broker["dir"]
    cluster = SimulatedCluster(env["PORTAL_SIM_STATE"], scenario=DEMO_SCENARIO)
    sync_inventory(cluster)
    jobs = submit_jobs(people, JOBS)
    ids = [job.pk for job in jobs]

    log = where / "processes.log"
    worker = start_worker(env, log, slow_creates=True)
    beat = start_beat(env, log, where / "beat-schedule")
    try:
        # Kill as soon as the cluster holds a workload the database has not recorded: the crash window.
        deadline = time.monotonic() + 90
        while True:
            made = set(workload_names(cluster))
            recorded = set(
                Job.objects.filter(pk__in=ids, workload_created_at__isnull=False).values_list(
                    "workload_name", flat=True
                )
            )
            if made - recorded and len(made) < JOBS:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"The worker never got half-way through launching:\n{log.read_text()[-3000:]}")
            time.sleep(0.02)
        stop(worker, signal.SIGKILL)
        stop(beat, signal.SIGKILL)
    finally:
        stop(worker, signal.SIGKILL)
        stop(beat, signal.SIGKILL)

    made = set(workload_names(cluster))
    recorded = set(
        Job.objects.filter(pk__in=ids, workload_created_at__isnull=False).values_list("workload_name", flat=True)
    )
    assert made - recorded, "the kill did not land between creating a workload and recording it"
    assert len(made) < JOBS, "the kill came after the last launch"

    worker = start_worker(env, log)
    beat = start_beat(env, log, where / "beat-schedule")
    try:

        def all_launched() -> bool:
            return (
                Job.objects.filter(pk__in=ids, state__in=ACTIVE_STATES, workload_created_at__isnull=False).count()
                == JOBS
            )

        wait_for(all_launched, timeout=90, what="the restarted worker and beat to launch every job", log=log)
    finally:
        stop(beat)
        stop(worker)

    names = workload_names(cluster)
    assert [name for name, n in Counter(names).items() if n > 1] == []
    workloads = {w["metadata"]["name"]: w for w in cluster.list_workloads("team-vision")}
    for job in Job.objects.filter(pk__in=ids):
        assert job.workload_name in workloads, job.pk
        assert workloads[job.workload_name]["metadata"]["uid"] == job.workload_uid, job.pk
    assert set(names) == {job.workload_name for job in Job.objects.filter(pk__in=ids)}
