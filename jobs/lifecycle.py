"""The one home of every Job state transition (Kueue's pkg/workload: evict, finish, patching).

    submit | submit_array → queued → admit → admitted → launch (workload created) → start → running
    → succeed | fail | lost;  queued/admitted/running → cancel;  admitted/running → preempt → preempting
    → requeue → queued;  a gang: admitted/running → restart → queued (a rank failed with retries left, or a
    rank was lost with its node)

Each transition runs in one transaction and is a conditional ``UPDATE … WHERE state = <the state it was read
in>``: a transition that lost a race (a cancel landing while the cycle starts the job, two cycles at once)
changes nothing and returns False, so a cancelled job is never resurrected. The winner writes the timeline
event, and the audit record for the transitions people and the scheduler are accountable for (submit,
resubmit, cancel, preempt, a priority change, an array's submission and its cancellation) — here and nowhere
else. The job cycle moves many jobs at once: the bulk forms (``write_admissions``, ``write_waits``, ``start_many``,
``insert_events``) live in jobs.lifecycle_bulk and are imported here; admissions need no per-row condition because
queued jobs change state only under the admission lock (``admission_lock``), which cancels and notebook stops
take too.

One time per fact: a start and an end are the cluster's instants (the container's ``startedAt`` and
``finishedAt``), not the moment a cycle noticed them, and the job's ``started_at``/``finished_at``, its timeline
line and its webhook event all carry that one instant (``cluster_instant`` keeps it between the workload's
creation and the cycle that saw it, whatever the cluster's clock says).

Every transition a team may want to hear about also emits its webhook event here (jobs.webhook_events: queued,
running, succeeded, failed, lost, cancelled, preempted), delivered once the transaction commits. No job transition
notifies its owner in the app today; the notebook culler tells owners about stopped notebooks itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

from django.db import connection, transaction
from django.utils import timezone

from core import audit
from core.notify import notify
from jobs import checkpoint_tokens, checkpoints, kinds, webhook_events
from jobs.choices import ACTIVE_STATES, CANCELLABLE_STATES, EventKind, JobAuditAction, JobState, WaitReason
from jobs.kick import kick_after_commit
from jobs.lifecycle_bulk import cluster_instant, started_text
from jobs.models import AdmissionLock, Job, JobArray, JobEvent

#: What the submit audit record keeps of the job.
SUBMIT_AUDIT_FIELDS = ["name", "image", "count", "priority", "preemptible", "state"]


# -- the admission lock ---------------------------------------------------------------------------------------


@contextmanager
def admission_lock(now: datetime | None = None) -> Iterator[None]:
    """A transaction that holds the admission lock until it commits.

    The admission cycle writes queued jobs in bulk under this lock; a cancel or a notebook stop that takes it
    can never race a cycle admitting the job it is ending. The lock row's UPDATE is the transaction's first
    statement: a row lock on PostgreSQL, the database write lock on SQLite."""
    AdmissionLock.objects.get_or_create(pk=1)
    with transaction.atomic():
        AdmissionLock.objects.filter(pk=1).update(at=now or timezone.now())
        yield


# -- the primitives -------------------------------------------------------------------------------------------


def _move(job: Job, expected: str, at: datetime, allowed: tuple[str, ...] = (), **changes) -> bool:
    """Conditional UPDATE of ``job`` from ``expected`` (one of ``allowed``, when given); on success the instance
    carries the new values."""
    if allowed and expected not in allowed:
        return False
    if "state" in changes:
        changes.setdefault("state_changed_at", at)
    if not Job.objects.filter(pk=job.pk, state=expected).update(**changes):
        return False
    for name, value in changes.items():
        setattr(job, name, value)
    return True


def event(job: Job | int, kind: str, message: str, at: datetime | None = None, **data) -> JobEvent:
    """One line of a job's timeline (also for what is not a state change: extended, warned, resubmitted)."""
    job_id = job if isinstance(job, int) else job.pk
    return JobEvent.objects.create(job_id=job_id, at=at or timezone.now(), kind=kind, message=message, data=data)


def _ended(job: Job) -> None:
    """The job reached a final state: its kind's bookkeeping (a notebook's session, say); its checkpoint tokens are
    revoked (they had stopped working with the state change already: jobs.checkpoint_tokens)."""
    kinds.for_job(job).on_end(job)
    checkpoint_tokens.revoke(job)


# -- submit ---------------------------------------------------------------------------------------------------


@transaction.atomic(savepoint=False)  # inside a caller's transaction, no savepoint: an error here ends it anyway
def submit(
    actor,
    message: str,
    *,
    at: datetime | None = None,
    verb: str | None = None,
    audit_after: dict | None = None,
    data: dict | None = None,
    **fields,
) -> Job:
    """Create a queued job from ``fields`` (the one place a Job row is born): its workload name, its first
    timeline line, its audit record (``verb``; notebook sessions are audited as the notebook's launch or start
    instead) and a kick for the cycle after commit."""
    fields.setdefault("wait_message", "Waiting for the next admission cycle.")
    job = Job.objects.create(state=JobState.QUEUED, **fields)
    job.workload_name = job.default_workload_name()
    # The same UPDATE as save(update_fields=...), built for half the CPU (no signal receiver listens to Job).
    Job.objects.filter(pk=job.pk).update(workload_name=job.workload_name)
    line = event(job, EventKind.SUBMITTED, message, at, **(data or {}))
    if verb is not None:
        after = audit.snapshot(job, SUBMIT_AUDIT_FIELDS) | (audit_after or {})
        audit.record(actor, verb, job, after=after, team=job.team)
    webhook_events.job(job, "job.queued", actor=actor, at=line.at)
    kick_after_commit()
    return job


@transaction.atomic
def submit_array(actor, array_fields: dict, message: str, *, data: dict | None = None, **fields) -> JobArray:
    """A job array and its ``array_fields["size"]`` tasks, each a queued job born through ``submit`` with its
    own timeline line, all in one transaction: the whole array is queued or nothing is. The array is audited
    once (the group action); its tasks are not audited one by one."""
    array = JobArray.objects.create(team=fields["team"], owner=fields["owner"], name=fields["name"], **array_fields)
    for index in range(array.size):
        submit(actor, f"{message} Task {index} of array #{array.pk}.", data=data, array=array, array_index=index,
               **fields)  # fmt: skip
    audit.record(
        actor,
        JobAuditAction.ARRAY_SUBMIT,
        array,
        after=audit.snapshot(array, ["name", "size", "parallelism"])
        | {f: fields[f] for f in SUBMIT_AUDIT_FIELDS if f in fields and f != "state"},
        team=array.team,
    )
    return array


def resubmitted(old: Job, new: Job, actor) -> None:
    """The ended job's timeline points at its resubmission (the new job was audited by ``submit``)."""
    event(old, EventKind.RESUBMITTED, f"Resubmitted by {actor.get_username()} as job #{new.pk}.", new_job=new.pk)


# -- bulk writes -------------------------------------------------------------------------------------------


def bulk_set(jobs: list[Job], fields: list[str]) -> None:
    """Write ``fields`` of many jobs in one round trip: a prepared UPDATE run with executemany (psycopg
    pipelines it; sqlite3 runs it in-process). Django's bulk_update builds CASE expressions that grow with
    the number of rows and take seconds for thousands of jobs."""
    if not jobs:
        return
    model_fields = [Job._meta.get_field(name) for name in fields]
    quote = connection.ops.quote_name
    assignments = ", ".join(f"{quote(f.column)} = %s" for f in model_fields)
    # Table and column names come from the model, never from input; values are parameters.
    sql = f"UPDATE {quote(Job._meta.db_table)} SET {assignments} WHERE {quote(Job._meta.pk.column)} = %s"  # noqa: S608
    rows = [[f.get_db_prep_save(getattr(job, f.attname), connection) for f in model_fields] + [job.pk] for job in jobs]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


# -- on the cluster -------------------------------------------------------------------------------------------


@transaction.atomic
def launched(job: Job, now: datetime, uid: str) -> bool:
    """The workload of an admitted job exists: recorded once (the first cycle to create it wins)."""
    if not Job.objects.filter(pk=job.pk, state=JobState.ADMITTED, workload_created_at__isnull=True).update(
        workload_uid=uid, workload_created_at=now
    ):
        return False
    job.workload_uid, job.workload_created_at = uid, now
    what = kinds.for_job(job).workload_text(job)
    event(job, EventKind.CREATED, f"{what} created in namespace {job.team.namespace}.", now, uid=uid)
    return True


def note_pod(job: Job, pod_name: str) -> None:
    """Remember the pod the workload runs in (not a state change)."""
    if pod_name and pod_name != job.pod_name:
        Job.objects.filter(pk=job.pk).update(pod_name=pod_name)
        job.pod_name = pod_name


@transaction.atomic
def explain_pending(job: Job, now: datetime, reason: str, text: str) -> None:
    """An admitted job still waits in the cluster: say why, in the cluster's words (once per new reason)."""
    if text == job.wait_message:
        return
    # The row, not this (possibly stale) object, decides: two cycles that overlap both hold the old message, and
    # only the one whose update changes the row records the event.
    if (
        Job.objects.filter(pk=job.pk, state=JobState.ADMITTED)
        .exclude(wait_message=text)
        .update(wait_reason=WaitReason.CLUSTER, wait_message=text, wait_detail={"reason": reason})
    ):
        job.wait_reason, job.wait_message, job.wait_detail = WaitReason.CLUSTER, text, {"reason": reason}
        event(job, EventKind.PENDING, text, now, reason=reason)


@transaction.atomic
def start(job: Job, now: datetime, started: datetime, pod_name: str) -> bool:
    """Admitted → running, at ``started`` (the cluster's instant, ``cluster_instant``)."""
    started = cluster_instant(started, not_before=job.workload_created_at, now=now)
    cleared = {"wait_reason": "", "wait_message": "", "queue_position": None}
    if not _move(
        job, JobState.ADMITTED, now, (JobState.ADMITTED,), state=JobState.RUNNING, started_at=started, **cleared
    ):
        return False
    event(job, EventKind.STARTED, started_text(job, pod_name), started, pod=pod_name)
    webhook_events.job(job, "job.running", at=started)
    kinds.for_job(job).on_start([job])
    return True


def _end_times(job: Job, now: datetime, changes: dict) -> dict:
    """``changes`` with the end (and a start first reported with it) as ``cluster_instant`` keeps them."""
    changes = dict(changes)
    if changes.get("started_at") is not None:
        changes["started_at"] = cluster_instant(changes["started_at"], not_before=job.workload_created_at, now=now)
    started = changes.get("started_at") or job.started_at
    changes["finished_at"] = cluster_instant(changes.get("finished_at"), not_before=started, now=now)
    return changes


def _started_unseen(job: Job, before: str) -> None:
    """A job that ended before any cycle saw it run (a short container between two cycles) still gets its start
    on the timeline, at the instant the cluster reported (no ``job.running`` webhook: the end's event carries
    ``started_at``)."""
    if before == JobState.ADMITTED and job.started_at is not None:
        event(job, EventKind.STARTED, started_text(job, job.pod_name), job.started_at, pod=job.pod_name)


@transaction.atomic
def succeed(
    job: Job, now: datetime, message: str, *, expected: str | None = None, data: dict | None = None, **changes
) -> bool:
    """Active → succeeded. ``changes``: finished_at, exit_code, started_at … as the cluster reported them."""
    before = expected or job.state
    changes = {"wait_reason": "", "wait_message": "", "queue_position": None} | _end_times(job, now, changes)
    if not _move(job, before, now, ACTIVE_STATES, state=JobState.SUCCEEDED, **changes):
        return False
    _started_unseen(job, before)
    event(job, EventKind.SUCCEEDED, message, job.finished_at, **(data or {}))
    webhook_events.job(job, "job.succeeded", message=message, at=job.finished_at)
    _ended(job)
    return True


@transaction.atomic
def fail(
    job: Job, now: datetime, message: str, *, expected: str | None = None, data: dict | None = None, **changes
) -> bool:
    """Active → failed, with the reason a person can act on."""
    before = expected or job.state
    changes = {"wait_reason": "", "wait_message": ""} | _end_times(job, now, changes)
    if not _move(job, before, now, ACTIVE_STATES, state=JobState.FAILED, **changes):
        return False
    _started_unseen(job, before)
    event(job, EventKind.FAILED, message, job.finished_at, **(data or {}))
    webhook_events.job(job, "job.failed", message=message, at=job.finished_at)
    _ended(job)
    return True


@transaction.atomic
def lose(job: Job, now: datetime) -> bool:
    """Active → lost: the workload vanished without the portal deleting it."""
    if not _move(job, job.state, now, ACTIVE_STATES, state=JobState.LOST, finished_at=now):
        return False
    message = f"Workload {job.workload_name} disappeared from the cluster without the portal deleting it."
    event(job, EventKind.LOST, message, now)
    webhook_events.job(job, "job.lost", message=message, at=now)
    _ended(job)
    return True


# -- people and the scheduler ---------------------------------------------------------------------------------


@transaction.atomic
def cancel(
    job: Job,
    now: datetime,
    message: str,
    *,
    actor=None,
    kind: str = EventKind.CANCELLED,
    data: dict | None = None,
    audited: bool = True,
    reason: str = "",
) -> bool:
    """Queued/admitted/running/preempting → cancelled: its quota is free at once; the next cycle deletes the
    workload. Audited as a cancel unless the caller audits the larger action (a notebook stop); ``reason`` (why
    someone cancelled it) goes into the timeline event's data and the audit record."""
    before = job.state
    cleared = {"wait_reason": "", "wait_message": "", "queue_position": None, "idle_since": None}
    if not _move(job, before, now, CANCELLABLE_STATES, state=JobState.CANCELLED, finished_at=now, **cleared):
        return False
    data = dict(data) if data is not None else {"previous_state": before}
    if reason:
        data["reason"] = reason
    event(job, kind, message, now, **data)
    checkpoint_tokens.revoke(job, now)
    webhook_events.job(job, "job.cancelled", actor=actor, reason=reason, message=message, at=now)
    if audited:
        after = {"state": job.state} | ({"reason": reason} if reason else {})
        audit.record(actor, JobAuditAction.JOB_CANCEL, job, before={"state": before}, after=after, team=job.team)
    kick_after_commit()
    return True


@transaction.atomic
def cancel_array(array: JobArray, now: datetime, actor) -> list[Job]:
    """Cancel every task of ``array`` that has not ended (each gets its timeline line), audited once for the
    group. Only inside ``admission_lock`` (a cycle never admits a task this cancels). Returns the tasks
    cancelled."""
    cancelled = []
    message = f"Cancelled with array #{array.pk} by {actor.get_username() if actor else 'the portal'}."
    for job in Job.objects.select_for_update().filter(array=array, state__in=CANCELLABLE_STATES).order_by("pk"):
        if cancel(job, now, message, actor=actor, audited=False):
            cancelled.append(job)
    audit.record(
        actor,
        JobAuditAction.ARRAY_CANCEL,
        array,
        after={"cancelled": [job.pk for job in cancelled]},
        team=array.team,
    )
    return cancelled


@transaction.atomic
def reprioritise(job: Job, now: datetime, priority: int, *, actor) -> bool:
    """A queued job's priority changes (not a state change, but the queue's order): conditional on the job still
    being queued, with a timeline line, an audit record (before/after) and a kick so the next cycle re-orders the
    queue. Only inside ``admission_lock``."""
    before = job.priority
    if priority == before:
        return False
    if not Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(priority=priority):
        return False
    job.priority = priority
    names = dict(job._meta.get_field("priority").choices)
    old, new = names.get(before, before), names.get(priority, priority)
    message = f"Priority changed from {old} to {new} by {actor.get_username()}."
    event(job, EventKind.PRIORITY, message, now, before=before, after=priority)
    audit.record(actor, JobAuditAction.JOB_PRIORITY, job, before={"priority": before}, after={"priority": priority},
                 team=job.team)  # fmt: skip
    kick_after_commit()
    return True


@transaction.atomic
def preempt(job: Job, now: datetime, stop_at: datetime, message: str, data: dict, *, actor=None,
            reason: str = "") -> bool:  # fmt: skip
    """Active → preempting: the job gets a notice (its timeline, the webhooks, and without an ``actor`` the owner's
    bell) and is stopped and requeued once ``stop_at`` passed. ``actor`` and ``reason``: the person whose decision
    it is (an admin forcing a node's drain) and why, for the audit log and the webhooks; the scheduler's own
    preemptions have neither. The GPU-hours a requeue loses are counted by ``requeue``."""
    if not _move(job, job.state, now, (JobState.ADMITTED, JobState.RUNNING), state=JobState.PREEMPTING,
                 preempt_at=stop_at):  # fmt: skip
        return False
    declared = job.checkpoint or {}
    if declared:
        data = {**data, "signal": declared.get("signal", "SIGTERM"), "grace_seconds": declared.get("grace_seconds")}
    event(job, EventKind.PREEMPT_NOTICE, message, now, **data)
    webhook_events.job(job, "job.preempted", actor=actor, reason=reason, message=message, stop_at=stop_at.isoformat(),
                       at=now, signal=declared.get("signal", "SIGTERM"))  # fmt: skip
    if actor is None:  # a person's preemption (a forced drain) tells the owner who and why itself (jobs.notices)
        words, url = job.owner_words()
        notify(job.owner, "job.preempted", f"Preemption notice: {words}", message, url)
    audit.record(actor, JobAuditAction.JOB_PREEMPT, job, after={**data, **({"reason": reason} if reason else {})})
    return True


@transaction.atomic
def requeue(job: Job, now: datetime, why: str) -> bool:
    """Preempting → queued for a new attempt (a new workload name, GPU time so far kept)."""
    node = job.node_name
    lost = checkpoints.lost_gpu_seconds(job, now)
    if not _move(
        job,
        job.state,
        now,
        (JobState.PREEMPTING,),
        state=JobState.QUEUED,
        preemption_lost_gpu_seconds=job.preemption_lost_gpu_seconds + lost,
        **_fresh_attempt(job, now),
    ):
        return False
    event(job, EventKind.REQUEUED, why, now, node=node, lost_gpu_hours=round(lost / 3600, 3))
    webhook_events.job(job, "job.queued", message=why, at=now)
    checkpoint_tokens.revoke(job, now)  # the next attempt gets its own
    return True


def asked_class_id(job: Job) -> int:
    """The class the job asked for: its own, unless its last admission was served by an alternative of that class
    (jobs.scheduling.decide rule 6; the admission's timeline line says which: lifecycle_bulk.ServedBy). One query."""
    admitted = JobEvent.objects.filter(job_id=job.pk, kind=EventKind.ADMITTED).order_by("-at", "-pk").first()
    asked = (admitted.data or {}).get("requested_class") if admitted is not None else None
    return int(asked) if asked else job.resource_class_id


def _fresh_attempt(job: Job, now: datetime) -> dict:
    """What a requeued job starts its next attempt with: a new workload name, no node, no pods, GPU time kept, and
    the class it asked for (an alternative served its last attempt: the next one tries its first choice again)."""
    charged = job.gpu_seconds(until=now) if job.started_at else job.charged_gpu_seconds
    return dict(
        resource_class_id=asked_class_id(job),
        node_name="",
        node_names=[],
        ranks=[],
        borrowed=False,
        preempt_at=None,
        workload_uid="",
        workload_created_at=None,
        workload_name=f"{job.default_workload_name()[:56]}-r{job.attempts}".rstrip("-"),
        pod_name="",
        started_at=None,
        admitted_at=None,
        charged_gpu_seconds=charged,
        wait_reason=WaitReason.CAPACITY,
        wait_message="Requeued; waiting for the next admission cycle.",
    )


# -- gangs (distributed jobs) ---------------------------------------------------------------------------------


def retries_used(job: Job) -> int:
    """How many times the whole gang was restarted after a failure (a loss with a node is not counted)."""
    return JobEvent.objects.filter(job_id=job.pk, kind=EventKind.REQUEUED, data__has_key="retry").count()


@transaction.atomic
def restart(job: Job, now: datetime, why: str, *, retry: int | None = None, data: dict | None = None) -> bool:
    """Admitted/running → queued: the whole gang was stopped (a rank failed with retries left, ``retry`` its
    number; or a rank was lost with its node, ``retry`` None) and is admitted again as a whole."""
    node = job.node_name
    if not _move(job, job.state, now, (JobState.ADMITTED, JobState.RUNNING), state=JobState.QUEUED,
                 **_fresh_attempt(job, now)):  # fmt: skip
        return False
    extra = {"node": node, **(data or {})} | ({"retry": retry} if retry is not None else {})
    event(job, EventKind.REQUEUED, why, now, **extra)
    webhook_events.job(job, "job.queued", message=why, at=now)
    checkpoint_tokens.revoke(job, now)  # the next attempt gets its own
    kick_after_commit()
    return True


def note_ranks(jobs: list[Job]) -> None:
    """Store what the cluster shows of each gang's ranks (``Job.ranks``), for the jobs whose ranks changed, in
    one write (not a state change; the cycle calls it only with changed ranks), with the rank order of their
    nodes (jobs.cycle.gang.align_nodes)."""
    bulk_set(jobs, ["ranks", "node_names", "node_name"])
