"""One job cycle: reconcile jobs with the cluster, admit and place queued work, create the workloads.

Four steps, each safe to run concurrently with itself and after a crash, and the estimates' turn:

- ``preempt_draining`` preempts the preemptible jobs on nodes whose reconfiguration has drained past its grace
  period, and all the portal's work where an admin forced the drain (jobs.cycle.draining; the inventory publishes which
  nodes drain and never touches jobs).
- ``reconcile_jobs`` reads the portal's workloads and pods (two list calls) and moves jobs through their
  states; every transition is a conditional UPDATE on the state it was read in, so a job cancelled meanwhile
  is never resurrected. The pass's starts are written in one batch (``lifecycle_bulk.start_many``), and a running
  job whose row and cluster objects did not change since the last pass is skipped (jobs.cycle.follow).
- ``admit`` (jobs.cycle.admit) takes the admission lock (``lifecycle.admission_lock``), builds a snapshot with a
  constant number of queries, runs ``jobs.scheduling.decide`` and writes the decisions set-based.
- ``launch`` creates the workload of every admitted job that has none yet. Workload names are derived from
  the job id and creation is idempotent, so a crash between "create" and "save" never yields two workloads.
- Then the start-time estimates get a turn (jobs.cycle.estimates.refresh_now): a share of the CPU the cycle took,
  on the replay in progress, or on one begun on the snapshot admission just decided on.

Every state change goes through ``jobs.lifecycle``; what a job demands, what it becomes in the cluster and what
its workload shows are its kind's answers (``jobs.kinds``): the cycle never asks which kind a job is.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from datetime import datetime

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from cluster.base import ClusterBackend, ClusterError, Invalid, forms_for
from core.gcpause import paused_gc
from gpus.fleet import mark_unreachable, reachable
from gpus.models import Cluster, settings_cluster_pk
from gpus.node_pools import PoolTaints
from jobs import kinds, lifecycle, lifecycle_bulk
from jobs.choices import ACTIVE_STATES, EventKind, JobState
from jobs.cycle import draining, estimates
from jobs.cycle.admit import admitting
from jobs.cycle.follow import (
    LOAD_BY_ID,
    QUIET_JOBS,
    ROW_COLUMNS,
    LogKeeper,
    container_ended,
    follow,
    lost_nodes,
    quick_start,
    stamps,
)
from jobs.cycle.gang import follow_gang
from jobs.cycle.result import CycleResult
from jobs.kinds.base import condition, delete_attempt_objects
from jobs.models import Job
from jobs.render import JOB_ID_LABEL, TEAM_LABEL, managed_nodes

log = logging.getLogger(__name__)

#: Label the Job controller puts on the pods of a Job (batch/v1), with the Job's name.
JOB_NAME_LABEL = "job-name"


def run_cycle(
    backend: ClusterBackend, now: datetime | None = None, fleet: list[tuple[Cluster, ClusterBackend]] | None = None
) -> CycleResult:
    """One cycle: ``backend`` is the cluster configured in settings; ``fleet`` the registered clusters to follow and
    launch on in this same call, with their backends (None: every registered cluster the inventory can reach,
    gpus.fleet.reachable). The worker's cycle passes ``fleet=[]`` and gives each registered cluster a task of its
    own instead (``cluster_cycle``; jobs.tasks), so a slow or unreachable cluster delays no other's passes.

    Each cluster's jobs are followed on their own: one that cannot be read is reported and skipped for the rest of
    the cycle (its jobs are neither advanced nor lost), and the others go on. A registered cluster that cannot be
    read is marked unreachable at once (gpus.fleet.mark_unreachable): the next cycles leave it out until the
    inventory's next pass that reaches it brings it back."""
    began, began_wall = time.thread_time(), time.perf_counter()
    result = CycleResult()
    preempt_draining(result, now)
    home = Cluster.objects.get(pk=settings_cluster_pk())
    passes = [
        (cluster, cluster_backend)
        for cluster, cluster_backend in [(home, backend), *(fleet if fleet is not None else reachable())]
        if follow_cluster(cluster, cluster_backend, result, now, home.pk)
    ]
    snap, decisions = admitting(result, now)
    for cluster, cluster_backend in passes:
        launch(cluster_backend, result, now, cluster=cluster, home_id=home.pk)
    # The start-time estimates' turn, on this cycle's snapshot, for a share of the CPU the cycle took (its thread's:
    # not the waits on the clusters' APIs, nor other threads' work) and of its wall time; after the launches, which
    # it never delays.
    cpu, wall = time.thread_time() - began, time.perf_counter() - began_wall
    estimates.refresh_now(now, estimates.cycle_budget(cpu), snap, set(decisions.admit), estimates.cycle_budget(wall))
    log.info("job cycle: %s", {k: v for k, v in result.as_dict().items() if v})
    return result


def cluster_cycle(cluster: Cluster, backend: ClusterBackend, now: datetime | None = None) -> CycleResult:
    """The cluster-facing passes of one registered cluster, on its own: follow its jobs and services, then create
    the workloads of the jobs admission placed there (by the last cycle's ``admit``, which is fleet-wide and runs
    in the cycle of the cluster configured in settings). What this pass learns (jobs ended, GPUs freed) is what the
    next admission reads."""
    result = CycleResult()
    home_id = settings_cluster_pk()
    if follow_cluster(cluster, backend, result, now, home_id):
        launch(backend, result, now, cluster=cluster, home_id=home_id)
    log.info("job cycle of cluster %s: %s", cluster.name, {k: v for k, v in result.as_dict().items() if v})
    return result


def follow_cluster(
    cluster: Cluster, backend: ClusterBackend, result: CycleResult, now: datetime | None, home_id: int
) -> bool:
    """Follow ``cluster``'s jobs, then the kinds that follow their own workloads (services), on ``backend``; False
    when the cluster could not be read (reported in ``result``; a registered cluster is marked unreachable)."""
    try:
        reconcile_jobs(backend, result, now, cluster=cluster, home_id=home_id)
    except ClusterError as error:
        result.errors.append(f"reconcile {cluster.name}: {error}")
        log.warning("job reconcile of cluster %s failed: %s", cluster.name, error)
        if cluster.pk != home_id:
            mark_unreachable(cluster, f"The job cycle could not read it: {error}")
        return False
    for kind in kinds.registered().values():
        if not kind.followed_elsewhere:
            continue
        try:
            kind.follow(backend, result, now, cluster=cluster, home_id=home_id)
        except ClusterError as error:
            result.errors.append(f"{kind.name}s on {cluster.name}: {error}")
            log.warning("%s reconcile of cluster %s failed: %s", kind.name, cluster.name, error)
    return True


# -- following the cluster ------------------------------------------------------------------------------------


def preempt_draining(result: CycleResult, now: datetime | None = None) -> None:
    """Stop and requeue the work on nodes being drained for a reconfiguration (jobs.cycle.draining)."""
    result.preempted += draining.preempt_on_draining_nodes(now)


def _of_cluster(cluster_id: int, home_id: int) -> Q:
    """The jobs of one cluster; the cluster configured in settings also has those that name none (placed before the
    fleet, or by a kind that stays there)."""
    return Q(cluster__isnull=True) | Q(cluster_id=home_id) if cluster_id == home_id else Q(cluster_id=cluster_id)


def reconcile_jobs(
    backend: ClusterBackend,
    result: CycleResult,
    now: datetime | None = None,
    *,
    cluster: Cluster | None = None,
    home_id: int | None = None,
) -> None:
    """Follow the jobs of ``cluster`` (None: the cluster configured in settings) on ``backend``."""
    if home_id is None:
        home_id = settings_cluster_pk()
    with paused_gc():  # a pass over 20,000 workloads would spend more in the cyclic collector than in its work
        _reconcile_jobs(backend, result, now or timezone.now(), cluster.pk if cluster else home_id, home_id)


def _reconcile_jobs(backend: ClusterBackend, result: CycleResult, now: datetime, cluster_id: int, home_id: int) -> None:
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
    mine = _of_cluster(cluster_id, home_id)
    quiet = QUIET_JOBS.setdefault(cluster_id, {})
    rows = list(Job.objects.filter(mine, state__in=ACTIVE_STATES).values_list(*ROW_COLUMNS, named=True))
    extra = {int(i) for _, i in attempts if i.isdigit()} - {row.id for row in rows}
    if extra:
        rows += Job.objects.filter(pk__in=extra).exclude(state__in=ACTIVE_STATES).values_list(*ROW_COLUMNS, named=True)
    followed = Job.objects.filter((mine & Q(state__in=ACTIVE_STATES)) | Q(pk__in=extra))
    namespace_of = {row.id: row.team__namespace for row in rows}
    # Two kinds of job are decided from their row alone, without building their model: a running job whose row and
    # cluster objects are what the last pass saw would come to the same answer (nothing to do) and is skipped; an
    # admitted one whose only news is that its pod runs is started (quick_start). The rest are loaded.
    seen_now: dict[int, tuple] = {}
    todo: list[int] = []
    starts: list[tuple[Job | lifecycle_bulk.StartingJob, datetime, str]] = []
    skipped = 0
    for row in rows:
        if row.state == JobState.ADMITTED:
            start = quick_start(row, workloads, attempts, pods, now)
            if start is None:
                todo.append(row.id)
            else:
                starts.append(start)
            continue
        if row.state != JobState.RUNNING or row.node_names:
            todo.append(row.id)  # only a running one-pod job is ever skipped (gangs watch their nodes too)
            continue
        objects = stamps(row.team__namespace, row.id, row.workload_name, workloads, attempts, pods_of, by_job)
        if objects is None:
            todo.append(row.id)
            continue
        key = (row.state, row.state_changed_at, row.workload_name, objects)
        seen_now[row.id] = key
        if quiet.get(row.id) == key:
            skipped += 1
        else:
            todo.append(row.id)
    if not skipped and not starts:
        jobs = list(followed.select_related("team", "resource_class"))
    elif len(todo) > LOAD_BY_ID:
        wanted = set(todo)
        jobs = [job for job in followed.select_related("team", "resource_class") if job.pk in wanted]
    else:
        jobs = list(Job.objects.filter(pk__in=todo).select_related("team", "resource_class")) if todo else []
    keeper = LogKeeper(backend, pods_of, [job.pk for job in jobs], now)
    lost = lost_nodes(jobs, cluster_id)
    ranks_changed: list[Job] = []
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
            delete_attempt_objects(backend, job.team.namespace, kind.attempt_objects(job))
        if job.state == JobState.PREEMPTING and job.preempt_at and job.preempt_at <= now:
            services = kind.attempt_objects(job)
            for workload in owned:
                keeper.keep(job, workload["metadata"]["name"], last_chance=True)
            why = (
                draining.requeue_reason(job)
                or "Preempted after its grace period to return borrowed capacity; requeued."
            )
            if lifecycle.requeue(job, now, why):
                result.requeued += 1
            for workload in owned:
                if backend.delete_workload(job.team.namespace, workload["metadata"]["name"]):
                    result.deleted += 1
            delete_attempt_objects(backend, job.team.namespace, services)
            continue
        if job.state == JobState.PREEMPTING and job.checkpoint:
            # A job that declared its checkpoint hears of its preemption at once: its workload is deleted now, so
            # Kubernetes runs the preStop hook (the declared signal) and sends SIGTERM, then SIGKILL when the pod's
            # terminationGracePeriodSeconds (the declared grace) ends. Its GPUs count as held until the requeue.
            for workload in owned:
                keeper.keep(job, workload["metadata"]["name"], last_chance=True)
                if backend.delete_workload(job.team.namespace, workload["metadata"]["name"]):
                    result.deleted += 1
                    signal = job.checkpoint.get("signal", "SIGTERM")
                    lifecycle.event(job, EventKind.PREEMPT_NOTICE, f"{signal} sent to the job: its workload is "
                                    f"being stopped with a grace of {job.checkpoint['grace_seconds']} s.", now,
                                    signal=signal, workload=workload["metadata"]["name"])  # fmt: skip
            continue
        workload, pod = current, pods.get((namespace, job.workload_name))
        if job.state not in ACTIVE_STATES:
            if current is not None and container_ended(pod):
                keeper.keep(job, job.workload_name)  # an ended job's pod stays until the TTL: keep its log
            continue
        if job.workload_created_at is None or kind.followed_elsewhere:
            continue  # launch has not created it yet, or its kind's own step follows it (jobs.service.follow)
        gang = kind.observe_gang(job, owned, by_job.get((namespace, str(job.pk)), []), lost)
        if gang is not None:
            if follow_gang(job, gang, owned, backend, keeper, result, now):
                ranks_changed.append(job)
            continue
        if workload is None:
            # The lists may come from a watch cache a moment behind: absence is confirmed with the cluster itself
            # before the job is ended as lost (a cache that missed a Job another worker just made must not end it).
            leftovers = kind.attempt_objects(job)  # named before the transition renames the attempt
            if not backend.workload_exists(namespace, job.workload_name) and lifecycle.lose(job, now):
                result.lost += 1
                delete_attempt_objects(backend, namespace, leftovers)
            continue
        follow(job, workload, pod, result, now, backend, keeper, starts)
    lifecycle.note_ranks(ranks_changed)
    # Every job whose pod runs now starts in one batched, conditional write (a mass start is one statement per
    # chunk of jobs, never one per job); a job cancelled since it was read stays cancelled.
    started = lifecycle_bulk.start_many(starts, now)
    result.started += len(started)
    for job in started:  # what the next pass will read of them, unless something changes
        if not job.node_names:
            objects = stamps(namespace_of[job.pk], job.pk, job.workload_name, workloads, attempts, pods_of, by_job)
            if objects is not None:
                seen_now[job.pk] = (JobState.RUNNING, job.state_changed_at, job.workload_name, objects)
    # What this pass saw of the running jobs it left running (or skipped): the next pass skips them if unchanged.
    loaded = {job.pk: job for job in jobs}
    quiet.clear()
    quiet.update((pk, key) for pk, key in seen_now.items() if pk not in loaded or loaded[pk].state == JobState.RUNNING)


# -- launch ---------------------------------------------------------------------------------------------------


def launch(
    backend: ClusterBackend,
    result: CycleResult,
    now: datetime | None = None,
    *,
    cluster: Cluster | None = None,
    home_id: int | None = None,
) -> None:
    """Create the workloads of the jobs admitted to ``cluster`` (None: the cluster configured in settings)."""
    now = now or timezone.now()
    if home_id is None:
        home_id = settings_cluster_pk()
    cluster_id = cluster.pk if cluster else home_id
    mine = _of_cluster(cluster_id, home_id)
    # Whether each job's node is a managed node (how render pins the pod) comes with the jobs: one query per cycle.
    on_managed = managed_nodes().filter(cluster_id=cluster_id, name=OuterRef("node_name"))
    pending = (
        Job.objects.filter(mine, state=JobState.ADMITTED, workload_created_at__isnull=True)
        .select_related("team", "owner", "resource_class", *kinds.related_fields())
        .annotate(on_managed_node=Exists(on_managed))
    )
    namespaces: set[str] = set()
    forms = None
    table = None
    for job in pending:
        # The pools' GPU-keeping taints (what the pods tolerate) are read once per launch, for every job it renders.
        job.pool_taints = table = table or PoolTaints.load()
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
