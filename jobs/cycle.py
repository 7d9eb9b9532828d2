"""One job cycle: reconcile jobs with the cluster, admit and place queued work, create the workloads.

Four steps, each safe to run concurrently with itself and after a crash:

- ``preempt_draining`` preempts the preemptible jobs on nodes whose reconfiguration has drained past its grace
  period, and all the portal's work where an admin forced the drain (jobs.draining; the inventory publishes which
  nodes drain and never touches jobs).
- ``reconcile_jobs`` reads the portal's workloads and pods (two list calls) and moves jobs through their
  states; every transition is a conditional UPDATE on the state it was read in, so a job cancelled meanwhile
  is never resurrected. The pass's starts are written in one batch (``lifecycle.start_many``), and a running
  job whose row and cluster objects did not change since the last pass is skipped (jobs.cycle_follow).
- ``admit`` takes the admission lock (``lifecycle.admission_lock``), builds a snapshot with a constant number of
  queries, runs ``jobs.admission.decide`` and writes the decisions.
- ``launch`` creates the workload of every admitted job that has none yet. Workload names are derived from
  the job id and creation is idempotent, so a crash between "create" and "save" never yields two workloads.

Every state change goes through ``jobs.lifecycle``; what a job demands, what it becomes in the cluster and what
its workload shows are its kind's answers (``jobs.kinds``): the cycle never asks which kind a job is.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from accounts.models import Team
from cluster.base import ClusterBackend, ClusterError, Invalid, forms_for
from gpus.models import Node, ResourceClass
from gpus.nodeconfig import reconfiguring_node_names
from gpus.reconcile import paused_gc
from vocab.names import CPU_RESOURCE, MEMORY_RESOURCE, NVIDIA_PREFIX
from vocab.quantity import mebibytes, millicores

from . import admission, draining, kinds, lifecycle, service_cycle
from .choices import ACTIVE_STATES, JobState
from .cycle_follow import LOAD_BY_ID, QUIET_JOBS, LogKeeper, container_ended, follow, lost_nodes, stamps
from .cycle_gang import follow_gang
from .kinds.base import condition
from .models import FairShare, Job, JobArray, JobEvent, Quota
from .render import JOB_ID_LABEL, TEAM_LABEL, managed_nodes
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
    preempt_draining(result, now)
    try:
        reconcile_jobs(backend, result, now)
    except ClusterError as error:
        result.errors.append(f"reconcile: {error}")
        log.warning("job reconcile failed: %s", error)
    try:
        service_cycle.reconcile_services(backend, result, now)
    except ClusterError as error:
        result.errors.append(f"services: {error}")
        log.warning("service reconcile failed: %s", error)
    admit(result, now)
    launch(backend, result, now)
    log.info("job cycle: %s", {k: v for k, v in result.as_dict().items() if v})
    return result


# -- following the cluster ------------------------------------------------------------------------------------


def preempt_draining(result: CycleResult, now: datetime | None = None) -> None:
    """Stop and requeue the work on nodes being drained for a reconfiguration (jobs.draining)."""
    result.preempted += draining.preempt_on_draining_nodes(now)


def reconcile_jobs(backend: ClusterBackend, result: CycleResult, now: datetime | None = None) -> None:
    with paused_gc():  # a pass over 20,000 workloads would spend more in the cyclic collector than in its work
        _reconcile_jobs(backend, result, now or timezone.now())


def _reconcile_jobs(backend: ClusterBackend, result: CycleResult, now: datetime) -> None:
    # A job may have more than one workload for a while: a requeued job's earlier attempt is still being
    # deleted when the next one is created, and a gang has one per rank. So workloads are looked up by name and
    # job id, pods by their Job's name and by job id; which belong to the current attempt is the kind's answer.
    # Every key carries the namespace: a job's objects are only ever those in its own team's namespace, so a
    # Job another team makes in its namespace with the portal's labels (and a victim's name or job id) is never
    # followed and never causes a delete (audit finding 1).
    workloads: dict[tuple[str, str], dict] = {}
    attempts: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for workload in backend.list_workloads():
        meta = workload["metadata"]
        job_id = (meta.get("labels") or {}).get(JOB_ID_LABEL)
        if job_id:
            workloads[(meta.get("namespace", ""), meta["name"])] = workload
            attempts[(meta.get("namespace", ""), job_id)].append(workload)
    pods: dict[tuple[str, str], dict] = {}
    pods_of: dict[tuple[str, str], list[dict]] = defaultdict(list)
    by_job: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for pod in backend.list_pods():
        labels = pod["metadata"].get("labels") or {}
        namespace = pod["metadata"].get("namespace", "")
        owner = labels.get(JOB_NAME_LABEL)
        if labels.get(JOB_ID_LABEL):
            by_job[(namespace, labels[JOB_ID_LABEL])].append(pod)
        if not owner:
            continue
        key = (namespace, owner)
        pods_of[key].append(pod)
        if pod["metadata"].get("creationTimestamp", "") >= pods.get(key, {}).get("metadata", {}).get(
            "creationTimestamp", ""
        ):
            pods[key] = pod

    # The jobs followed: the active ones, and ended ones that still have a workload (their logs, leftovers). The
    # ended ones are named in an IN list, the active ones never (20,000 ids in a list cost seconds to build).
    columns = ("id", "state", "state_changed_at", "workload_name", "node_names", "team__namespace")
    rows = list(Job.objects.filter(state__in=ACTIVE_STATES).values_list(*columns))
    extra = {int(i) for _, i in attempts if i.isdigit()} - {row[0] for row in rows}
    if extra:
        rows += Job.objects.filter(pk__in=extra).exclude(state__in=ACTIVE_STATES).values_list(*columns)
    followed = Job.objects.filter(Q(state__in=ACTIVE_STATES) | Q(pk__in=extra))
    # A running job whose row and cluster objects are what the last pass saw would come to the same answer:
    # nothing to do. Those are told apart from a few columns (no model built) and skipped; the rest are loaded.
    seen_now: dict[int, tuple] = {}
    todo: list[int] = []
    skipped = 0
    for pk, state, changed_at, name, node_names, namespace in rows:
        if state != JobState.RUNNING or node_names:
            todo.append(pk)  # only a running one-pod job is ever skipped (gangs watch their nodes too)
            continue
        objects = stamps(namespace, pk, name, workloads, attempts, pods_of, by_job)
        if objects is None:
            todo.append(pk)
            continue
        key = (state, changed_at, name, objects)
        seen_now[pk] = key
        if QUIET_JOBS.get(pk) == key:
            skipped += 1
        else:
            todo.append(pk)
    if not skipped:
        jobs = list(followed.select_related("team", "resource_class"))
    elif len(todo) > LOAD_BY_ID:
        wanted = set(todo)
        jobs = [job for job in followed.select_related("team", "resource_class") if job.pk in wanted]
    else:
        jobs = list(Job.objects.filter(pk__in=todo).select_related("team", "resource_class")) if todo else []
    keeper = LogKeeper(backend, pods_of, [job.pk for job in jobs], now)
    lost = lost_nodes(jobs)
    ranks_changed: list[Job] = []
    starts: list[tuple[Job, datetime, str]] = []
    for job in jobs:
        kind = kinds.for_job(job)
        namespace = job.team.namespace
        current = workloads.get((namespace, job.workload_name)) if job.workload_name else None
        mine = attempts.get((namespace, str(job.pk)), [])
        owned = [w for w in mine if kind.owns(job, w["metadata"]["name"])]
        stopped = False
        for leftover in mine:
            # Only a workload named like one of this job's attempts (gpj-<id>-...) is ever deleted as a leftover.
            if not leftover["metadata"]["name"].startswith(f"gpj-{job.pk}-"):
                continue
            if kind.leftover_is_stale(job, leftover["metadata"]["name"]) and not condition(leftover, "Complete"):
                keeper.keep(job, leftover["metadata"]["name"], last_chance=True)
                if backend.delete_workload(job.team.namespace, leftover["metadata"]["name"]):
                    result.deleted += 1
                stopped = True
        if stopped and job.state not in ACTIVE_STATES:
            for service in kind.attempt_services(job):
                backend.delete_service(job.team.namespace, service)
        if job.state == JobState.PREEMPTING and job.preempt_at and job.preempt_at <= now:
            services = kind.attempt_services(job)
            for workload in owned:
                keeper.keep(job, workload["metadata"]["name"], last_chance=True)
            if lifecycle.requeue(job, now, "Preempted after its grace period to return borrowed capacity; requeued."):
                result.requeued += 1
            for workload in owned:
                if backend.delete_workload(job.team.namespace, workload["metadata"]["name"]):
                    result.deleted += 1
            for service in services:
                backend.delete_service(job.team.namespace, service)
            continue
        workload, pod = current, pods.get((namespace, job.workload_name))
        if job.state not in ACTIVE_STATES:
            if current is not None and container_ended(pod):
                keeper.keep(job, job.workload_name)  # an ended job's pod stays until the TTL: keep its log
            continue
        if job.workload_created_at is None or kind.followed_elsewhere:
            continue  # launch has not created it yet, or its kind's own step follows it (jobs.service_cycle)
        gang = kind.observe_gang(job, owned, by_job.get((namespace, str(job.pk)), []), lost)
        if gang is not None:
            if follow_gang(job, gang, owned, backend, keeper, result, now):
                ranks_changed.append(job)
            continue
        if workload is None:
            if lifecycle.lose(job, now):
                result.lost += 1
            continue
        follow(job, workload, pod, result, now, backend, keeper, starts)
    lifecycle.note_ranks(ranks_changed)
    # Every job whose pod runs now starts in one batched, conditional write (a mass start is one statement per
    # chunk of jobs, never one per job); a job cancelled since it was read stays cancelled.
    started = lifecycle.start_many(starts, now)
    result.started += len(started)
    for job in started:  # what the next pass will read of them, unless something changes
        if not job.node_names:
            objects = stamps(job.team.namespace, job.pk, job.workload_name, workloads, attempts, pods_of, by_job)
            if objects is not None:
                seen_now[job.pk] = (JobState.RUNNING, job.state_changed_at, job.workload_name, objects)
    # What this pass saw of the running jobs it left running (or skipped): the next pass skips them if unchanged.
    loaded = {job.pk: job for job in jobs}
    QUIET_JOBS.clear()
    QUIET_JOBS.update(
        (pk, key) for pk, key in seen_now.items() if pk not in loaded or loaded[pk].state == JobState.RUNNING
    )


# -- admission ------------------------------------------------------------------------------------------------


def _millicores(value) -> int:
    try:
        return millicores(value or 0)
    except ValueError:
        return 0


def _mebibytes(value) -> int:
    try:
        return mebibytes(value or 0)
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
            "state", "attempts", "name", "image_cuda", "kind", "array_id", "architecture", "workers", "topology_key",
            "topology_mode",
        )
    )  # fmt: skip
    active = list(
        Job.objects.filter(state__in=ACTIVE_STATES).only(
            "id", "team_id", "resource_class_id", "count", "cpu_millicores", "memory_mb", "priority", "preemptible",
            "submitted_at", "max_runtime_seconds", "node_name", "borrowed", "state", "name", "image_cuda", "kind",
            "array_id", "architecture", "workers", "topology_key", "topology_mode", "node_names",
        )
    )  # fmt: skip
    # What each job asks of quota and placement is its kind's answer, never a guess from its fields.
    demands = {job.id: kinds.for_job(job).demand(job) for job in [*queued, *active]}
    portal_on_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in active:
        rc = classes.get(job.resource_class_id)
        demand = demands[job.id]
        # A gang holds one pod's worth on each rank's node; a job without per-rank nodes holds it all on one.
        if rc is not None and job.node_names:
            for name in job.node_names:
                held = portal_on_node[name]
                held[rc.resource_name] += demand.units
                held["cpu_m"] += demand.cpu_m
                held["memory_mb"] += demand.memory_mb
        elif rc is not None and job.node_name:
            held = portal_on_node[job.node_name]
            held[rc.resource_name] += demand.total_units
            held["cpu_m"] += demand.total_cpu_m
            held["memory_mb"] += demand.total_memory_mb
    # Inference services' replicas granted above their minimum hold capacity too (jobs.service_cycle).
    pool = service_cycle.pool_in_use()
    replicas = service_cycle.replica_views(now, classes, pool)
    for name, resource, units, cpu_m, memory_mb in replicas.holds:
        held = portal_on_node[name]
        held[resource] += units
        held["cpu_m"] += cpu_m
        held["memory_mb"] += memory_mb
    nodes = {}
    # A node whose GPUs are being reconfigured (MIG layout, time-slicing) takes no new work until it is done.
    reconfiguring = reconfiguring_node_names()
    topology_keys = settings.PORTAL_TOPOLOGY_KEYS
    for node in Node.objects.present().exclude(product_label=""):
        external = node.external_requests or {}
        held = portal_on_node.get(node.name, {})
        allocatable = {
            r: int(v) for r, v in node.allocatable.items() if r.startswith(NVIDIA_PREFIX) and str(v).isdigit()
        }
        cpu = _millicores(node.allocatable.get(CPU_RESOURCE)) - int(external.get("cpu_m", 0))
        memory = _mebibytes(node.allocatable.get(MEMORY_RESOURCE)) - int(external.get("memory_mb", 0))
        nodes[node.name] = admission.NodeView(
            name=node.name,
            product_label=node.product_label,
            team=node.team_id,
            # ... nor does one whose GPU stack cannot run it (a driver upgrade, pressure, a switched-off plugin).
            schedulable=node.ready
            and not node.unschedulable
            and node.name not in reconfiguring
            and not node.blocked_reason,
            allocatable=allocatable,
            free={r: n - int(external.get(r, 0)) - held.get(r, 0) for r, n in allocatable.items()},
            cpu_free_m=cpu - held.get("cpu_m", 0),
            memory_free_mb=memory - held.get("memory_mb", 0),
            cpu_capacity_m=cpu,
            memory_capacity_mb=memory,
            cuda=version_tuple(node.cuda_version) if node.cuda_version else (),
            architecture=node.architecture,
            kept_off=node.blocked_reason,
            topology={key: str(node.labels[key]) for key in topology_keys if key in (node.labels or {})},
            pool=service_cycle.on_pool(node.labels),
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
        demand = demands[job.id]
        active = job.state != JobState.QUEUED
        # Each pod is a worker on its own node; an active job admitted with several pods and no per-rank nodes
        # on record (before gangs were placed per rank) holds them all on its one node.
        together = active and demand.pods > 1 and not job.node_names
        workers = 1 if together else demand.pods
        return admission.JobView(
            id=job.id,
            team=job.team_id,
            class_id=demand.resource_class_id,
            count=demand.total_units if together else demand.units,
            cpu_m=demand.total_cpu_m if together else demand.cpu_m,
            memory_mb=demand.total_memory_mb if together else demand.memory_mb,
            priority=job.priority,
            preemptible=job.preemptible,
            submitted=job.submitted_at.timestamp(),
            max_runtime_s=job.max_runtime_seconds,
            node=getattr(job, "node_name", "") if job.state != JobState.QUEUED else "",
            borrowed=job.borrowed if job.state != JobState.QUEUED else False,
            preempting=job.state == JobState.PREEMPTING,
            cuda=version_tuple(job.image_cuda) if getattr(job, "image_cuda", "") else (),
            group=job.array_id,
            architecture=getattr(job, "architecture", ""),
            workers=workers,
            topology_key=job.topology_key,
            topology_mode=job.topology_mode,
            nodes=tuple(job.node_names) if active else (),
            pool=pool and kinds.for_job(job).uses_service_pool,
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
        queued=[view(j) for j in queued] + replicas.queued,
        active=[view(j) for j in active] + replicas.active,
        recent_average=recent,
        team_names=dict(Team.objects.values_list("id", "name")),
        patience=settings.PORTAL_BACKFILL_PATIENCE,
        # A job array's parallelism is a cap on its group; admission knows only the number.
        group_caps=dict(
            JobArray.objects.filter(parallelism__isnull=False, tasks__state=JobState.QUEUED)
            .distinct()
            .values_list("id", "parallelism")
        ),
    )
    return snap, {j.id: j for j in queued} | {j.id: j for j in active}


def admit(result: CycleResult, now: datetime | None = None) -> admission.Decisions:
    now = now or timezone.now()
    with lifecycle.admission_lock(now):  # serialises cycles with each other and with cancels and notebook stops
        snap, jobs = build_snapshot(now)
        decisions = admission.decide(snap)
        service_cycle.take_decisions(decisions, now)  # the services' replica views: granted, reclaimed
        _apply(decisions, jobs, now, result)
        _update_fair_share(snap, now)
    return decisions


def _apply(decisions: admission.Decisions, jobs: dict[int, Job], now: datetime, result: CycleResult) -> None:
    # Queued jobs change state only under the admission lock (held here): the batched admission is safe.
    events = lifecycle.admit_batch(
        [
            (jobs[job_id], decisions.ranks.get(job_id, (node,)), borrowed)
            for job_id, (node, borrowed) in decisions.admit.items()
        ],
        now,
    )
    result.admitted += len(decisions.admit)
    grace = settings.PORTAL_PREEMPTION_GRACE
    for job_id, for_job in decisions.preempt.items():
        job = jobs[job_id]
        if job.state == JobState.PREEMPTING:
            continue
        deadline = now + timedelta(seconds=grace)
        message = (
            f"Preemption notice: job #{for_job} of a team within its guarantee needs these GPUs back. This job "
            f"ran on borrowed capacity; it is stopped in {grace} s and requeued."
        )
        if lifecycle.preempt(job, now, deadline, message, {"for_job": for_job, "deadline": deadline.isoformat()}):
            result.preempted += 1
    result.waiting += len(decisions.wait)
    events += lifecycle.explain_waits([(jobs[job_id], wait) for job_id, wait in decisions.wait.items()], now)
    JobEvent.objects.bulk_create(events, batch_size=500)


def _update_fair_share(snap: admission.Snapshot, now: datetime) -> None:
    """Fold what each team held into its decayed average (held is constant since the last update)."""
    held: dict[int, float] = defaultdict(float)
    for job in snap.active:
        rc = snap.classes.get(job.class_id)
        held[job.team] += job.total * (rc.gpu_fraction if rc else 1.0)
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
    # Whether each job's node is a managed node (how render pins the pod) comes with the jobs: one query per cycle.
    pending = (
        Job.objects.filter(state=JobState.ADMITTED, workload_created_at__isnull=True)
        .select_related("team", "owner", "resource_class", *kinds.related_fields())
        .annotate(on_managed_node=Exists(managed_nodes().filter(name=OuterRef("node_name"))))
    )
    namespaces: set[str] = set()
    forms = None
    for job in pending:
        try:
            if job.team.namespace not in namespaces:
                backend.ensure_namespace(job.team.namespace, {TEAM_LABEL: job.team.slug})
                namespaces.add(job.team.namespace)
            # What the API server supports (a gang's shape depends on it): asked once per launch, and only when
            # there is something to launch.
            forms = forms or forms_for(backend.server_version())
            # What the workloads need comes first (a notebook's volume and Service, a gang's headless Service),
            # then every workload. Names are fixed per attempt and creation is idempotent: a launch that crashed
            # half-way through a gang's ranks creates the rest next cycle (or, if the job is no longer admitted,
            # the reconcile deletes what was created).
            created = kinds.for_job(job).launch(backend, job, forms)
        except Invalid as error:
            message = f"The cluster refused the workload: {error}"
            if lifecycle.fail(job, now, message, expected=JobState.ADMITTED, failure_reason="Invalid"):
                result.failed += 1
            continue
        except ClusterError as error:
            result.errors.append(f"launch #{job.pk}: {error}")
            log.warning("creating workload for job %s failed (retried next cycle): %s", job.pk, error)
            continue
        if created is not None and lifecycle.launched(job, now, created["metadata"].get("uid", "")):
            result.launched += 1
