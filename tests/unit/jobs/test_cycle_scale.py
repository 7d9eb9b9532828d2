"""The job reconcile at scale: a pass with nothing changed builds no Job models and its queries do not grow
with the running jobs; a mass start is written in batches (the same queries for N and 4N jobs); a running job
skipped while quiet is followed again as soon as its pod or its row changes; a mass start builds no Job models
(the jobs whose only news is a running pod are started from their rows)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs import lifecycle
from jobs.choices import EventKind, JobState
from jobs.cycle.admit import admit
from jobs.cycle.result import CycleResult
from jobs.cycle.run import launch, reconcile_jobs
from jobs.models import Job, JobEvent
from tests.factories import submit_job

SCENARIO = {
    "namespaces": [],
    "nodes": [
        {"names": [f"gpu-{i}" for i in range(4)], "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 8},
         "cpu": 224, "memory": "2Ti"},
    ],
}  # fmt: skip

pytestmark = pytest.mark.cluster(scenario=SCENARIO, quotas={"vision": (32, 32)})


def built_jobs(monkeypatch) -> list[int]:
    built: list[int] = []
    from_db = Job.from_db.__func__

    def counting(cls, db, field_names, values):
        job = from_db(cls, db, field_names, values)
        built.append(job.pk)
        return job

    monkeypatch.setattr(Job, "from_db", classmethod(counting))
    return built


def reconcile(cluster, clock) -> tuple[CycleResult, int]:
    result = CycleResult()
    with CaptureQueriesContext(connection) as queries:
        reconcile_jobs(cluster, result, clock.now)
    return result, len(queries)


def launched(cluster, clock, people, n: int, seconds: str = "3600") -> list[Job]:
    jobs = [submit_job(people["alice"], command=["sleep", seconds]) for _ in range(n)]
    admit(CycleResult(), clock.now)
    launch(cluster, CycleResult(), clock.now)
    clock.advance(30)  # the containers start
    return jobs


def test_a_mass_start_and_a_quiet_pass_have_the_same_queries_for_n_and_4n_jobs(cluster, clock, people, monkeypatch):
    launched(cluster, clock, people, 4)
    started_few, start_queries_few = reconcile(cluster, clock)
    quiet_few = reconcile(cluster, clock)[1]
    launched(cluster, clock, people, 16)
    started_many, start_queries_many = reconcile(cluster, clock)
    assert (started_few.started, started_many.started) == (4, 16)
    assert start_queries_few == start_queries_many
    quiet_many = reconcile(cluster, clock)[1]
    assert quiet_few == quiet_many
    assert Job.objects.filter(state=JobState.RUNNING).count() == 20
    built = built_jobs(monkeypatch)
    clock.advance(5)
    result, _ = reconcile(cluster, clock)
    assert built == [] and not any(v for k, v in result.as_dict().items() if k != "errors")


def test_a_quiet_job_is_followed_again_when_its_pod_or_its_row_changes(cluster, clock, people, monkeypatch):
    short, cancelled, steady = launched(cluster, clock, people, 1, seconds="60") + launched(cluster, clock, people, 2)
    assert reconcile(cluster, clock)[0].started == 3
    built = built_jobs(monkeypatch)
    reconcile(cluster, clock)
    assert built == []
    # A cancel changes the row (the next pass deletes its workload); the short job's container ends.
    cancelled.refresh_from_db()
    assert lifecycle.cancel(cancelled, clock.now, "Cancelled.")
    clock.advance(60)
    built.clear()
    result, _ = reconcile(cluster, clock)
    assert sorted(built) == sorted([short.pk, cancelled.pk])
    assert (result.finished, result.deleted) == (1, 1)
    short.refresh_from_db()
    steady.refresh_from_db()
    assert (short.state, steady.state) == (JobState.SUCCEEDED, JobState.RUNNING)


def test_a_mass_start_builds_no_job_models_and_writes_what_a_start_writes(cluster, clock, people, monkeypatch):
    jobs = launched(cluster, clock, people, 3)
    built = built_jobs(monkeypatch)
    result, _ = reconcile(cluster, clock)
    assert result.started == 3
    assert built == [], "an admitted job whose only news is its running pod is started from its row"
    for job in jobs:
        job.refresh_from_db()
        assert (job.state, job.wait_message, job.queue_position) == (JobState.RUNNING, "", None)
        assert job.pod_name.startswith(job.workload_name) and job.started_at is not None
        started = JobEvent.objects.get(job=job, kind=EventKind.STARTED)
        assert started.message == f"Started on {job.node_name} (pod {job.pod_name})."
        assert started.data == {"pod": job.pod_name}


def test_an_admitted_job_whose_pod_does_not_run_yet_takes_the_full_path(cluster, clock, people, monkeypatch):
    job = submit_job(people["alice"], command=["sleep", "3600"])
    admit(CycleResult(), clock.now)
    launch(cluster, CycleResult(), clock.now)  # the pod is created, its container not started yet
    built = built_jobs(monkeypatch)
    result, _ = reconcile(cluster, clock)
    assert result.started == 0 and built == [job.pk]
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    clock.advance(30)
    built.clear()
    assert reconcile(cluster, clock)[0].started == 1 and built == []
