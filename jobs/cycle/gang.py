"""Following a gang (a distributed job) in the job cycle: its state comes from all its ranks, and no rank
outlives its gang.

The rules, each tested in tests/unit/jobs/test_gang_cycle.py:

- Running when every rank runs; succeeded when every rank succeeded. ``Job.ranks`` (rank, node, pod, state,
  exit code, reason) is written when it changed, in one write per cycle.
- A rank fails → the whole gang stops: every rank's log is kept, then the job moves (so a crash after the move
  leaves a queued or failed job whose leftover ranks the next cycle deletes), then every rank's workload is
  deleted (background propagation) and the gang's headless Service with them. With retries left
  (``max_retries``, counted by the restarts so far) the job is queued again whole ("Rank 1 failed with exit
  code 3; restarting the whole job (retry 1 of 2)."); else it fails with ``failed_rank``, that rank's exit code
  and reason, and a message pointing at its kept log. A rank that ran past the job's maximum runtime is not
  retried, nor is an image that cannot be pulled.
- A rank that waits is said as a batch job's pod would be (jobs.pod_states, one table for every kind), after
  its rank: "Rank 3: Waiting: the pod cannot start because secret wandb does not exist ...".
- A rank lost with its node (the node gone or not Ready, the pod evicted, the workload vanished) stops the gang
  the same way and queues it again, not counted as a retry.
"""

from __future__ import annotations

from datetime import datetime

from cluster.base import ClusterBackend
from jobs import kinds, lifecycle, pod_states
from jobs.choices import JobState, RankState
from jobs.kinds.base import (
    FAILED,
    LOST,
    PENDING,
    RUNNING,
    STOPPED_WITH_GANG,
    SUCCEEDED,
    GangObservation,
    delete_attempt_objects,
)
from jobs.models import Job
from vocab.pod_states import Verdict

#: Cluster reasons that no restart can cure: the job fails at once.
_NOT_RETRIED = ("DeadlineExceeded",)


def follow_gang(
    job: Job, seen: GangObservation, owned: list[dict], backend: ClusterBackend, keeper, result, now: datetime
) -> bool:
    """Move the gang as its ranks say. Returns whether ``job.ranks`` still has to be written (no transition
    wrote it)."""
    if seen.phase == FAILED:
        _stop_after_failure(job, seen, owned, backend, keeper, result, now)
        return False
    if seen.phase == LOST:
        services = kinds.for_job(job).attempt_objects(job)
        _keep_logs(job, owned, keeper)
        message = (
            f"Rank {seen.rank} was lost with node {seen.node or 'unknown'} ({seen.reason}"
            + (f": {seen.message}" if seen.message else "")
            + "); every rank was stopped and the whole job is queued again (a lost node does not count as a retry)."
        )
        if lifecycle.restart(job, now, message, data={"rank": seen.rank, "reason": seen.reason}):
            result.requeued += 1
        _delete(job, owned, services, backend, result)
        return False
    if seen.phase == SUCCEEDED:
        services = kinds.for_job(job).attempt_objects(job)
        _keep_logs(job, owned, keeper, last_chance=False)
        message = f"All {job.workers} ranks succeeded."
        changes = {"finished_at": seen.finished_at or now, "exit_code": 0, "ranks": seen.ranks}
        if seen.started_at and not job.started_at:
            changes["started_at"] = seen.started_at
        if lifecycle.succeed(job, now, message, **changes):
            result.finished += 1
            _delete_attempt_objects(job, services, backend)
        return False
    changed = seen.ranks != job.ranks
    lifecycle.note_pod(job, seen.pod_name)
    if seen.phase == RUNNING and job.state == JobState.ADMITTED:
        if lifecycle.start(job, now, seen.started_at or now, seen.pod_name):
            result.started += 1
    elif seen.phase == PENDING and job.state == JobState.ADMITTED and seen.reason:
        meaning = pod_states.why_waiting(job, seen.reason, seen.message, backend, seen.pod_name)
        if meaning.verdict == Verdict.FAIL:
            services = kinds.for_job(job).attempt_objects(job)
            _keep_logs(job, owned, keeper)
            if lifecycle.fail(job, now, meaning.sentence, expected=JobState.ADMITTED, data={"reason": meaning.reason},
                              failure_reason=meaning.reason, ranks=seen.ranks):  # fmt: skip
                result.failed += 1
            _delete(job, owned, services, backend, result)
            return False
        lifecycle.explain_pending(job, now, meaning.reason, f"Rank {seen.rank}: {meaning.sentence}")
    if changed:
        job.ranks = seen.ranks
        align_nodes(job)
    return changed


def align_nodes(job) -> bool:
    """An Indexed Job's ranks may take the chosen nodes in any order (each index goes to one of them): once every
    rank runs on one of them, ``node_names`` follows the cluster, so rank 0's node (``node_name``) is the one it
    really runs on. The set of nodes, and so what the gang holds where, does not change."""
    nodes = [rank.get("node") or "" for rank in job.ranks]
    if len(nodes) != len(job.node_names) or nodes == list(job.node_names):
        return False
    if sorted(nodes) != sorted(job.node_names):
        return False  # some rank is not (yet) on a chosen node: nothing to learn
    job.node_names, job.node_name = nodes, nodes[0]
    return True


def _stop_after_failure(job, seen: GangObservation, owned, backend, keeper, result, now: datetime) -> None:
    rank, code, reason = seen.rank, seen.exit_code, seen.reason
    if reason == "OOMKilled":
        what = f"Rank {rank} ran out of memory (limit {job.memory_mb} MiB per rank)"
    elif reason == "DeadlineExceeded":
        what = f"The job ran past its maximum runtime of {job.max_runtime_seconds // 60} minutes"
    elif code is not None:
        what = f"Rank {rank} failed with exit code {code}"
    else:
        detail = f": {seen.message}" if seen.message else ""
        what = f"Rank {rank} failed ({reason or 'no reason given'}{detail})"
    services = kinds.for_job(job).attempt_objects(job)
    _keep_logs(job, owned, keeper)
    used = lifecycle.retries_used(job)
    data = {"rank": rank, "exit_code": code, "reason": reason, "node": seen.node, "pod": seen.pod_name}
    if reason not in _NOT_RETRIED and used < job.max_retries:
        message = f"{what}; restarting the whole job (retry {used + 1} of {job.max_retries})."
        if lifecycle.restart(job, now, message, retry=used + 1, data=data):
            result.requeued += 1
    else:
        left = f" All {job.max_retries} retries were used." if job.max_retries and reason not in _NOT_RETRIED else ""
        where = f" on {seen.node}" if seen.node else ""
        log_note = f" Its log (pod {seen.pod_name}) is kept with the job." if seen.pod_name else ""
        message = f"{what}{where}; every rank was stopped.{left}{log_note}"
        ranks = [
            entry if entry["state"] in (RankState.SUCCEEDED, RankState.FAILED)
            else {**entry, "state": RankState.FAILED, "reason": STOPPED_WITH_GANG}
            for entry in seen.ranks
        ]  # fmt: skip
        changes = {"finished_at": seen.finished_at or now, "exit_code": code, "failure_reason": reason[:60],
                   "failed_rank": rank, "ranks": ranks, "queue_position": None}  # fmt: skip
        if seen.started_at and not job.started_at:
            changes["started_at"] = seen.started_at
        if lifecycle.fail(job, now, message, data=data, **changes):
            result.failed += 1
    _delete(job, owned, services, backend, result)


def _keep_logs(job: Job, owned: list[dict], keeper, *, last_chance: bool = True) -> None:
    for workload in owned:
        keeper.keep(job, workload["metadata"]["name"], last_chance=last_chance)


def _delete(job: Job, owned: list[dict], services: list[tuple[str, str]], backend: ClusterBackend, result) -> None:
    for workload in owned:
        if backend.delete_workload(job.team.namespace, workload["metadata"]["name"]):
            result.deleted += 1
    _delete_attempt_objects(job, services, backend)


def _delete_attempt_objects(job: Job, services: list[tuple[str, str]], backend: ClusterBackend) -> None:
    delete_attempt_objects(backend, job.team.namespace, services)
