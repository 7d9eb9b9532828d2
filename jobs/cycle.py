"""One job cycle: reconcile jobs with the cluster, admit and place queued work, create the workloads.

Three steps, each safe to run concurrently with itself and after a crash:

- ``reconcile_jobs`` reads the portal's workloads and pods (two list calls) and moves jobs through their
  states; every transition is a conditional UPDATE on the state it was read in, so a job cancelled meanwhile
  is never resurrected.
- ``admit`` takes the AdmissionLock row inside one transaction, builds a snapshot with a constant number of
  queries, runs ``jobs.admission.decide`` and writes the decisions.
- ``launch`` creates the workload of every admitted job that has none yet. Workload names are derived from
  the job id and creation is idempotent, so a crash between "create" and "save" never yields two workloads.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from accounts import audit
from accounts.models import Team
from cluster.base import ClusterBackend, ClusterError, Invalid
from gpus.models import Node, ResourceClass
from gpus.nodeconfig import reconfiguring_node_names
from vocab.gfd import parse_quantity

from . import admission
from .choices import ACTIVE_STATES, EventKind, JobAuditAction, JobState, WaitReason
from .models import AdmissionLock, FairShare, Job, JobEvent, Quota
from .render import JOB_ID_LABEL, render_job, render_notebook_service, render_notebook_volume
from .usage import month_gpu_hours
from .validation import version_tuple

log = logging.getLogger(__name__)

#: Label the Job controller puts on the pods of a Job (batch/v1), with the Job's name.
JOB_NAME_LABEL = "job-name"


@dataclass
class CycleResult:
    admitted: int = 0
    preempted: int = 0
    requeued: int = 0
    waiting: int = 0
    launched: int = 0
    started: int = 0
    finished: int = 0
    failed: int = 0
    lost: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


def run_cycle(backend: ClusterBackend, now: datetime | None = None) -> CycleResult:
    result = CycleResult()
    try:
        reconcile_jobs(backend, result, now)
    except ClusterError as error:
        result.errors.append(f"reconcile: {error}")
        log.warning("job reconcile failed: %s", error)
    admit(result, now)
    launch(backend, result, now)
    log.info("job cycle: %s", {k: v for k, v in result.as_dict().items() if v})
    return result


# -- transitions ----------------------------------------------------------------------------------------------


def _transition(
    job: Job, expected: str, event: tuple[str, str, dict] | None = None, at: datetime | None = None, **changes
) -> bool:
    """Move ``job`` from ``expected`` to the values in ``changes``; False if it was changed meanwhile. The
    timeline event, if any, is stamped ``at`` (the cycle's time)."""
    at = at or timezone.now()
    if "state" in changes:
        changes.setdefault("state_changed_at", at)
    updated = Job.objects.filter(pk=job.pk, state=expected).update(**changes)
    if not updated:
        return False
    for name, value in changes.items():
        setattr(job, name, value)
    if event is not None:
        kind, message, data = event
        JobEvent.objects.create(job=job, at=at, kind=kind, message=message, data=data)
    return True


def _ts(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _condition(obj: dict, kind: str) -> dict | None:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind and condition.get("status") == "True":
            return condition
    return None


def _container_state(pod: dict | None) -> tuple[str, dict]:
    if not pod:
        return "", {}
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        for kind in ("terminated", "running", "waiting"):
            if kind in (status.get("state") or {}):
                return kind, status["state"][kind]
        last = (status.get("lastState") or {}).get("terminated")
        if last:
            return "terminated", last
    return "", {}


def _requeue(job: Job, now: datetime, why: str) -> bool:
    charged = job.gpu_seconds(until=now) if job.started_at else job.charged_gpu_seconds
    return _transition(
        job,
        job.state,
        (EventKind.REQUEUED, why, {"node": job.node_name}),
        at=now,
        state=JobState.QUEUED,
        node_name="",
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


def reconcile_jobs(backend: ClusterBackend, result: CycleResult, now: datetime | None = None) -> None:
    now = now or timezone.now()
    # A job may have more than one workload for a while: a requeued job's earlier attempt is still being
    # deleted when the next one is created. So workloads are looked up by name, and pods by their Job's name.
    workloads: dict[str, dict] = {}
    attempts: dict[str, list[dict]] = defaultdict(list)
    for workload in backend.list_workloads():
        job_id = (workload["metadata"].get("labels") or {}).get(JOB_ID_LABEL)
        if job_id:
            workloads[workload["metadata"]["name"]] = workload
            attempts[job_id].append(workload)
    pods: dict[str, dict] = {}
    for pod in backend.list_pods():
        owner = (pod["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)
        if owner and pod["metadata"].get("creationTimestamp", "") >= pods.get(owner, {}).get("metadata", {}).get(
            "creationTimestamp", ""
        ):
            pods[owner] = pod

    jobs = Job.objects.filter(
        Q(state__in=ACTIVE_STATES) | Q(pk__in=[int(i) for i in attempts if i.isdigit()])
    ).select_related("team", "resource_class")
    for job in jobs:
        current = workloads.get(job.workload_name) if job.workload_name else None
        for leftover in attempts.get(str(job.pk), []):
            stale = leftover is not current or job.state in (JobState.CANCELLED, JobState.QUEUED)
            if stale and not _condition(leftover, "Complete"):
                if backend.delete_workload(job.team.namespace, leftover["metadata"]["name"]):
                    result.deleted += 1
        if job.state == JobState.PREEMPTING and job.preempt_at and job.preempt_at <= now:
            if current is not None and backend.delete_workload(job.team.namespace, job.workload_name):
                result.deleted += 1
            if _requeue(job, now, "Preempted after its grace period to return borrowed capacity; requeued."):
                result.requeued += 1
            continue
        workload, pod = current, pods.get(job.workload_name)
        if job.state not in ACTIVE_STATES:
            continue
        if job.workload_created_at is None:
            continue  # launch has not created it yet
        if workload is None:
            if _transition(
                job,
                job.state,
                (
                    EventKind.LOST,
                    f"Workload {job.workload_name} disappeared from the cluster without the portal deleting it.",
                    {},
                ),
                at=now,
                state=JobState.LOST,
                finished_at=now,
            ):
                result.lost += 1
            continue
        _follow(job, workload, pod, result, now, backend)


def _follow(job: Job, workload: dict, pod: dict | None, result: CycleResult, now: datetime, backend) -> None:
    kind, detail = _container_state(pod)
    pod_name = pod["metadata"]["name"] if pod else ""
    if pod_name and pod_name != job.pod_name:
        Job.objects.filter(pk=job.pk).update(pod_name=pod_name)
        job.pod_name = pod_name
    complete, failed = _condition(workload, "Complete"), _condition(workload, "Failed")
    if complete or failed or kind == "terminated":
        if kind == "terminated":
            exit_code = detail.get("exitCode")
            reason = detail.get("reason") or ""
            finished = _ts(detail.get("finishedAt")) or now
            started = _ts(detail.get("startedAt"))
        else:
            exit_code, reason, finished, started = (
                None,
                "",
                _ts((complete or failed).get("lastTransitionTime")) or now,
                None,
            )
        if failed and failed.get("reason") == "DeadlineExceeded":
            reason = "DeadlineExceeded"
        succeeded = bool(complete) or (kind == "terminated" and exit_code == 0 and not failed)
        if succeeded:
            message = f"Succeeded on {job.node_name}."
            state, event = JobState.SUCCEEDED, EventKind.SUCCEEDED
        else:
            state, event = JobState.FAILED, EventKind.FAILED
            message = {
                "OOMKilled": f"Killed for running out of memory (limit {job.memory_mb} MiB); ask for more memory.",
                "DeadlineExceeded": (
                    f"Stopped by Kubernetes after its maximum runtime of {job.max_runtime_seconds // 60} minutes "
                    "(activeDeadlineSeconds)."
                ),
            }.get(reason, f"Failed with exit code {exit_code}." if exit_code is not None else "Failed.")
            if failed and reason not in ("OOMKilled", "DeadlineExceeded") and failed.get("message"):
                message += f" Kubernetes: {failed['message']}"
        changes = {"state": state, "finished_at": finished, "exit_code": exit_code, "failure_reason": reason[:60]}
        if started and not job.started_at:
            changes["started_at"] = started
        changes.update(wait_reason="", wait_message="", queue_position=None)
        if _transition(job, job.state, (event, message, {"exit_code": exit_code, "reason": reason}), now, **changes):
            result.finished += succeeded
            result.failed += not succeeded
        return
    if kind == "running" and job.state == JobState.ADMITTED:
        started = _ts(detail.get("startedAt")) or now
        if _transition(
            job,
            JobState.ADMITTED,
            (EventKind.STARTED, f"Started on {job.node_name} (pod {pod_name}).", {"pod": pod_name}),
            at=now,
            state=JobState.RUNNING,
            started_at=started,
            wait_reason="",
            wait_message="",
            queue_position=None,
        ):
            result.started += 1
        return
    if job.state != JobState.ADMITTED:
        return
    # Still not running: say why, in the cluster's words.
    reason, message = "", ""
    if kind == "waiting":
        reason, message = detail.get("reason", ""), detail.get("message", "")
    elif pod is not None:
        scheduled = next(
            (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "PodScheduled"), None
        )
        if scheduled and scheduled.get("status") == "False":
            reason, message = scheduled.get("reason", ""), scheduled.get("message", "")
    if reason in ("ImagePullBackOff", "InvalidImageName"):
        text = f"The image {job.image} cannot be pulled ({reason}): {message}"
        if _transition(
            job,
            JobState.ADMITTED,
            (EventKind.FAILED, text, {"reason": reason}),
            at=now,
            state=JobState.FAILED,
            failure_reason=reason,
            finished_at=now,
            wait_reason="",
            wait_message="",
        ):
            result.failed += 1
            backend.delete_workload(job.team.namespace, workload["metadata"]["name"])
        return
    if reason:
        text = f"Pending in the cluster: {reason}" + (f": {message}" if message else "")
        if text != job.wait_message:
            Job.objects.filter(pk=job.pk, state=JobState.ADMITTED).update(
                wait_reason=WaitReason.CLUSTER, wait_message=text, wait_detail={"reason": reason}
            )
            JobEvent.objects.create(job=job, at=now, kind=EventKind.PENDING, message=text, data={"reason": reason})


# -- admission ------------------------------------------------------------------------------------------------


def _millicores(value) -> int:
    try:
        return int(parse_quantity(value or 0) * 1000)
    except ValueError:
        return 0


def _mebibytes(value) -> int:
    try:
        return int(parse_quantity(value or 0) / (1024 * 1024))
    except ValueError:
        return 0


def build_snapshot(now: datetime) -> tuple[admission.Snapshot, dict[int, Job]]:
    """Everything admission needs, in a constant number of queries."""
    classes = {
        rc.id: admission.ClassView(rc.id, rc.resource_name, rc.product_label, rc.gpu_fraction, rc.display_name)
        for rc in ResourceClass.objects.all()
    }
    queued = list(
        Job.objects.filter(state=JobState.QUEUED).only(
            "id", "team_id", "resource_class_id", "count", "cpu_millicores", "memory_mb", "priority", "preemptible",
            "submitted_at", "max_runtime_seconds", "wait_reason", "wait_message", "wait_detail", "queue_position",
            "state", "attempts", "name", "image_cuda",
        )
    )  # fmt: skip
    active = list(
        Job.objects.filter(state__in=ACTIVE_STATES).only(
            "id", "team_id", "resource_class_id", "count", "cpu_millicores", "memory_mb", "priority", "preemptible",
            "submitted_at", "max_runtime_seconds", "node_name", "borrowed", "state", "name", "image_cuda",
        )
    )  # fmt: skip
    portal_on_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in active:
        rc = classes.get(job.resource_class_id)
        if rc is not None and job.node_name:
            held = portal_on_node[job.node_name]
            held[rc.resource_name] += job.count
            held["cpu_m"] += job.cpu_millicores
            held["memory_mb"] += job.memory_mb
    nodes = {}
    # A node whose GPUs are being reconfigured (MIG layout, time-slicing) takes no new work until it is done.
    reconfiguring = reconfiguring_node_names()
    for node in Node.objects.present().exclude(product_label=""):
        external = node.external_requests or {}
        held = portal_on_node.get(node.name, {})
        allocatable = {
            r: int(v) for r, v in node.allocatable.items() if r.startswith("nvidia.com/") and str(v).isdigit()
        }
        cpu = _millicores(node.allocatable.get("cpu")) - int(external.get("cpu_m", 0))
        memory = _mebibytes(node.allocatable.get("memory")) - int(external.get("memory_mb", 0))
        nodes[node.name] = admission.NodeView(
            name=node.name,
            product_label=node.product_label,
            team=node.team_id,
            schedulable=node.ready and not node.unschedulable and node.name not in reconfiguring,
            allocatable=allocatable,
            free={r: n - int(external.get(r, 0)) - held.get(r, 0) for r, n in allocatable.items()},
            cpu_free_m=cpu - held.get("cpu_m", 0),
            memory_free_mb=memory - held.get("memory_mb", 0),
            cpu_capacity_m=cpu,
            memory_capacity_mb=memory,
            cuda=version_tuple(node.cuda_version) if node.cuda_version else (),
        )
    budgeted = set(Quota.objects.filter(monthly_gpu_hours__isnull=False).values_list("team_id", "resource_class_id"))
    used_hours = month_gpu_hours({team for team, _ in budgeted}, now) if budgeted else {}
    quotas = {
        (q.team_id, q.resource_class_id): admission.QuotaView(
            q.guaranteed,
            q.limit,
            float(q.monthly_gpu_hours) if q.monthly_gpu_hours is not None else None,
            used_hours.get((q.team_id, q.resource_class_id), 0.0),
        )
        for q in Quota.objects.all()
    }
    shares = {fs.team_id: fs for fs in FairShare.objects.all()}
    half_life = settings.PORTAL_FAIR_SHARE_HALF_LIFE

    def view(job: Job) -> admission.JobView:
        return admission.JobView(
            id=job.id,
            team=job.team_id,
            class_id=job.resource_class_id,
            count=job.count,
            cpu_m=job.cpu_millicores,
            memory_mb=job.memory_mb,
            priority=job.priority,
            preemptible=job.preemptible,
            submitted=job.submitted_at.timestamp(),
            max_runtime_s=job.max_runtime_seconds,
            node=getattr(job, "node_name", "") if job.state != JobState.QUEUED else "",
            borrowed=job.borrowed if job.state != JobState.QUEUED else False,
            preempting=job.state == JobState.PREEMPTING,
            cuda=version_tuple(job.image_cuda) if getattr(job, "image_cuda", "") else (),
        )

    recent = {}
    for team_id, fs in shares.items():
        age = max(0.0, (now - fs.updated).total_seconds())
        recent[team_id] = fs.average_units * 0.5 ** (age / half_life)
    snap = admission.Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        classes=classes,
        quotas=quotas,
        queued=[view(j) for j in queued],
        active=[view(j) for j in active],
        recent_average=recent,
        team_names=dict(Team.objects.values_list("id", "name")),
        patience=settings.PORTAL_BACKFILL_PATIENCE,
    )
    return snap, {j.id: j for j in queued} | {j.id: j for j in active}


def admit(result: CycleResult, now: datetime | None = None) -> admission.Decisions:
    now = now or timezone.now()
    AdmissionLock.objects.get_or_create(pk=1)
    with transaction.atomic():
        # First statement of the transaction: serialises cycles (row lock on PostgreSQL, write lock on SQLite).
        lock_admission(now)
        snap, jobs = build_snapshot(now)
        decisions = admission.decide(snap)
        _apply(decisions, jobs, now, result)
        _update_fair_share(snap, now)
    return decisions


ADMIT_FIELDS = [
    "state", "state_changed_at", "node_name", "borrowed", "admitted_at", "attempts", "wait_reason", "wait_message",
    "wait_detail", "queue_position",
]  # fmt: skip


def _bulk_set(jobs: list[Job], fields: list[str]) -> None:
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


def lock_admission(now: datetime | None = None) -> None:
    """Inside a transaction: wait for and hold the admission lock until commit."""
    AdmissionLock.objects.filter(pk=1).update(at=now or timezone.now())


def _apply(decisions: admission.Decisions, jobs: dict[int, Job], now: datetime, result: CycleResult) -> None:
    events: list[JobEvent] = []
    # Queued jobs change state only here and in cancel_job, which takes the same lock: bulk writes are safe.
    admitted = []
    for job_id, (node, borrowed) in decisions.admit.items():
        job = jobs[job_id]
        job.state, job.state_changed_at, job.node_name, job.borrowed, job.admitted_at = (
            JobState.ADMITTED, now, node, borrowed, now,
        )  # fmt: skip
        job.attempts += 1
        job.wait_reason, job.wait_message, job.wait_detail, job.queue_position = (
            "", "Admitted; waiting for its pod to start.", {}, None,
        )  # fmt: skip
        admitted.append(job)
        note = " on borrowed capacity (preemptible)" if borrowed else ""
        events.append(
            JobEvent(
                job_id=job_id, at=now, kind=EventKind.ADMITTED, message=f"Admitted and placed on {node}{note}.",
                data={"node": node, "borrowed": borrowed},
            )
        )  # fmt: skip
    _bulk_set(admitted, ADMIT_FIELDS)
    result.admitted += len(admitted)
    grace = settings.PORTAL_PREEMPTION_GRACE
    for job_id, for_job in decisions.preempt.items():
        job = jobs[job_id]
        if job.state == JobState.PREEMPTING:
            continue
        deadline = now + timedelta(seconds=grace)
        changed = Job.objects.filter(pk=job_id, state=job.state).update(
            state=JobState.PREEMPTING, state_changed_at=now, preempt_at=deadline
        )
        if changed:
            result.preempted += 1
            message = (
                f"Preemption notice: job #{for_job} of a team within its guarantee needs these GPUs back. This job "
                f"ran on borrowed capacity; it is stopped in {grace} s and requeued."
            )
            events.append(
                JobEvent(
                    job_id=job_id,
                    at=now,
                    kind=EventKind.PREEMPT_NOTICE,
                    message=message,
                    data={"for_job": for_job, "deadline": deadline.isoformat()},
                )
            )
            audit.record(
                None, JobAuditAction.JOB_PREEMPT, job, after={"for_job": for_job, "deadline": deadline.isoformat()}
            )
    changed_waits = []
    for job_id, wait in decisions.wait.items():
        job = jobs[job_id]
        result.waiting += 1
        if (job.wait_reason, job.wait_message, job.queue_position) == (wait.reason, wait.message, wait.position):
            continue
        if job.wait_reason != wait.reason:
            events.append(
                JobEvent(
                    job_id=job_id,
                    at=now,
                    kind=EventKind.WAITING,
                    message=wait.message,
                    data={"reason": wait.reason, **wait.detail},
                )
            )
        job.wait_reason, job.wait_message, job.wait_detail, job.queue_position = (
            wait.reason,
            wait.message,
            wait.detail,
            wait.position,
        )
        changed_waits.append(job)
    # Only the wait fields are written, so a concurrent cancel's state change is never overwritten.
    _bulk_set(changed_waits, ["wait_reason", "wait_message", "wait_detail", "queue_position"])
    JobEvent.objects.bulk_create(events, batch_size=500)


def _update_fair_share(snap: admission.Snapshot, now: datetime) -> None:
    """Fold what each team held into its decayed average (held is constant since the last update)."""
    held: dict[int, float] = defaultdict(float)
    for job in snap.active:
        rc = snap.classes.get(job.class_id)
        held[job.team] += job.count * (rc.gpu_fraction if rc else 1.0)
    existing = {fs.team_id: fs for fs in FairShare.objects.all()}
    half_life = settings.PORTAL_FAIR_SHARE_HALF_LIFE
    to_create, to_update = [], []
    for team_id in set(existing) | set(held):
        fs = existing.get(team_id)
        if fs is None:
            to_create.append(FairShare(team_id=team_id, average_units=0.0, updated=now))
            continue
        age = max(0.0, (now - fs.updated).total_seconds())
        keep = 0.5 ** (age / half_life)
        fs.average_units = fs.average_units * keep + held.get(team_id, 0.0) * (1 - keep)
        fs.updated = now
        to_update.append(fs)
    FairShare.objects.bulk_create(to_create, ignore_conflicts=True)
    FairShare.objects.bulk_update(to_update, ["average_units", "updated"])


# -- launch ---------------------------------------------------------------------------------------------------


def launch(backend: ClusterBackend, result: CycleResult, now: datetime | None = None) -> None:
    now = now or timezone.now()
    pending = Job.objects.filter(state=JobState.ADMITTED, workload_created_at__isnull=True).select_related(
        "team", "owner", "resource_class", "notebook__team", "notebook__owner"
    )
    namespaces: set[str] = set()
    for job in pending:
        try:
            if job.team.namespace not in namespaces:
                backend.ensure_namespace(job.team.namespace, {"gpu-portal.io/team": job.team.slug})
                namespaces.add(job.team.namespace)
            if job.notebook_id is not None:
                # A notebook's home volume and Service come first (both kept when it stops; creating is idempotent).
                backend.ensure_pvc(render_notebook_volume(job.notebook))
                backend.ensure_service(render_notebook_service(job.notebook))
            created = backend.create_workload(render_job(job))
        except Invalid as error:
            if _transition(
                job,
                JobState.ADMITTED,
                (EventKind.FAILED, f"The cluster refused the workload: {error}", {}),
                at=now,
                state=JobState.FAILED,
                failure_reason="Invalid",
                finished_at=now,
                wait_reason="",
                wait_message="",
            ):
                result.failed += 1
            continue
        except ClusterError as error:
            result.errors.append(f"launch #{job.pk}: {error}")
            log.warning("creating workload for job %s failed (retried next cycle): %s", job.pk, error)
            continue
        uid = created["metadata"].get("uid", "")
        if Job.objects.filter(pk=job.pk, state=JobState.ADMITTED, workload_created_at__isnull=True).update(
            workload_uid=uid, workload_created_at=now
        ):
            result.launched += 1
            JobEvent.objects.create(
                job=job,
                at=now,
                kind=EventKind.CREATED,
                message=f"Workload {job.workload_name} created in namespace {job.team.namespace}.",
                data={"uid": uid},
            )
