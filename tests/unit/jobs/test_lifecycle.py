"""jobs.lifecycle is the one home of job state transitions: each refuses a job that changed meanwhile (the
conditional UPDATE), and the winner writes exactly one timeline event and, where it is accountable, one audit
record. The admission lock is one helper, taken by the cycle, cancels and notebook stops."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from core.models import AuditEvent
from jobs import actions, lifecycle
from jobs.choices import EventKind, JobAuditAction, JobState, StopReason
from jobs.cycle.admit import admit
from jobs.cycle.result import CycleResult
from jobs.models import AdmissionLock, Job
from jobs.notebook import sessions as notebooks
from tests.factories import job_in_state, notebook_session, submit_job


def audits(job: Job, action: str) -> int:
    return AuditEvent.objects.filter(object_id=str(job.pk), action=action).count()


# (name, state the job is read in, the call) — every transition a job can go through one at a time.
TRANSITIONS = [
    ("start", JobState.ADMITTED, lambda job, now: lifecycle.start(job, now, now, "pod-1")),
    ("succeed", JobState.RUNNING, lambda job, now: lifecycle.succeed(job, now, "Succeeded.", exit_code=0)),
    ("fail", JobState.RUNNING, lambda job, now: lifecycle.fail(job, now, "Failed.", exit_code=1)),
    ("lose", JobState.RUNNING, lambda job, now: lifecycle.lose(job, now)),
    ("cancel", JobState.RUNNING, lambda job, now: lifecycle.cancel(job, now, "Cancelled.")),
    ("preempt", JobState.RUNNING, lambda job, now: lifecycle.preempt(job, now, now, "Notice.", {"for_job": 1})),
    ("requeue", JobState.PREEMPTING, lambda job, now: lifecycle.requeue(job, now, "Requeued.")),
    ("launched", JobState.ADMITTED, lambda job, now: lifecycle.launched(job, now, "uid-1")),
]
EVENT_OF = {
    "start": EventKind.STARTED, "succeed": EventKind.SUCCEEDED, "fail": EventKind.FAILED, "lose": EventKind.LOST,
    "cancel": EventKind.CANCELLED, "preempt": EventKind.PREEMPT_NOTICE, "requeue": EventKind.REQUEUED,
    "launched": EventKind.CREATED,
}  # fmt: skip
AUDITED = {"cancel": JobAuditAction.JOB_CANCEL, "preempt": JobAuditAction.JOB_PREEMPT}


@pytest.mark.parametrize(("name", "state", "call"), TRANSITIONS, ids=[t[0] for t in TRANSITIONS])
def test_a_transition_refuses_a_job_that_changed_meanwhile(cluster, people, name, state, call):
    job = job_in_state(people["alice"], state, preemptible=True)
    events = job.events.count()
    # Someone else (a cancel, another cycle) moved the job after it was read.
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    assert call(job, timezone.now()) is False
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    assert job.events.count() == events
    assert all(audits(job, verb) == 0 for verb in AUDITED.values())


@pytest.mark.parametrize(("name", "state", "call"), TRANSITIONS, ids=[t[0] for t in TRANSITIONS])
def test_a_transition_writes_one_event_and_its_audit_record(cluster, people, name, state, call):
    job = job_in_state(people["alice"], state, preemptible=True)
    before = set(job.events.values_list("pk", flat=True))
    assert call(job, timezone.now()) is True
    new = job.events.exclude(pk__in=before)
    assert list(new.values_list("kind", flat=True)) == [EVENT_OF[name]]
    for verb in AUDITED.values():
        assert audits(job, verb) == (1 if AUDITED.get(name) == verb else 0)
    # The instance carries what was written, and the same transition again changes nothing.
    assert Job.objects.get(pk=job.pk).state == job.state
    assert call(job, timezone.now()) is False
    assert job.events.exclude(pk__in=before).count() == 1


def test_submit_writes_the_event_and_the_audit_record(cluster, people):
    job = submit_job(people["alice"], preemptible=True)
    assert list(job.events.values_list("kind", flat=True)) == [EventKind.SUBMITTED]
    assert audits(job, JobAuditAction.JOB_SUBMIT) == 1


def test_explain_pending_says_it_once_and_only_for_an_admitted_job(cluster, people):
    job = job_in_state(people["alice"], JobState.ADMITTED, preemptible=True)
    now = timezone.now()
    lifecycle.explain_pending(job, now, "Unschedulable", "Pending in the cluster: Unschedulable")
    lifecycle.explain_pending(job, now, "Unschedulable", "Pending in the cluster: Unschedulable")
    assert job.events.filter(kind=EventKind.PENDING).count() == 1
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    lifecycle.explain_pending(job, now, "Other", "Pending in the cluster: Other")
    assert job.events.filter(kind=EventKind.PENDING).count() == 1


def test_two_overlapping_cycles_with_stale_copies_explain_a_pending_job_once(cluster, people):
    """Seen in the demo: two cycles each held the job from before either wrote, and both wrote the event."""
    job = job_in_state(people["alice"], JobState.ADMITTED, preemptible=True)
    first, second = Job.objects.get(pk=job.pk), Job.objects.get(pk=job.pk)
    now = timezone.now()
    lifecycle.explain_pending(first, now, "ContainerCreating", "Pending in the cluster: ContainerCreating")
    lifecycle.explain_pending(second, now, "ContainerCreating", "Pending in the cluster: ContainerCreating")
    assert job.events.filter(kind=EventKind.PENDING).count() == 1


def test_the_admission_lock_is_held_in_a_transaction_that_rolls_back_as_one(cluster, people):
    job = submit_job(people["alice"], preemptible=True)
    at = timezone.now() - timedelta(minutes=5)
    with pytest.raises(RuntimeError), lifecycle.admission_lock(at):
        assert connection.in_atomic_block
        assert AdmissionLock.objects.get(pk=1).at == at
        lifecycle.cancel(job, at, "Cancelled.")
        raise RuntimeError("crash half-way")
    job.refresh_from_db()
    assert job.state == JobState.QUEUED  # nothing of the cancel survived
    with lifecycle.admission_lock(at):
        pass
    assert AdmissionLock.objects.count() == 1


@pytest.fixture
def lock_calls(monkeypatch):
    calls = []
    real = lifecycle.admission_lock

    def spy(now=None):
        calls.append(transaction.get_connection().in_atomic_block)
        return real(now)

    monkeypatch.setattr(lifecycle, "admission_lock", spy)
    return calls


def test_the_cycle_cancel_and_notebook_stop_take_the_one_admission_lock(cluster, people, lock_calls):
    admit(CycleResult())
    assert len(lock_calls) == 1
    actions.cancel_job(people["alice"], submit_job(people["alice"], preemptible=True))
    assert len(lock_calls) == 2
    nb = notebook_session(people["alice"]).notebook
    assert notebooks.stop_notebook(people["alice"], nb, StopReason.USER)
    assert len(lock_calls) == 3
    session = Job.objects.get(pk=nb.session_id)
    assert session.state == JobState.CANCELLED
    assert list(session.events.filter(kind=EventKind.STOPPED).values_list("data", flat=True)) == [
        {"previous": JobState.QUEUED}
    ]
    # The notebook's stop is audited, not the session's cancel.
    assert audits(session, JobAuditAction.JOB_CANCEL) == 0
