"""A distributed job's ranks as its page shows them: one row per rank (worker pod) with its node, pod, state,
exit code or reason, where its log is, and the mean utilisation of its GPUs.

What the cluster shows of each rank is ``Job.ranks`` (kept current by the reconcile); before the first report
the rows come from ``Job.node_names`` (the admission's choice) or just the rank numbers. A rank's utilisation
is the mean of the telemetry samples attributed to this job (jobs.attribution) on that rank's node since the
current attempt started: one rank runs per node, so node and rank name the same GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Avg
from django.http import Http404

from jobs.choices import RankState
from jobs.models import Job
from telemetry.models import GpuSample

#: Badge colour of each rank state (the palette of jobs.choices.STATE_BADGE).
RANK_BADGE = {
    RankState.PENDING: "amber",
    RankState.RUNNING: "green",
    RankState.SUCCEEDED: "green",
    RankState.FAILED: "red",
    RankState.LOST: "red",
}
#: States in which a rank's pod exists and its log can be read from the cluster (followed while running).
LIVE_RANK_STATES = (RankState.PENDING, RankState.RUNNING)


@dataclass
class RankRow:
    rank: int
    node: str
    pod: str
    state: str
    exit_code: int | None
    reason: str
    util: float | None = None
    node_visible: bool = False

    @property
    def state_label(self) -> str:
        return RankState(self.state).label if self.state in RankState.values else "Not reported yet"

    @property
    def badge(self) -> str:
        return RANK_BADGE.get(self.state, "grey")


def rank_rows(job: Job) -> list[RankRow]:
    """Every rank of ``job`` in rank order (empty for a one-pod job)."""
    if not job.is_gang:
        return []
    reported = {int(r.get("rank", i)): r for i, r in enumerate(job.ranks or []) if isinstance(r, dict)}
    nodes = list(job.node_names or [])
    rows = []
    for rank in range(job.workers):
        seen = reported.get(rank, {})
        rows.append(
            RankRow(
                rank=rank,
                node=seen.get("node") or (nodes[rank] if rank < len(nodes) else ""),
                pod=seen.get("pod") or "",
                state=seen.get("state") or "",
                exit_code=seen.get("exit_code"),
                reason=seen.get("reason") or "",
            )
        )
    return rows


def with_utilisation(job: Job, rows: list[RankRow]) -> list[RankRow]:
    """Fill each row's mean utilisation (%) from telemetry, None where there is no sample: one query."""
    nodes = {row.node for row in rows if row.node}
    if not nodes or job.started_at is None:
        return rows
    samples = GpuSample.objects.filter(job_id=job.pk, node_name__in=nodes, ts__gte=job.started_at)
    if job.finished_at:
        samples = samples.filter(ts__lte=job.finished_at)
    means = dict(
        samples.exclude(util_pct__isnull=True)
        .values("node_name")
        .annotate(mean=Avg("util_pct"))
        .values_list("node_name", "mean")
        .order_by()
    )
    for row in rows:
        row.util = means.get(row.node)
    return rows


def rank_pods(job: Job) -> set[str]:
    """The pods of the job's ranks (the only pod names the log views take besides the job's own)."""
    return {r.get("pod") for r in job.ranks or [] if isinstance(r, dict) and r.get("pod")}


def pod_of_rank(job: Job, rank: str | int) -> str:
    """The pod of rank ``rank``; Http404 saying why when there is none."""
    try:
        number = int(rank)
    except (TypeError, ValueError):
        raise Http404(f"'{rank}' is not a rank; give a whole number from 0 to {job.workers - 1}.") from None
    if not job.is_gang:
        raise Http404(f"Job #{job.pk} is not a distributed job; it has one pod and no ranks.")
    if not 0 <= number < job.workers:
        raise Http404(f"Job #{job.pk} has no rank {number}; its ranks are 0 to {job.workers - 1}.")
    row = next((row for row in rank_rows(job) if row.rank == number), None)
    if row is None or not row.pod:
        raise Http404(f"Rank {number} of job #{job.pk} has no pod yet.")
    return row.pod
