"""`gpuportal checkpoint` inside a job that reports its checkpoints by token (issue 34, item 3): it reads the token
and the address from the job's environment (PORTAL_CHECKPOINT_TOKEN, PORTAL_CHECKPOINT_URL), needs no login, and
says what is wrong when they are missing or the token no longer works. Against a live portal over HTTP."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from gpuportal import report_checkpoint_from_job
from jobs.choices import EventKind, JobState
from jobs.models import Job, JobCheckpointToken
from tests.factories import job_in_state

BY_TOKEN = {"signal": "SIGUSR1", "grace_seconds": 60, "report": "token"}


def running_with_token(owner) -> tuple[Job, str]:
    """A running job that reports by token, with the token its attempt would get (as launch mints it)."""
    job = job_in_state(owner, JobState.RUNNING, checkpoint=BY_TOKEN)
    job.workload_name = job.default_workload_name()
    earlier = timezone.now() - timedelta(hours=1)
    Job.objects.filter(pk=job.pk).update(workload_name=job.workload_name, started_at=earlier)
    _, raw = JobCheckpointToken.mint(job.pk, job.workload_name)
    return job, raw


def test_checkpoint_reads_the_token_and_address_from_the_jobs_environment(portal, gp, people, monkeypatch):
    job, raw = running_with_token(people["alice"])
    monkeypatch.setenv("PORTAL_CHECKPOINT_URL", f"{portal.url}/api/v1/jobs/{job.pk}/checkpoint/")
    monkeypatch.setenv("PORTAL_CHECKPOINT_TOKEN", raw)
    result = gp("checkpoint", login=False)
    assert result.exit_code == 0, result.output
    assert f"Job #{job.pk}: last checkpoint" in result.output
    line = Job.objects.get(pk=job.pk).events.get(kind=EventKind.CHECKPOINT)
    assert line.data["via"] == "token"
    # The library call is the same door.
    assert report_checkpoint_from_job()["id"] == job.pk
    # Once the job ends, the token no longer works, and the command says so with the portal's words.
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    ended = gp("checkpoint", login=False)
    assert ended.exit_code == 4 and "HTTP 401" in ended.output and "no longer works" in ended.output


def test_checkpoint_outside_a_token_job_says_what_is_missing(portal, gp, monkeypatch):
    for name in ("PORTAL_CHECKPOINT_URL", "PORTAL_CHECKPOINT_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    missing = gp("checkpoint", login=False)
    assert missing.exit_code == 4
    assert "PORTAL_CHECKPOINT_URL and PORTAL_CHECKPOINT_TOKEN are not set" in missing.output
    assert "gpuportal jobs checkpoint JOB_ID" in missing.output
    monkeypatch.setenv("PORTAL_CHECKPOINT_URL", f"{portal.url}/api/v1/jobs/")
    monkeypatch.setenv("PORTAL_CHECKPOINT_TOKEN", "gpc_x_y")
    wrong = gp("checkpoint", login=False)
    assert wrong.exit_code == 4 and "not a job's checkpoint address" in wrong.output
