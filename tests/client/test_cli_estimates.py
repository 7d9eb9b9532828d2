"""A queued job's start-time estimate from the command line, against a live portal over HTTP: `jobs get --output
text` says it after why the job waits, and `jobs wait` (as `submit --wait`) says it on standard error before it
waits, and again each time it arrives or changes while it waits."""

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


def test_jobs_wait_says_the_estimate_when_it_arrives_and_again_when_it_changes(portal, gp, people, monkeypatch):
    """A job just submitted has no estimate yet: the wait says it once the cycle's refresh writes one, and says a
    changed one again, each once, while it keeps waiting."""
    from gpuportal import waiting

    job = submit_job(people["alice"], "vision", H100)
    now = timezone.now()
    steps = iter([now + timedelta(minutes=20), now + timedelta(minutes=20), now + timedelta(hours=2)])

    def each_long_poll(seconds):  # between two answers, the cycle's refresh writes an estimate (then moves it)
        low = next(steps, None)
        if low is not None:
            Job.objects.filter(pk=job.pk).update(
                estimated_start_low=low, estimated_start_high=low + timedelta(minutes=30), estimated_at=now
            )

    monkeypatch.setattr(waiting, "LONG_POLL_SECONDS", 0.05)
    monkeypatch.setattr(waiting, "sleep", each_long_poll)
    result = gp("jobs", "wait", str(job.pk), "--timeout", "2")
    said = [line for line in result.output.splitlines() if f"Job #{job.pk} is queued; it starts" in line]
    job.refresh_from_db()
    assert len(said) == 2, result.output
    assert said[-1] == f"Job #{job.pk} is queued; it starts {job.estimated_start}."
    assert said[0] != said[-1]
