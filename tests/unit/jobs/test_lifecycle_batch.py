"""lifecycle_bulk.start_many, the batched start of a mass start: one conditional UPDATE … RETURNING per chunk of jobs,
so its round trips do not grow with the number of jobs, and a job cancelled between the cycle's read and the
write stays cancelled and gets no timeline line and no webhook; the jobs that moved get both."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core import webhooks
from core.models import Delivery, Webhook
from jobs import lifecycle_bulk
from jobs.choices import EventKind, JobState
from jobs.models import Job, JobEvent
from tests.factories import submit_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)


def admitted(people, n: int) -> list[Job]:
    jobs = [submit_job(people["alice"], preemptible=True) for _ in range(n)]
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(state=JobState.ADMITTED, node_name="gpu-h100-01")
    return list(Job.objects.filter(pk__in=[j.pk for j in jobs]).select_related("team").order_by("pk"))


def test_a_batched_start_skips_a_job_cancelled_between_read_and_write(
    people,
    cluster,
    django_capture_on_commit_callbacks,
):
    hook = Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/", events=["job.*"])
    jobs = admitted(people, 3)
    victim = jobs[1]
    # The cycle read all three as admitted; a cancel lands before its write.
    Job.objects.filter(pk=victim.pk).update(state=JobState.CANCELLED)
    Delivery.objects.all().delete()
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        moved = lifecycle_bulk.start_many([(job, now, f"pod-{job.pk}") for job in jobs], now)
    assert [j.pk for j in moved] == [jobs[0].pk, jobs[2].pk]
    states = dict(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", "state"))
    assert states == {jobs[0].pk: JobState.RUNNING, victim.pk: JobState.CANCELLED, jobs[2].pk: JobState.RUNNING}
    for job in moved:
        row = Job.objects.get(pk=job.pk)
        assert (row.pod_name, row.started_at, row.wait_message) == (f"pod-{job.pk}", now, "")
        assert job.state == JobState.RUNNING and job.pod_name == f"pod-{job.pk}"
    started = JobEvent.objects.filter(kind=EventKind.STARTED)
    assert sorted(started.values_list("job_id", flat=True)) == [jobs[0].pk, jobs[2].pk]
    assert started.get(job_id=jobs[0].pk).data == {"pod": f"pod-{jobs[0].pk}"}
    sent = [(d.event_type, d.payload["data"]["job"], d.payload["data"]["state"], d.payload["data"]["owner"])
            for d in Delivery.objects.filter(webhook=hook).order_by("id")]  # fmt: skip
    assert sent == [("job.running", jobs[0].pk, "running", "alice"), ("job.running", jobs[2].pk, "running", "alice")]
    # The same start again moves nothing (every job was read as admitted, none still is).
    assert lifecycle_bulk.start_many([(job, now, "pod-x") for job in jobs], now) == []
    assert JobEvent.objects.filter(kind=EventKind.STARTED).count() == 2


def queries_of_a_mass_start(people, n: int, capture) -> int:
    jobs = admitted(people, n)
    now = timezone.now()
    with CaptureQueriesContext(connection) as queries, capture(execute=True):
        moved = lifecycle_bulk.start_many([(job, now, f"pod-{job.pk}") for job in jobs], now)
    assert len(moved) == n
    return len(queries)


def test_the_queries_of_a_mass_start_do_not_grow_with_the_jobs(people, cluster, django_capture_on_commit_callbacks):
    Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/", events=["job.running"])
    few = queries_of_a_mass_start(people, 5, django_capture_on_commit_callbacks)
    many = queries_of_a_mass_start(people, 20, django_capture_on_commit_callbacks)
    assert few == many
    assert Delivery.objects.filter(event_type="job.running").count() == 25


def test_a_mass_start_is_written_in_chunks_of_a_fixed_size(people, cluster, monkeypatch):
    monkeypatch.setattr(lifecycle_bulk, "BATCH_SIZE", 4)
    jobs = admitted(people, 10)
    now = timezone.now()
    with CaptureQueriesContext(connection) as queries:
        moved = lifecycle_bulk.start_many([(job, now, "pod") for job in jobs], now)
    assert len(moved) == 10
    updates = [q["sql"] for q in queries if q["sql"].lstrip().upper().startswith("WITH")]
    assert len(updates) == 3  # 4 + 4 + 2
