"""A distributed training job: W ranks (one pod per node, G GPUs each) that start, run and end together.

It demands W pods of G units each (admission places them together), becomes a headless Service and one
Indexed Job or one Job per rank (``jobs.distributed.render``, by what the API server supports), and is observed as a
whole: every rank's pod, found by the job-id label, is reduced to a rank state, and the gang's state follows
the rules in ``GangObservation`` (a failed rank fails the gang; a rank lost with its node loses it).
"""

from __future__ import annotations

from jobs.choices import ACTIVE_STATES, JobKind, RankState
from jobs.distributed.render import (
    RANK_LABEL,
    attempt_objects,
    gang_base,
    gang_workload_names,
    rank_name,
    render_gang,
)
from jobs.kinds.base import (
    FAILED,
    LOST,
    PENDING,
    RUNNING,
    STOPPED_WITH_GANG,
    SUCCEEDED,
    Demand,
    GangObservation,
    WorkloadKind,
    condition,
    timestamp,
)
from jobs.render import JOB_ID_LABEL
from jobs.storage.secrets import pull_secret_names
from vocab.names import JOB_COMPLETION_INDEX_ANNOTATION
from vocab.pod_states import container_state, waiting_reason

#: Label the Job controller puts on a Job's pods, with the Job's name (as jobs.cycle.run reads it).
JOB_NAME_LABEL = "job-name"
#: Why a pod ended without its container ending: its node went (node lifecycle, kubelet eviction).
_NODE_REASONS = ("NodeLost", "Evicted", "Shutdown", "NodeShutdown", "Terminated", "UnexpectedAdmissionError")


class DistributedKind(WorkloadKind):
    name = JobKind.DISTRIBUTED

    def demand(self, job) -> Demand:
        """W pods, each with G units of the class and the job's CPU and memory."""
        return Demand(job.resource_class_id, job.count, job.cpu_millicores, job.memory_mb, pods=job.workers)

    def render(self, job, forms=None) -> list[dict]:
        indexed = bool(forms is not None and forms.indexed_jobs)
        return render_gang(job, pull_secret_names(job.team_id, job.image), indexed=indexed)

    def owns(self, job, workload_name: str) -> bool:
        return workload_name in gang_workload_names(job)

    def leftover_is_stale(self, job, workload_name: str) -> bool:
        # No rank outlives its gang: once the job is not active every rank's workload goes (an admitted gang
        # whose launch crashed half-way and that was then cancelled or failed keeps nothing running).
        return not self.owns(job, workload_name) or job.state not in ACTIVE_STATES

    def attempt_objects(self, job) -> list[tuple[str, str]]:
        return attempt_objects(job)

    def observe_gang(self, job, workloads: list[dict], pods: list[dict], lost_nodes: set[str]) -> GangObservation:
        by_name = {w["metadata"]["name"]: w for w in workloads if self.owns(job, w["metadata"]["name"])}
        indexed = gang_base(job) in by_name and (by_name[gang_base(job)]["spec"].get("completionMode") == "Indexed")
        newest: dict[int, dict] = {}
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            if labels.get(JOB_NAME_LABEL) not in by_name or labels.get(JOB_ID_LABEL) != str(job.pk):
                continue
            rank = _pod_rank(pod)
            if rank is None or not 0 <= rank < job.workers:
                continue
            seen = newest.get(rank)
            if seen is None or pod["metadata"].get("creationTimestamp", "") >= seen["metadata"].get(
                "creationTimestamp", ""
            ):
                newest[rank] = pod
        ranks, views = [], []
        for rank in range(job.workers):
            workload = by_name.get(gang_base(job) if indexed else rank_name(job, rank))
            view = _rank_view(job, rank, workload, newest.get(rank), lost_nodes)
            views.append(view)
            ranks.append({key: view[key] for key in ("rank", "node", "pod", "state", "exit_code", "reason")})
        return _gang_state(ranks, views)


def _pod_rank(pod: dict) -> int | None:
    value = (pod["metadata"].get("annotations") or {}).get(JOB_COMPLETION_INDEX_ANNOTATION)
    if value is None:
        value = (pod["metadata"].get("labels") or {}).get(RANK_LABEL)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _rank_view(job, rank: int, workload: dict | None, pod: dict | None, lost_nodes: set[str]) -> dict:
    """One rank: what its pod (or the absence of its pod or workload) says."""
    chosen = job.node_names[rank] if rank < len(job.node_names) else ""
    node = ((pod or {}).get("spec") or {}).get("nodeName") or chosen
    view = {"rank": rank, "node": node, "pod": pod["metadata"]["name"] if pod else "", "state": RankState.PENDING,
            "exit_code": None, "reason": "", "message": "", "started_at": None, "finished_at": None}  # fmt: skip
    if workload is None:
        return view | {"state": RankState.LOST, "reason": "WorkloadGone",
                       "message": "its workload disappeared from the cluster"}  # fmt: skip
    kind, detail = container_state(pod)
    if kind == "terminated":
        code = detail.get("exitCode")
        state = RankState.SUCCEEDED if code == 0 else RankState.FAILED
        return view | {"state": state, "exit_code": code, "reason": detail.get("reason") or "",
                       "started_at": timestamp(detail.get("startedAt")),
                       "finished_at": timestamp(detail.get("finishedAt"))}  # fmt: skip
    if node and node in lost_nodes:
        return view | {"state": RankState.LOST, "reason": "NodeLost", "message": f"node {node} is gone or not Ready"}
    status = (pod or {}).get("status") or {}
    if pod is not None and status.get("phase") == "Failed":
        # The pod ended without its container ending: the node went or evicted it.
        reason = status.get("reason") or "NodeLost"
        if reason in _NODE_REASONS:
            return view | {"state": RankState.LOST, "reason": reason, "message": status.get("message") or ""}
        return view | {"state": RankState.FAILED, "reason": reason, "message": status.get("message") or ""}
    failed = condition(workload, "Failed")
    if pod is None and failed is not None:
        # The workload failed and its pod is gone, deleted by the Job controller: past the deadline, or (an
        # Indexed Job) because another rank failed, when this one was stopped with the gang.
        reason = failed.get("reason") or "Failed"
        if reason == "BackoffLimitExceeded":
            return view | {"state": RankState.FAILED, "reason": STOPPED_WITH_GANG}
        return view | {"state": RankState.FAILED, "reason": reason, "message": failed.get("message") or ""}
    if kind == "running":
        return view | {"state": RankState.RUNNING, "started_at": timestamp(detail.get("startedAt"))}
    reason, message = waiting_reason(pod)
    return view | {"reason": reason, "message": message} if reason else view


def _gang_state(ranks: list[dict], views: list[dict]) -> GangObservation:
    """The whole from its ranks: a failed rank fails the gang (the first to fail, a container's own failure
    before a rank stopped with it), else a lost rank loses it, else all succeeded, else all run, else pending."""
    states = [view["state"] for view in views]
    pods = tuple(view["pod"] for view in views if view["pod"])
    started = [view["started_at"] for view in views if view["started_at"]]
    failed = [view for view in views if view["state"] == RankState.FAILED]
    if failed:
        first = min(failed, key=lambda v: (v["exit_code"] is None, v["finished_at"] is None, v["finished_at"] or 0,
                                           v["rank"]))  # fmt: skip
        return _about(FAILED, ranks, first, pods, started)
    lost = [view for view in views if view["state"] == RankState.LOST]
    if lost:
        return _about(LOST, ranks, lost[0], pods, started)
    if all(state == RankState.SUCCEEDED for state in states):
        finished = max(view["finished_at"] for view in views if view["finished_at"]) if views else None
        return GangObservation(SUCCEEDED, ranks, pods=pods, started_at=min(started) if started else None,
                               finished_at=finished, pod_name=views[0]["pod"])  # fmt: skip
    if all(state in (RankState.RUNNING, RankState.SUCCEEDED) for state in states):
        return GangObservation(RUNNING, ranks, pods=pods, started_at=max(started) if started else None,
                               pod_name=views[0]["pod"])  # fmt: skip
    waiting = next((view for view in views if view["state"] == RankState.PENDING and view["reason"]), None)
    if waiting is None:
        return GangObservation(PENDING, ranks, pods=pods)
    return _about(PENDING, ranks, waiting, pods, started)


def _about(phase: str, ranks: list[dict], view: dict, pods: tuple[str, ...], started: list) -> GangObservation:
    return GangObservation(
        phase, ranks, rank=view["rank"], exit_code=view["exit_code"], reason=view["reason"], message=view["message"],
        node=view["node"], pod_name=view["pod"], started_at=min(started) if started else None,
        finished_at=view["finished_at"], pods=pods,
    )  # fmt: skip
