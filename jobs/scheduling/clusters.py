"""Admission across the clusters of the fleet: per-cluster quota caps and the per-cluster wait. Pure Python.

A team's quota for a class is fleet-wide (its guarantee and limit count what it holds on every cluster); a quota
may also cap what the team holds of the class on one cluster (``QuotaView.caps``, as Run:ai sets quota per node
pool). A cap only ever narrows where a job may go: the fleet-wide limit is checked first and still holds.

- ``eligible``: the clusters a queued job may run on for its class, in the order it prefers them (the class's
  clusters by name when it names none).
- ``capped``: the eligible clusters where the team's cap is reached (what it holds there plus the job's units
  would be above it); admission's cap gate (jobs.scheduling.gates.cluster_cap) bars them for this cycle
  (``JobView.barred``), so placement tries the other clusters, and waits with ``QUOTA`` when none is left.
- ``reasons``: why the job is not starting on each eligible cluster, one WaitReason and sentence each, for a job
  that may run on several and starts on none; decide puts them in the wait's message and detail (``clusters``).
"""

from __future__ import annotations

from dataclasses import replace

from jobs.scheduling import placement
from jobs.scheduling.engines import ClassIndex
from jobs.scheduling.snapshot import ClassView, JobView, QuotaView
from jobs.scheduling.tallies import Tallies
from vocab.waits import WaitReason


def eligible(idx: ClassIndex, job: JobView) -> list[str]:
    """The clusters the job may run on for its class: its preferences in order (those with no node of the class
    too: the per-cluster wait says so), or every cluster with nodes of the class, by name."""
    return list(job.clusters) if job.clusters else list(idx.clusters)


def capped(job: JobView, quota: QuotaView, tallies: Tallies, clusters: list[str]) -> dict[str, tuple[int, int]]:
    """cluster → (units the team holds there, its cap) for each of ``clusters`` where the job would take the team
    above its cap."""
    out = {}
    for cluster in clusters:
        cap = quota.caps.get(cluster)
        if cap is not None:
            held = tallies.used_on[(job.team, job.class_id, cluster)]
            if held + job.total > cap:
                out[cluster] = (held, cap)
    return out


def cap_sentence(team_name: str, cls: ClassView, cluster: str, held: int, cap: int, job: JobView) -> str:
    return (
        f"{team_name}'s cap of {cap} × {cls.name} on {cluster} is reached (it holds {held} there; this job needs "
        f"{job.total})"
    )


def _static(idx: ClassIndex, job: JobView) -> dict[str, tuple[int, int, int]]:
    """cluster → (nodes of the class there the job's team may use, how many of them could ever hold one of its
    pods, the most units one of them offers). What nodes are does not change within a cycle: memoised per shape."""
    key = (job.team, job.count, job.cpu_m, job.memory_mb, job.cuda, job.architecture, job.pool)
    found = idx.cluster_shapes.get(key)
    if found is None:
        found = {}
        for n in idx.nodes:
            if not (
                n.schedulable
                and (n.team is None or n.team == job.team)
                and n.pool == job.pool
                and (not job.cuda or not n.cuda or n.cuda >= job.cuda)
                and (not job.architecture or n.architecture == job.architecture)
            ):
                continue
            units = n.allocatable.get(idx.resource, 0)
            able = units >= job.count and n.cpu_capacity_m >= job.cpu_m and n.memory_capacity_mb >= job.memory_mb
            usable, holding, largest = found.get(n.cluster, (0, 0, 0))
            found[n.cluster] = (usable + 1, holding + able, max(largest, units))
        idx.cluster_shapes[key] = found
    return found


def _now(idx: ClassIndex, job: JobView) -> dict[str, tuple[int, int]]:
    """cluster → (nodes the job's team may use that have room for one of its pods now, the most free units on one
    of them). Counted per node state (the engine's groups), not per node; nodes held for a starving gang are not
    in the engine. Memoised per job shape while the engine does not change (a queue of like jobs counts once)."""
    key = (job.team, job.count, job.cpu_m, job.memory_mb, job.cuda, job.architecture, job.pool)
    memo = idx.room_memo.get(key)
    if memo is not None and memo[0] == idx.changes:
        return memo[1]
    demand = idx._demand(job)
    allow = idx.allow(replace(job, clusters=(), barred=frozenset()))
    out: dict[str, tuple[int, int]] = {}
    for sig, group in idx.placer.states():
        tag = sig[1]
        if not allow(tag):
            continue
        cluster = tag[6]
        room, most = out.get(cluster, (0, 0))
        free = sum(1 for milli in sig[4] if milli >= placement.WHOLE)
        out[cluster] = (room + (len(group) if placement.fits(sig, demand) else 0), max(most, free))
    idx.room_memo[key] = (idx.changes, out)
    return out


def reasons(
    idx: ClassIndex, job: JobView, team_name: str, caps: dict[str, tuple[int, int]]
) -> list[tuple[str, WaitReason, str]]:
    """(cluster, reason, sentence) for each eligible cluster: its cap is reached (``caps``: as ``capped`` found
    them), no node there the team may use offers the class, none could ever hold the job (a gang: not enough of
    them), or none has room now."""
    cls = idx.cls
    static, now = _static(idx, job), None
    out = []
    for cluster in eligible(idx, job):
        if cluster in caps:
            held, cap = caps[cluster]
            out.append((cluster, WaitReason.QUOTA, cap_sentence(team_name, cls, cluster, held, cap, job)))
            continue
        usable, able, largest = static.get(cluster, (0, 0, 0))
        if not usable:
            out.append((cluster, WaitReason.NEVER_FITS, f"no schedulable {cls.name} node that {team_name} may use"))
            continue
        if able < job.workers:
            if job.workers > 1:
                sentence = f"only {able} of the {job.workers} nodes it needs could ever hold {job.count} × {cls.name}"
            else:
                sentence = f"no node can ever hold {job.count} × {cls.name} (the largest offers {largest})"
            out.append((cluster, WaitReason.NEVER_FITS, sentence))
            continue
        if now is None:
            now = _now(idx, job)
        room, most = now.get(cluster, (0, 0))
        if room < job.workers:
            if job.workers > 1:
                sentence = f"{room} of the {job.workers} nodes it needs have {job.count} free × {cls.name} now"
            else:
                sentence = f"no node has {job.count} free × {cls.name} (the most free on one is {most})"
        elif job.topology_key and job.topology_mode == "require":
            sentence = f"the nodes with room are not within one {job.topology_key.rsplit('/', 1)[-1]}"
        else:
            sentence = "the nodes with room are held for jobs ahead of it"
        out.append((cluster, WaitReason.CAPACITY, sentence))
    return out


#: What comes before the per-cluster reasons in a wait's sentence (the job page shows them as a list instead).
LEAD = " Why not on each cluster: "


def sentence(found: list[tuple[str, WaitReason, str]]) -> str:
    """The per-cluster reasons as one sentence a person reads: "onprem: …; cloud: …"."""
    return "; ".join(f"{cluster}: {text}" for cluster, _, text in found)


def detail(found: list[tuple[str, WaitReason, str]]) -> list[dict]:
    """The per-cluster reasons as the wait's detail carries them (the API and the job page read it)."""
    return [{"cluster": cluster, "reason": reason.value, "message": text} for cluster, reason, text in found]
