"""Kept logs: every way a job ends keeps its container's log (once, however often the cycle runs), the cap keeps
the tail and says what was cut, old logs expire, and a job that never had a pod says so plainly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

from accounts.models import Team
from gpus.models import ResourceClass
from jobs import actions, logkeeping
from jobs.choices import JobState, StopReason
from jobs.models import Job, JobLog
from jobs.notebook.sessions import stop_notebook
from tests.factories import TRAINING_ENV, cycle, notebook_session, run_until, submit_job
from tests.sim_objects import A10


def test_a_succeeded_jobs_log_is_kept_once(cluster, clock, people, monkeypatch):
    job = submit_job(people["alice"], env=TRAINING_ENV)
    cycle(cluster, clock)
    run_until(cluster, clock, job, JobState.SUCCEEDED)
    [kept] = job.logs.all()
    assert kept.pod_name == job.pod_name and kept.container == "main" and kept.attempt == 1
    assert "finished after" in kept.text.splitlines()[-1] and kept.cut_bytes == 0 and not kept.note
    assert kept.total_bytes == len(kept.text.encode())
    reads = []
    monkeypatch.setattr(cluster, "stream_pod_log", lambda *a, **k: reads.append(a) or iter(()))
    cycle(cluster, clock, 10)
    cycle(cluster, clock, 10)
    assert reads == [] and job.logs.count() == 1  # kept already: the cycle neither reads nor writes it again


def test_a_failed_jobs_log_keeps_the_error(cluster, clock, people):
    job = submit_job(people["alice"], env=[{"name": "SIM_EXIT_CODE", "value": "3"}])
    cycle(cluster, clock)
    run_until(cluster, clock, job, JobState.FAILED)
    assert "exiting with code 3" in job.logs.get().text


def test_a_cancelled_running_jobs_log_is_kept_before_its_workload_is_deleted(cluster, clock, people):
    job = submit_job(people["alice"], command=["sleep", "3600"], env=TRAINING_ENV)
    cycle(cluster, clock)
    run_until(cluster, clock, job, JobState.RUNNING)
    cycle(cluster, clock, 30)
    actions.cancel_job(people["alice"], job)
    cycle(cluster, clock, 1)
    assert cluster.list_workloads("team-vision") == []
    kept = job.logs.get()
    assert kept.pod_name == job.pod_name and " step " in kept.text


def test_each_preempted_attempt_keeps_its_own_log(cluster, clock, people):
    admin = people["admin"]
    a10 = ResourceClass.objects.get(key=A10)
    actions.set_quota(admin, Team.objects.get(slug="nlp"), a10, 0, a10.allocatable)
    actions.set_quota(admin, Team.objects.get(slug="vision"), a10, 4, 8)
    borrowers = [
        submit_job(people["bob"], "nlp", A10, count=4, preemptible=True, command=["sleep", "3600"])
        for _ in range(a10.allocatable // 4)
    ]
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    submit_job(people["alice"], "vision", A10, count=4)
    cycle(cluster, clock, 1)
    victim = Job.objects.get(state=JobState.PREEMPTING)
    first_pod = victim.pod_name
    cycle(cluster, clock, 40)
    victim.refresh_from_db()
    assert victim.state == JobState.QUEUED and victim.pod_name == ""
    kept = victim.logs.get()
    assert (kept.pod_name, kept.attempt) == (first_pod, 1) and "starting" in kept.text
    assert victim.pk in [b.pk for b in borrowers]


def test_a_pod_that_never_ran_gets_a_note_instead_of_a_log(cluster, clock, people):
    job = submit_job(people["alice"], image="registry.example.com/team/doesnotexist:1.0")
    cycle(cluster, clock)
    run_until(cluster, clock, job, JobState.FAILED, step=10)
    kept = job.logs.get()
    assert kept.text == "" and "could not be read before the workload was deleted" in kept.note
    assert "waiting to start" in kept.note


def test_a_lost_job_keeps_nothing_and_says_why(cluster, clock, people):
    job = submit_job(people["alice"])
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    cluster.delete_workload("team-vision", job.workload_name)
    cycle(cluster, clock, 1)
    job.refresh_from_db()
    assert job.state == JobState.LOST and not job.logs.exists()
    assert "disappeared" in logkeeping.log_view(job, []).note


def test_keeping_is_level_triggered_for_an_ended_pod_still_there(cluster, clock, people):
    job = submit_job(people["alice"], env=TRAINING_ENV)
    cycle(cluster, clock)
    run_until(cluster, clock, job, JobState.SUCCEEDED)
    JobLog.objects.all().delete()  # as if the worker died between the state change and the keep
    cycle(cluster, clock, 5)
    assert "finished after" in job.logs.get().text


def test_a_stopped_notebooks_session_log_is_kept(cluster, clock, people):
    session = notebook_session(people["alice"])
    cycle(cluster, clock)
    job = run_until(cluster, clock, session.notebook.session, JobState.RUNNING)
    notebook = session.notebook
    notebook.refresh_from_db()
    assert stop_notebook(people["alice"], notebook, StopReason.USER, backend=cluster)
    assert cluster.list_workloads("team-vision") == []
    assert job.logs.get().pod_name == job.pod_name


def test_the_cap_keeps_the_tail_and_says_what_was_cut(cluster, clock, people, settings):
    settings.PORTAL_LOG_MAX_BYTES = 200
    job = submit_job(people["alice"], command=["sleep", "300"], env=TRAINING_ENV)
    cycle(cluster, clock)
    run_until(cluster, clock, job, JobState.SUCCEEDED, step=60)
    kept = job.logs.get()
    whole = "".join(cluster.stream_pod_log("team-vision", job.pod_name))
    assert kept.total_bytes == len(whole.encode()) > 200
    assert (
        len(kept.text.encode()) <= 200
        and whole.endswith(kept.text)
        and kept.text.startswith(whole[kept.cut_bytes :][:10])
    )
    assert kept.cut_bytes == kept.total_bytes - len(kept.text.encode())
    assert f"The first {kept.cut_bytes:,} bytes of this log were cut" in kept.cut_notice


@given(
    st.lists(st.text(st.characters(max_codepoint=127, exclude_characters="\n"), max_size=40), max_size=30),
    st.integers(1, 300),
)
def test_read_capped_keeps_exactly_the_last_bytes_within_the_cap(texts, cap):
    lines = [text + "\n" for text in texts]
    whole = "".join(lines)
    text, total, cut = logkeeping.read_capped(lines, cap)
    assert total == len(whole) and cut == total - len(text)
    assert len(text) <= cap and whole.endswith(text)
    assert cut == 0 if total <= cap else cut > 0


def test_one_line_longer_than_the_cap_keeps_its_end():
    assert logkeeping.read_capped(["a" * 10 + "END\n"], 4) == ("END\n", 14, 10)


def test_old_logs_expire_and_the_beat_runs_the_expiry(cluster, people, settings):
    settings.PORTAL_LOG_RETENTION_DAYS = 30
    job = submit_job(people["alice"])
    now = timezone.now()
    JobLog.objects.create(job=job, pod_name="old", text="x", kept_at=now - timedelta(days=31))
    JobLog.objects.create(job=job, pod_name="new", text="y", kept_at=now - timedelta(days=29))
    assert logkeeping.expire(now) == 1
    assert list(JobLog.objects.values_list("pod_name", flat=True)) == ["new"]
    assert settings.CELERY_BEAT_SCHEDULE["expire-logs"]["task"] == "jobs.tasks.expire_logs"


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (JobState.QUEUED, "waits in the queue and has no pod"),
        (JobState.CANCELLED, "This job never started a pod: it waited in the queue for 5 min and was cancelled"),
        (JobState.FAILED, "never started a pod that ran"),
    ],
)
def test_a_job_without_a_pod_says_so_plainly(cluster, people, state, words):
    job = submit_job(people["alice"])
    Job.objects.filter(pk=job.pk).update(
        state=state, submitted_at=timezone.now() - timedelta(minutes=5), finished_at=timezone.now(), pod_name=""
    )
    job.refresh_from_db()
    view = logkeeping.log_view(job, [])
    assert words in view.note and not view.live and view.kept is None
