"""The capacity planner through a real Celery worker process: a plan run sent to the broker is replayed by the
worker (history read from the shared database, the real engine) to succeeded with its results on the row; a run
cancelled while the worker replays it ends cancelled."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from gpus.models import ResourceClass
from gpus.tasks import reconcile_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job
from planner import runs
from planner.choices import PlanState
from planner.models import PlanRun
from planner.tasks import run_plan

from .processes import wait_for

pytestmark = pytest.mark.integration

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


def make_history(people, jobs: int, hours: float) -> None:
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 16, 32)
    now = timezone.now()
    step = hours * 3600 / jobs
    rows = []
    for i in range(jobs):
        team = "vision" if i % 2 == 0 else "nlp"
        submitted = now - timedelta(hours=hours) + timedelta(seconds=i * step)
        rows.append(
            Job(
                team=people[team],
                owner=people["alice" if team == "vision" else "bob"],
                name=f"h{i}",
                image="x/y:1",
                resource_class=rc,
                count=1 + i % 4,
                state=JobState.SUCCEEDED,
                node_name="gpu-h100-01",
                submitted_at=submitted,
                started_at=submitted + timedelta(seconds=30),
                finished_at=submitted + timedelta(seconds=30 + 600 + (i % 7) * 300),
            )
        )
    Job.objects.bulk_create(rows, batch_size=1000)


def queued_run(people, hours: float, proposals: list[dict], **options) -> PlanRun:
    now = timezone.now()
    return PlanRun.objects.create(
        created_by=people["admin"],
        window_start=now - timedelta(hours=hours),
        window_end=now,
        proposals=proposals,
        options={"preemption": True, "borrowing": True, "suggest": 0, **options},
    )


def inventory_via_worker(worker) -> None:
    reconcile_inventory.apply_async(queue=worker["queue"])
    wait_for(lambda: ResourceClass.objects.filter(key=H100).exists(), what="the inventory", log=worker["log"])


def test_the_worker_replays_a_small_window_to_succeeded(celery_worker_process, people):
    worker = celery_worker_process
    inventory_via_worker(worker)
    make_history(people, jobs=40, hours=6)
    share = {"name": "Share H100", "changes": [{"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": 2}]}
    run = queued_run(people, 6, [share])
    run_plan.apply_async(args=[run.pk], queue=worker["queue"])
    wait_for(
        lambda: PlanRun.objects.get(pk=run.pk).state not in (PlanState.QUEUED, PlanState.RUNNING),
        timeout=120,
        what="the plan run to end",
        log=worker["log"],
    )
    run.refresh_from_db()
    assert run.state == PlanState.SUCCEEDED, run.error
    assert [s["name"] for s in run.results["scenarios"]] == ["baseline", "Share H100"]
    assert run.results["window"]["jobs"] == 40 and run.progress == 1.0
    assert run.results["fidelity"]["jobs_compared"] == 40


def test_a_run_cancelled_while_the_worker_replays_it_ends_cancelled(celery_worker_process, people):
    worker = celery_worker_process
    inventory_via_worker(worker)
    make_history(people, jobs=4000, hours=24 * 14)
    proposals = [
        {"name": f"Share ×{n}", "changes": [{"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": n}]}
        for n in (2, 3, 4, 5, 6)
    ]
    run = queued_run(people, 24 * 14, proposals)
    run_plan.apply_async(args=[run.pk], queue=worker["queue"])
    wait_for(
        lambda: PlanRun.objects.get(pk=run.pk).state == PlanState.RUNNING,
        timeout=60,
        what="the worker to start the run",
        log=worker["log"],
    )
    runs.cancel_run(people["admin"], PlanRun.objects.get(pk=run.pk))
    wait_for(
        lambda: PlanRun.objects.get(pk=run.pk).state != PlanState.RUNNING,
        timeout=60,
        what="the run to stop",
        log=worker["log"],
    )
    run.refresh_from_db()
    assert run.state == PlanState.CANCELLED and run.results is None and run.finished_at is not None
