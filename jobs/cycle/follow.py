"""Following the cluster: what the job reconcile (jobs.cycle.run.reconcile_jobs) does with one job, and what it
remembers between passes.

``follow`` moves a one-pod job after what its workload and pod show (a start is only collected: the reconcile
writes all of a pass's starts in one batch, lifecycle_bulk.start_many); ``LogKeeper`` keeps the logs of ended pods
once per cycle; ``stamps`` and ``QUIET_JOBS`` let a pass skip a running job whose row and cluster objects are
what the last pass saw (it would come to the same answer: nothing to do); ``quick_start`` tells from a plain row
(``ROW_COLUMNS``) that an admitted job's only news is that its pod runs, so a mass start of 20,000 jobs builds no
models: the start is written from plain rows (``lifecycle_bulk.StartingJob``)."""

from __future__ import annotations

import logging
from datetime import datetime

from cluster.base import ClusterBackend, ClusterError
from gpus.models import Node
from jobs import kinds, lifecycle, logkeeping, pod_states
from jobs.choices import JobState
from jobs.cycle.result import CycleResult
from jobs.kinds.base import RUNNING, WorkloadKind, delete_attempt_objects
from jobs.lifecycle_bulk import StartingJob
from jobs.models import Job
from vocab.pod_states import Verdict, container_state

log = logging.getLogger(__name__)


#: Cluster id -> job id -> what the last pass in this process saw of a running one-pod job (its state, when that
#: was set, its workload name, and the uid and resourceVersion of its workloads and pods), for ``reconcile_jobs``
#: to skip it.
QUIET_JOBS: dict[int | None, dict[int, tuple]] = {}
#: Above this many jobs to load, the pass reads all it follows and drops the skipped ones (one query) instead of
#: naming them all in an ``IN`` list.
LOAD_BY_ID = 1000


#: What the reconcile reads of every job it follows, as plain rows (no model): enough to skip a quiet running job,
#: to start an admitted one whose pod runs (``quick_start``), and to fill the plain row that start writes.
ROW_COLUMNS = (
    "id", "state", "state_changed_at", "workload_name", "node_names", "team__namespace", "kind",
    "workload_created_at", "name", "team_id", "owner_id", "node_name", "pod_name",
)  # fmt: skip


def starting_job(row) -> StartingJob:
    """What ``lifecycle_bulk.start_many`` reads and writes of the job in a row of ``ROW_COLUMNS``."""
    return StartingJob(
        id=row.id, state=row.state, state_changed_at=row.state_changed_at, workload_name=row.workload_name,
        node_names=row.node_names, kind=row.kind, name=row.name, team_id=row.team_id, owner_id=row.owner_id,
        node_name=row.node_name, pod_name=row.pod_name, workload_created_at=row.workload_created_at,
    )  # fmt: skip


def quick_start(
    row, workloads: dict, attempts: dict, pods: dict, now: datetime
) -> tuple[StartingJob, datetime, str] | None:
    """(the job as a plain row, started, pod name) when the only news of the admitted job in ``row`` is that its
    one pod runs: what ``follow`` would do with its full model (collect the start) and nothing else, decided from
    the row. None sends the job down the full path: a kind followed elsewhere or watched as a gang, a workload not
    created yet or missing, an attempt's leftover workload to delete, a pod not running or ended."""
    if row.state != JobState.ADMITTED or row.node_names or row.workload_created_at is None or not row.workload_name:
        return None
    kind = kinds.get(row.kind)
    # A kind that watches its pods as a gang (its own observe_gang) is always followed with its full model.
    if kind.followed_elsewhere or type(kind).observe_gang is not WorkloadKind.observe_gang:
        return None
    key = (row.team__namespace, row.workload_name)
    workload = workloads.get(key)
    if workload is None:
        return None
    if any(not kind.owns(row, w["metadata"]["name"]) for w in attempts.get((key[0], str(row.id)), ())):
        return None  # another attempt's workload is still there: the full path deletes it (keeping its log)
    seen = kind.observe(workload, pods.get(key))
    if seen.finished or seen.phase != RUNNING:
        return None
    return starting_job(row), seen.started_at or now, seen.pod_name


def stamps(
    namespace: str, pk: int, name: str, workloads: dict, attempts: dict, pods_of: dict, by_job: dict
) -> tuple | None:
    """The uid and resourceVersion of every cluster object a job's pass reads (its current workload, its
    attempts, their pods): any change to any of them bumps one. None when one lacks either (or the workload is
    missing): such a job is never skipped."""

    def stamp(obj: dict | None) -> tuple:
        meta = (obj or {}).get("metadata") or {}
        return meta.get("uid"), meta.get("resourceVersion")

    job_id = str(pk)
    current = stamp(workloads.get((namespace, name)))
    others = (
        *(stamp(w) for w in attempts.get((namespace, job_id), ())),
        *(stamp(p) for p in pods_of.get((namespace, name), ())),
        *(stamp(p) for p in by_job.get((namespace, job_id), ())),
    )
    if not all(current) or not all(all(s) for s in others):
        return None
    return current, others


def lost_nodes(jobs: list[Job], cluster_id: int) -> set[str]:
    """The nodes of the gangs' ranks (in cluster ``cluster_id``) that are gone or not Ready (one query, and none
    without gangs)."""
    wanted = {name for job in jobs for name in job.node_names or []}
    if not wanted:
        return set()
    ready = Node.objects.present().filter(cluster_id=cluster_id, name__in=wanted, ready=True)
    return wanted - set(ready.values_list("name", flat=True))


def container_ended(pod: dict | None) -> bool:
    return bool(pod) and (container_state(pod)[0] == "terminated" or pod.get("status", {}).get("phase") in (
        "Succeeded", "Failed",
    ))  # fmt: skip


class LogKeeper:
    """Keeps the logs of a workload's pods (one per pod: a gang's Indexed Job has one per rank) once per cycle,
    asking the database which are kept only once, and only in a pass that keeps some (``job_ids``: the jobs the
    pass follows)."""

    def __init__(self, backend: ClusterBackend, pods: dict[tuple[str, str], list[dict]], job_ids: list[int], now):
        self.backend, self.pods, self.job_ids, self.now = backend, pods, job_ids, now
        self._kept: set[tuple[int, str]] | None = None

    @property
    def kept(self) -> set[tuple[int, str]]:
        if self._kept is None:
            self._kept = logkeeping.kept_pods(self.job_ids)
        return self._kept

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


def follow(
    job: Job,
    workload: dict,
    pod: dict | None,
    result: CycleResult,
    now: datetime,
    backend,
    keeper: LogKeeper,
    starts: list[tuple[Job | StartingJob, datetime, str]],
) -> None:
    """Move one job after what its workload and pod show; a start is only collected into ``starts`` (written in
    one batch for the whole pass, with its pod name)."""
    seen = kinds.for_job(job).observe(workload, pod)
    if not seen.finished and seen.phase == RUNNING and job.state == JobState.ADMITTED:
        starts.append((job, seen.started_at or now, seen.pod_name))
        return
    lifecycle.note_pod(job, seen.pod_name)
    if seen.finished:
        reason = seen.reason
        exit_code = seen.exit_code
        changes = {"finished_at": seen.finished_at or now, "exit_code": exit_code, "failure_reason": reason[:60]}
        if seen.started_at and not job.started_at:
            changes["started_at"] = seen.started_at
        data = {"exit_code": exit_code, "reason": reason}
        keeper.keep(job, job.workload_name)  # the container ended: its log is kept now, before any delete
        # The workload stays until its TTL; what it claimed its devices from goes now (its pod keeps its claim).
        leftovers = kinds.for_job(job).attempt_objects(job)
        if not seen.failed:
            if lifecycle.succeed(job, now, f"Succeeded on {job.node_name}.", data=data, **changes):
                result.finished += 1
                delete_attempt_objects(backend, job.team.namespace, leftovers)
            return
        message = pod_states.why_failed(job, reason, exit_code, seen.condition_message).sentence
        if lifecycle.fail(job, now, message, data=data, queue_position=None, **changes):
            result.failed += 1
            delete_attempt_objects(backend, job.team.namespace, leftovers)
        return
    if job.state != JobState.ADMITTED:
        return
    # Still not running: say why (vocab.pod_states: fail, explain, or keep waiting).
    if not seen.reason:
        return
    meaning = pod_states.why_waiting(job, seen.reason, seen.message, backend, seen.pod_name)
    if meaning.verdict == Verdict.FAIL:
        reason = meaning.reason
        if lifecycle.fail(
            job, now, meaning.sentence, expected=JobState.ADMITTED, data={"reason": reason}, failure_reason=reason
        ):
            result.failed += 1
            keeper.keep(job, workload["metadata"]["name"], last_chance=True)
            backend.delete_workload(job.team.namespace, workload["metadata"]["name"])
            delete_attempt_objects(backend, job.team.namespace, kinds.for_job(job).attempt_objects(job))
        return
    lifecycle.explain_pending(job, now, meaning.reason, meaning.sentence)
