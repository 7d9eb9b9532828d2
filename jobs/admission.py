"""Admission and placement: pure Python over an in-memory snapshot, no Django, no I/O.

One call of ``decide(snapshot)`` is one admission cycle. The caller (jobs.cycle) builds the snapshot with a
constant number of queries, applies the decisions in one transaction and creates the workloads.

The rules, in order (docs/user-guide.md explains them to users):

1. Order. Queued jobs are considered by priority (high first); within a priority, the team furthest below
   its fair share goes first; within a team, the oldest submission. A team's share is
   ``(held now + recent average held) / (2 × guaranteed)``, in normalised GPUs (a 3g.40gb slice is 3/7 of a
   GPU), where the recent average decays with ``half_life``. Shares are updated as jobs are admitted within
   the cycle, so one team cannot take a whole cycle's capacity while another waits.
A job is ``workers`` pods of ``count`` units each; a job of more than one worker is a *gang*, and counts as
workers × count units wherever a rule below counts units (quota, shares, budgets). A gang is admitted whole
(every rank on its own node) in one cycle or not at all; jobs.gangs places, explains and reserves for it.

2. Quota. A job is admitted within its team's guarantee for its class, or above it up to the hard limit
   only if it is preemptible and no job within its own team's guarantee is waiting for that class (borrowing
   uses capacity nobody with a guarantee wants). A monthly GPU-hour budget, when set, must cover the job's
   maximum runtime.
3. Capacity and placement. The job needs one node of its class (product label), Ready and not cordoned,
   dedicated to no team or to its own, with ``count`` free units of the resource, and the CPU and memory.
   Among those the placement engine (jobs.placement) prefers the node where the job fragments the class's
   demand (queued and running job sizes) least, with a pull towards the tightest fit in the requested
   resource, then nodes already in use before empty ones (empty 8-GPU nodes stay free for 8-GPU jobs),
   then by name. Nodes in the same state form one group (ClassIndex), so a placement looks at each
   distinct state once. A gang needs W distinct such nodes, chosen rank by rank with the same engine, and
   within one value of its topology label when it requires one (prefers: tried first).
4. No head-of-line blocking, bounded: a job that cannot fit now does not stop the jobs behind it (they
   backfill), until it has waited ``patience`` seconds. From then on it is *starving*: jobs ordered after it
   in the same class are not admitted, so the units that finishing jobs free collect for it. This applies
   only to a job that fits on an empty node of its class — one that can never fit blocks nobody. A starving
   gang instead holds the W nodes nearest to fitting it: later jobs of its class are placed on other nodes.
5. Group caps. A job of a group (a task of a job array) whose group already holds its cap of active jobs
   (``Snapshot.group_caps``) waits; it blocks nobody else. The cap is data: admission never asks what a
   group is.
6. Reclaim. A job within its team's guarantee that does not fit may preempt preemptible jobs other teams
   run on borrowed capacity on one node (the node where the fewest units must go; a gang: on the W nodes
   where the fewest must go). They are told, get a grace period, and are requeued; the waiting job is admitted
   once the capacity is back. A gang is one job: preempting it frees its units on every rank's node.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field

from . import gangs, node_trust, reclaim
from .admission_index import ClassIndex, Engines, Tallies

__all__ = [
    "ClassIndex", "ClassView", "Decisions", "Engines", "JobView", "NodeView", "QuotaView", "Snapshot", "Tallies",
    "Wait", "decide",
]  # fmt: skip


@dataclass
class NodeView:
    name: str
    product_label: str
    #: None: shared by all teams; else the only team (id) allowed on it.
    team: int | None
    schedulable: bool
    #: Units the node advertises per resource (allocatable), and what is still free for the portal.
    allocatable: dict[str, int]
    free: dict[str, int]
    cpu_free_m: int
    memory_free_mb: int
    #: CPU and memory the portal's jobs could have on this node if none of them ran there.
    cpu_capacity_m: int = 0
    memory_capacity_mb: int = 0
    #: The newest CUDA version (major, minor) the node's driver supports; () when unknown.
    cuda: tuple[int, ...] = ()
    #: The node's CPU architecture (kubernetes.io/arch); "" when unknown.
    architecture: str = ""
    #: Why the node's GPU stack takes no new work (gpus.models.Node.blocked_reason); "" when it can.
    kept_off: str = ""
    #: The node's values of the admin's topology labels (settings.PORTAL_TOPOLOGY_KEYS) it carries.
    topology: dict[str, str] = field(default_factory=dict)
    #: The node belongs to the dedicated service pool: only jobs whose kind uses the pool are placed on it.
    pool: bool = False

    @property
    def idle(self) -> bool:
        return all(self.free.get(r, 0) >= n for r, n in self.allocatable.items())


@dataclass(frozen=True)
class ClassView:
    id: int
    resource_name: str
    product_label: str
    gpu_fraction: float
    name: str = ""


@dataclass(frozen=True)
class QuotaView:
    guaranteed: int
    limit: int
    #: Normalised GPU-hours per month; None = no budget.
    budget_hours: float | None = None
    used_hours: float = 0.0


@dataclass
class JobView:
    """A job as admission sees it: ``workers`` pods (ranks) of ``count`` units, ``cpu_m`` and ``memory_mb``
    each. One worker is a single job; more are a gang, placed on that many distinct nodes or not at all."""

    id: int
    team: int
    class_id: int
    count: int
    cpu_m: int
    memory_mb: int
    priority: int
    preemptible: bool
    #: Submission time, epoch seconds.
    submitted: float
    max_runtime_s: int = 3600
    # Active jobs only:
    node: str = ""
    borrowed: bool = False
    preempting: bool = False
    #: The CUDA version (major, minor) the job's image needs, when known.
    cuda: tuple[int, ...] = ()
    #: The group the job belongs to (a job array's id), or None.
    group: int | None = None
    #: The CPU architecture the job is pinned to; "" for any.
    architecture: str = ""
    #: Pods (ranks) of ``count`` units each, on distinct nodes; and the node label their nodes should share
    #: one value of, "prefer" or "require" ("" for none).
    workers: int = 1
    topology_key: str = ""
    topology_mode: str = ""
    #: Active jobs: the node of each rank, rank 0 first; (node,) for a one-pod job.
    nodes: tuple[str, ...] = ()
    #: The job goes to the dedicated service pool's nodes (and only there); every other job keeps off them.
    pool: bool = False

    @property
    def total(self) -> int:
        """Units the job holds of its class: workers × count (what quota, shares and budgets count)."""
        return self.count * self.workers

    @property
    def placed_on(self) -> tuple[str, ...]:
        return self.nodes or ((self.node,) if self.node else ())


@dataclass
class Snapshot:
    now: float
    nodes: dict[str, NodeView]
    classes: dict[int, ClassView]
    #: (team, class) → quota
    quotas: dict[tuple[int, int], QuotaView]
    queued: list[JobView]
    active: list[JobView]
    #: team → decayed average of normalised GPUs held
    recent_average: dict[int, float] = field(default_factory=dict)
    team_names: dict[int, str] = field(default_factory=dict)
    patience: float = 900.0
    #: group → most of its jobs active at once (a job array's parallelism); groups without a cap are absent.
    group_caps: dict[int, int] = field(default_factory=dict)


@dataclass
class Wait:
    reason: str  # jobs.choices.WaitReason values
    message: str
    detail: dict = field(default_factory=dict)
    position: int | None = None


@dataclass
class Decisions:
    #: job id → (node, borrowed); a gang's node is its rank 0's
    admit: dict[int, tuple[str, bool]] = field(default_factory=dict)
    #: gang job id → the node of each rank, rank 0 first (every admitted gang, and only gangs)
    ranks: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: starving gang job id → the nodes held for it: jobs after it in its class are not placed there
    reserved: dict[int, tuple[str, ...]] = field(default_factory=dict)
    #: job id (running, borrowed) → job id it makes room for
    preempt: dict[int, int] = field(default_factory=dict)
    wait: dict[int, Wait] = field(default_factory=dict)
    #: class id → job id that is starving (holding back its class)
    starving: dict[int, int] = field(default_factory=dict)


def decide(
    snap: Snapshot, engines: Engines | None = None, tallies: Tallies | None = None, until_all_starve: bool = False
) -> Decisions:
    """One admission cycle over ``snap``. The placement engines and the tallies of what the active jobs hold are
    built from the snapshot, or are the caller's own (a replay that keeps them between cycles: then
    ``snap.active`` is not read, and what this cycle admits is recorded in them).

    ``until_all_starve``: stop once every class with queued work has a starving job. Every job after that point
    would wait (rule 4) and nothing more is admitted, preempted or held, so the decisions are the same except that
    those jobs have no ``wait`` (the planner's replay, which keeps their last answer)."""
    out = Decisions()
    classes = snap.classes
    if engines is None:
        # Work on copies: the snapshot stays what was observed.
        jobs_by_class: dict[int, list[JobView]] = defaultdict(list)
        for job in (*snap.queued, *snap.active):
            jobs_by_class[job.class_id].append(job)
        engines = Engines(snap.nodes.values(), classes, jobs_by_class)
    if tallies is None:
        tallies = Tallies.of(snap.active, classes)
    # Borrowed preemptible work and work already being preempted, per class and node, for reclaiming.
    borrowed_on, returning_on = tallies.borrowed_on, tallies.returning_on
    # What teams hold now, per class (units) and overall (normalised GPUs).
    used, group_active, held = tallies.used, tallies.group_active, tallies.held
    guaranteed_units: dict[int, float] = defaultdict(float)
    for (team, class_id), quota in snap.quotas.items():
        cls = classes.get(class_id)
        if cls is not None:
            guaranteed_units[team] += quota.guaranteed * cls.gpu_fraction

    def share(team: int) -> float:
        g = guaranteed_units.get(team, 0.0)
        h = held.get(team, 0.0) + snap.recent_average.get(team, 0.0)
        return h / (2 * g) if g > 0 else math.inf if h > 0 else 1e9

    # Per priority level, a heap of teams keyed by share; each team's jobs oldest first.
    by_level: dict[int, dict[int, list[JobView]]] = defaultdict(lambda: defaultdict(list))
    for job in snap.queued:
        by_level[job.priority][job.team].append(job)

    budget_committed: dict[tuple[int, int], float] = defaultdict(float)
    guaranteed_waiting: set[int] = set()  # classes with a within-guarantee job that did not fit
    positions: dict[int, int] = defaultdict(int)
    reclaimed: set[int] = set()  # active jobs already chosen for preemption this cycle

    def consider(job: JobView) -> None:
        cls = classes.get(job.class_id)
        positions[job.class_id] += 1
        position = positions[job.class_id]
        if cls is None:
            out.wait[job.id] = Wait("never_fits", "Its resource class no longer exists.", position=position)
            return
        cap = snap.group_caps.get(job.group) if job.group is not None else None
        if cap is not None and group_active[job.group] >= cap:
            out.wait[job.id] = Wait(
                "array",
                f"Its array runs at most {cap} task(s) at once and {group_active[job.group]} are admitted or running; "
                "it starts when one of them ends.",
                {"array_cap": cap, "array_active": group_active[job.group]},
                position,
            )
            return
        quota = snap.quotas.get((job.team, job.class_id))
        team_name = snap.team_names.get(job.team, str(job.team))
        if quota is None or quota.limit == 0:
            out.wait[job.id] = Wait(
                "quota",
                f"Team {team_name} has no quota for {cls.name}; an admin must grant one.",
                {"limit": 0},
                position,
            )
            return
        in_use = used[(job.team, job.class_id)]
        after = in_use + job.total
        numbers = {"requested": job.total, "in_use": in_use, "guaranteed": quota.guaranteed, "limit": quota.limit}
        if after > quota.limit:
            out.wait[job.id] = Wait(
                "quota",
                f"Team {team_name} holds {in_use} of its limit of {quota.limit} × {cls.name}; this job needs "
                f"{job.total} more. It starts when the team's running jobs free enough.",
                numbers,
                position,
            )
            return
        borrowing = after > quota.guaranteed
        if borrowing and not job.preemptible:
            out.wait[job.id] = Wait(
                "quota",
                f"Team {team_name} holds {in_use} × {cls.name} and is guaranteed {quota.guaranteed}; going above the "
                f"guarantee (up to the limit of {quota.limit}) is only for preemptible jobs. It starts when the "
                "team's running jobs free enough, or resubmit it as preemptible (Resubmit with changes).",
                numbers,
                position,
            )
            return
        if quota.budget_hours is not None:
            charge = job.total * cls.gpu_fraction * job.max_runtime_s / 3600
            spent = quota.used_hours + budget_committed[(job.team, job.class_id)]
            if spent + charge > quota.budget_hours:
                left = max(0.0, quota.budget_hours - spent)
                out.wait[job.id] = Wait(
                    "budget",
                    f"Team {team_name} has {left:.1f} of its {quota.budget_hours:g} GPU-hours for {cls.name} left this "
                    f"month; this job may use {charge:.1f} (GPUs × share of a GPU × maximum runtime). Shorten its "
                    "maximum runtime or wait for next month.",
                    {"budget_hours": quota.budget_hours, "used_hours": round(spent, 2), "charge": charge},
                    position,
                )
                return
        if borrowing and job.class_id in guaranteed_waiting:
            out.wait[job.id] = Wait(
                "capacity",
                f"Free {cls.name} capacity is held for jobs within their teams' guarantees; borrowing above the "
                "guarantee waits until they are placed.",
                numbers,
                position,
            )
            return
        starving = out.starving.get(job.class_id)
        idx = engines.index(job.class_id)
        shapes = idx.shapes(job.team)
        if job.cuda and shapes and not any(not cuda or cuda >= job.cuda for *_, cuda in shapes):
            newest = max(cuda for *_, cuda in shapes)
            out.wait[job.id] = Wait(
                "cuda",
                f"Its image needs CUDA {'.'.join(map(str, job.cuda))}, but the drivers on the {cls.name} nodes "
                f"now support at most CUDA {'.'.join(map(str, newest))}. Resubmit it with an older image.",
                {"image_cuda": ".".join(map(str, job.cuda)), "node_cuda": ".".join(map(str, newest))},
                position,
            )
            return
        if job.architecture and not any(
            n.schedulable and n.architecture == job.architecture and (n.team is None or n.team == job.team)
            for n in idx.nodes
        ):
            out.wait[job.id] = Wait(
                "never_fits",
                f"It is pinned to {job.architecture} nodes and no schedulable {cls.name} node that team {team_name} "
                f"may use is {job.architecture}. It waits until one is; or resubmit it for any architecture.",
                {"architecture": job.architecture},
                position,
            )
            return
        if starving is not None and starving != job.id:
            out.wait[job.id] = Wait(
                "capacity",
                f"Job #{starving} has waited longest for {cls.name}; GPUs that free up go to it first.",
                numbers | {"held_for": starving},
                position,
            )
            if not borrowing:
                guaranteed_waiting.add(job.class_id)
            return
        gang = job.workers > 1
        if gang:
            placed = gangs.place(idx, job)
        else:
            node = idx.place(job)
            placed = [node] if node is not None else None
        if placed:
            for node in placed:
                # Other classes of the same node share its NodeView; their engines re-read its CPU and memory.
                engines.take(idx, node, job)
            used[(job.team, job.class_id)] = after
            if job.group is not None:
                group_active[job.group] += 1
            held[job.team] += job.total * cls.gpu_fraction
            budget_committed[(job.team, job.class_id)] += job.total * cls.gpu_fraction * job.max_runtime_s / 3600
            out.admit[job.id] = (placed[0].name, borrowing)
            if gang:
                out.ranks[job.id] = tuple(node.name for node in placed)
            return
        # Does not fit now. Could it ever?
        never = gangs.never_fits(idx, job, team_name, cls.name) if gang else None
        if never is not None:
            out.wait[job.id] = Wait("never_fits", never[0], never[1], position)
            return
        ever = gang or any(
            units >= job.count
            and cpu >= job.cpu_m
            and memory >= job.memory_mb
            and (not job.cuda or not c or c >= job.cuda)
            for units, cpu, memory, c in shapes
        )
        if not ever:
            biggest = max((units for units, *_ in shapes), default=0)
            off = idx.kept_off(job.team)
            out.wait[job.id] = Wait(
                "never_fits",
                f"No schedulable node that team {team_name} may use can hold {job.count} × {cls.name} (the largest "
                f"offers {biggest}).{node_trust.kept_off_sentence(off)} It waits until such a node is back; or "
                "cancel it and ask for fewer.",
                {"requested": job.count, "largest_node": biggest, **({"kept_off": sorted(off)} if off else {})},
                position,
            )
            return
        if not borrowing:
            guaranteed_waiting.add(job.class_id)
            victims, returning = (reclaim.for_gang if gang else reclaim.for_job)(
                idx, job, borrowed_on[job.class_id], returning_on[job.class_id], reclaimed
            )
            if returning:
                out.wait[job.id] = Wait(
                    "reclaiming",
                    f"Borrowed {cls.name} capacity is being handed back (preempted jobs are in their grace period); "
                    "this job is placed as soon as it is free.",
                    numbers,
                    position,
                )
                return
            if victims:
                for victim in victims:
                    out.preempt[victim] = job.id
                    reclaimed.add(victim)
                out.wait[job.id] = Wait(
                    "reclaiming",
                    f"Team {team_name} is within its guarantee of {quota.guaranteed} × {cls.name}; "
                    f"{len(victims)} preemptible job(s) running on borrowed capacity are being stopped to make room.",
                    numbers | {"preempting": sorted(victims)},
                    position,
                )
                return
        waited = snap.now - job.submitted
        if gang:
            message, detail = gangs.explain(idx, job, cls.name)
            message += f" Position {position} in the queue for this class."
            if waited >= snap.patience:
                # A starving gang holds the nodes nearest to fitting it; later jobs of its class go elsewhere.
                out.reserved[job.id] = held_nodes = gangs.reserve(idx, job)
                detail["reserved_nodes"] = list(held_nodes)
                message += (
                    f" It has waited long enough that {len(held_nodes)} nodes are held for it "
                    f"({', '.join(held_nodes)}): jobs after it are not placed there, so they free up for it."
                )
        else:
            free_best, total_free = idx.most_free(), idx.total_free
            message = (
                f"All {cls.name} capacity that fits is taken: it needs {job.count} on one node; the most free on any "
                f"node is {free_best} ({total_free} free in total). Position {position} in the queue for this class."
            )
            detail = {"largest_free_on_a_node": free_best, "free_total": total_free}
            if waited >= snap.patience and job.class_id not in out.starving:
                out.starving[job.class_id] = job.id
                message += " It has waited long enough that smaller jobs no longer pass it."
        if off := idx.kept_off(job.team):  # nodes of the class placement does not use, and why
            message += node_trust.kept_off_sentence(off)
            detail["kept_off"] = sorted(off)
        out.wait[job.id] = Wait("capacity", message, numbers | detail | {"waited_seconds": int(waited)}, position)

    queued_classes = len({job.class_id for job in snap.queued}) if until_all_starve else 0
    for level in sorted(by_level, reverse=True):
        queues = {team: sorted(jobs, key=lambda j: (j.submitted, j.id)) for team, jobs in by_level[level].items()}
        cursor = dict.fromkeys(queues, 0)
        heap = [(share(team), min(j.submitted for j in jobs), team) for team, jobs in queues.items()]
        heapq.heapify(heap)
        while heap:
            team = heapq.heappop(heap)[2]
            job = queues[team][cursor[team]]
            consider(job)
            if queued_classes and len(out.starving) == queued_classes:
                return out
            cursor[team] += 1
            if cursor[team] < len(queues[team]):
                heapq.heappush(heap, (share(team), queues[team][cursor[team]].submitted, team))
    return out
