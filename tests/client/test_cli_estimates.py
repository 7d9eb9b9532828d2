"""A queued job's start-time estimate from the command line, against a live portal over HTTP: `jobs get --output
text` says it after why the job waits, and `jobs wait` (as `submit --wait`) says it on standard error before it
waits."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from jobs.models import Job
from tests.factories import submit_job

from .conftest import H100


def estimated(people) -> Job:
    job = submit_job(people["alice"], "vision", H100)
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(
        wait_message="Waiting for capacity.",
        estimated_start_low=now + timedelta(minutes=20),
        estimated_start_high=now + timedelta(minutes=65),
        estimated_at=now,
    )
    job.refresh_from_db()
    return job


def test_jobs_get_says_when_it_is_likely_to_start(portal, gp, people):
    job = estimated(people)
    result = gp("jobs", "get", str(job.pk), "--output", "text")
    assert result.exit_code == 0, result.output
    assert f"Estimated start: {job.estimated_start}." in result.output
    assert job.estimated_start.startswith("likely ")


def test_jobs_wait_says_it_before_waiting(portal, gp, people):
    job = estimated(people)
    result = gp("jobs", "wait", str(job.pk), "--timeout", "0.1")
    assert f"Job #{job.pk} is queued; it starts {job.estimated_start}." in result.output
