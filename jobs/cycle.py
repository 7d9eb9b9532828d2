"""One job cycle: reconcile jobs with the cluster, admit and place queued work, create the workloads.

Four steps, each safe to run concurrently with itself and after a crash:

- ``preempt_draining`` preempts the preemptible jobs on nodes whose reconfiguration has drained past its grace
  period, and all the portal's work where an admin forced the drain (jobs.draining; the inventory publishes which
  nodes drain and never touches jobs).
- ``reconcile_jobs`` reads the portal's workloads and pods (two list calls) and moves jobs through their
  states; every transition is a conditional UPDATE on the state it was read in, so a job cancelled meanwhile
  is never resurrected.
- ``admit`` (jobs.cycle_admit) takes the admission lock (``lifecycle.admission_lock``), builds a snapshot with a
  constant number of queries, runs ``jobs.admission.decide`` and writes the decisions set-based.
- ``launch`` creates the workload of every admitted job that has none yet. Workload names are derived from
  the job id and creation is idempotent, so a crash between "create" and "save" never yields two workloads.

Every state change goes through ``jobs.lifecycle``; what a job demands, what it becomes in the cluster and what
its workload shows are its kind's answers (``jobs.kinds``): the cycle never asks which kind a job is.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from datetime import datetime

from django.db.models import Exists, OuterRef, Q
from django.utils import timezone

from cluster.base import ClusterBackend, ClusterError, Invalid, forms_for
from gpus.models import Node

from . import draining, kinds, lifecycle, logkeeping, service_cycle, volumes
from .choices import ACTIVE_STATES, JobState
from .cycle_admit import admit, build_snapshot  # noqa: F401  (the admission step lives there; callers import it here)
from .cycle_gang import follow_gang
from .kinds.base import RUNNING, condition, container_state
from .models import Job
from .render import JOB_ID_LABEL, TEAM_LABEL, managed_nodes
from .secrets import explain_config_error, explain_pull_failure

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
    now = now or timezone.now()
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

    jobs = list(
        Job.objects.filter(
            Q(state__in=ACTIVE_STATES) | Q(pk__in={int(i) for _, i in attempts if i.isdigit()})
        ).select_related("team", "resource_class")
    )
    keeper = _LogKeeper(backend, pods_of, logkeeping.kept_pods(job.pk for job in jobs), now)
    lost_nodes = _lost_nodes(jobs)
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
            if current is not None and _container_ended(pod):
                keeper.keep(job, job.workload_name)  # an ended job's pod stays until the TTL: keep its log
            continue
        if job.workload_created_at is None or kind.followed_elsewhere:
            continue  # launch has not created it yet, or its kind's own step follows it (jobs.service_cycle)
        gang = kind.observe_gang(job, owned, by_job.get((namespace, str(job.pk)), []), lost_nodes)
        if gang is not None:
            if follow_gang(job, gang, owned, backend, keeper, result, now):
                ranks_changed.append(job)
            continue
        if workload is None:
            if lifecycle.lose(job, now):
                result.lost += 1
            continue
        _follow(job, workload, pod, result, now, backend, keeper)
    lifecycle.note_ranks(ranks_changed)


def _lost_nodes(jobs: list[Job]) -> set[str]:
    """The nodes of the gangs' ranks that are gone or not Ready (one query, and none without gangs)."""
    wanted = {name for job in jobs for name in job.node_names or []}
    if not wanted:
        return set()
    ready = Node.objects.present().filter(name__in=wanted, ready=True).values_list("name", flat=True)
    return wanted - set(ready)


def _container_ended(pod: dict | None) -> bool:
    return bool(pod) and (container_state(pod)[0] == "terminated" or pod.get("status", {}).get("phase") in (
        "Succeeded", "Failed",
    ))  # fmt: skip


class _LogKeeper:
    """Keeps the logs of a workload's pods (one per pod: a gang's Indexed Job has one per rank) once per cycle,
    asking the database which are kept only once."""

    def __init__(
        self, backend: ClusterBackend, pods: dict[tuple[str, str], list[dict]], kept: set[tuple[int, str]], now
    ) -> None:
        self.backend, self.pods, self.kept, self.now = backend, pods, kept, now

    def keep(self, job: Job, workload_name: str, *, last_chance: bool = False) -> None:
        for pod in self.pods.get((job.team.namespace, workload_name), []):
            name = pod["metadata"]["name"]
            if (job.pk, name) in self.kept:
                continue
            try:
                if logkeeping.keep(self.backend, job, name, container=logkeeping.container_name(pod),
                                   last_chance=last_chance, now=self.now) is not None:  # fmt: skip
                    self.kept.add((job.pk, name))
            except ClusterError as error:  # never let a log stop the cycle (keep raises only on odd backends)
                log.warning("keeping the log of job %s failed: %s", job.pk, error)


def _follow(
    job: Job, workload: dict, pod: dict | None, result: CycleResult, now: datetime, backend, keeper: _LogKeeper
) -> None:
    seen = kinds.for_job(job).observe(workload, pod)
    lifecycle.note_pod(job, seen.pod_name)
    if seen.finished:
        reason = seen.reason
        exit_code = seen.exit_code
        changes = {"finished_at": seen.finished_at or now, "exit_code": exit_code, "failure_reason": reason[:60]}
        if seen.started_at and not job.started_at:
            changes["started_at"] = seen.started_at
        data = {"exit_code": exit_code, "reason": reason}
        keeper.keep(job, job.workload_name)  # the container ended: its log is kept now, before any delete
        if not seen.failed:
            if lifecycle.succeed(job, now, f"Succeeded on {job.node_name}.", data=data, **changes):
                result.finished += 1
            return
        message = {
            "OOMKilled": f"Killed for running out of memory (limit {job.memory_mb} MiB); ask for more memory.",
            "DeadlineExceeded": (
                f"Stopped by Kubernetes after its maximum runtime of {job.max_runtime_seconds // 60} minutes "
                "(activeDeadlineSeconds)."
            ),
        }.get(reason, f"Failed with exit code {exit_code}." if exit_code is not None else "Failed.")
        if reason not in ("OOMKilled", "DeadlineExceeded") and seen.condition_message:
            message += f" Kubernetes: {seen.condition_message}"
        if lifecycle.fail(job, now, message, data=data, queue_position=None, **changes):
            result.failed += 1
        return
    if seen.phase == RUNNING and job.state == JobState.ADMITTED:
        if lifecycle.start(job, now, seen.started_at or now, seen.pod_name):
            result.started += 1
        return
    if job.state != JobState.ADMITTED:
        return
    # Still not running: say why, in the cluster's words.
    reason, message = seen.reason, seen.message
    if reason in ("ImagePullBackOff", "InvalidImageName"):
        if reason == "ImagePullBackOff" and seen.pod_name:
            # The back-off's own message only says it backs off; why the pull failed is in the pod's events.
            message = _newest_event(backend, job.team.namespace, seen.pod_name, "Failed", "Failed to pull") or message
        text = explain_pull_failure(job, reason, message)
        if lifecycle.fail(job, now, text, expected=JobState.ADMITTED, data={"reason": reason}, failure_reason=reason):
            result.failed += 1
            keeper.keep(job, workload["metadata"]["name"], last_chance=True)
            backend.delete_workload(job.team.namespace, workload["metadata"]["name"])
        return
    if reason == "ErrImagePull":
        lifecycle.explain_pending(job, now, reason, explain_pull_failure(job, reason, message))
        return
    if reason == "CreateContainerConfigError":
        lifecycle.explain_pending(job, now, reason, explain_config_error(job, message))
        return
    if reason == "ContainerCreating" and job.secret_files and seen.pod_name:
        # A Secret volume that cannot be mounted shows only in the pod's events (FailedMount).
        mount = _failed_mount(backend, job.team.namespace, seen.pod_name)
        if mount:
            lifecycle.explain_pending(job, now, "FailedMount", explain_config_error(job, mount))
            return
    if reason:
        text = volumes.claim_wait_text(job, message) or (
            f"Pending in the cluster: {reason}" + (f": {message}" if message else "")
        )
        lifecycle.explain_pending(job, now, reason, text)


def _failed_mount(backend: ClusterBackend, namespace: str, pod_name: str) -> str:
    """The newest FailedMount message of the pod about a secret ("")."""
    return _newest_event(backend, namespace, pod_name, "FailedMount", "MountVolume.SetUp failed", "secret")


def _newest_event(backend: ClusterBackend, namespace: str, pod_name: str, reason: str, *words: str) -> str:
    """The message of the pod's newest Event with ``reason`` that contains all ``words`` ("" when there is none
    or the events cannot be read now)."""
    try:
        events = backend.pod_events(namespace, pod_name)
    except ClusterError:
        return ""
    for event in reversed(events):
        text = str(event.get("message", ""))
        if event.get("reason") == reason and all(word in text for word in words):
            return text
    return ""


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
