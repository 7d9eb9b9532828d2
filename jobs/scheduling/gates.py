"""The admission gates: one function per reason a queued job waits. Pure Python, no Django.

Each gate looks at one queued job (an ``Ask``) in the cycle's working state (a ``Cycle``) and returns the
``Wait`` that stops it there — a vocab.waits.WaitReason member, the sentence its owner reads and the numbers
behind it — or None to let it through. jobs.scheduling.decide asks them in a fixed order, in four stages
(the rules themselves are in its docstring):

- ``ENTRY``: the class exists and some node offers it, the job's array is under its cap, the team has a quota
  for the class;
- ``QUOTA``: the limit, the per-cluster caps (a cluster where the team's cap is reached is barred for the job, and
  it waits only when every cluster it may use is), borrowing only for preemptible jobs, the monthly budget,
  borrowing only once nobody within a guarantee waits for the class (``Ask.in_use``, ``after``, ``borrowing`` and
  ``numbers`` are set);
- ``NODES``: the image's CUDA, the pinned architecture, a starving job ahead in the class (``Ask.idx`` and
  ``shapes`` are set); then decide places the job, and admits it when it fits;
- ``NO_ROOM``: it does not fit now: it never can (a gang, or a single job), or reclaiming borrowed capacity
  makes room for it; else ``no_room`` answers: it waits for capacity (and a job that has waited its patience
  starves).

A gate only changes the cycle's state where its rule says so: ``behind_starving`` and ``reclaim_borrowed`` note
a class for which a job within its guarantee waits (borrowing waits behind it); ``reclaim_borrowed`` records the
preemptions, and ``no_room`` the starving job or the nodes held for a starving gang.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace

from jobs.scheduling import clusters, gangs, node_trust, reclaim
from jobs.scheduling.engines import ClassIndex, Engines
from jobs.scheduling.snapshot import ClassView, Decisions, JobView, QuotaView, Snapshot, Wait
from jobs.scheduling.tallies import Tallies
from vocab.waits import WaitReason


@dataclass
class Cycle:
    """One admission cycle's working state, shared by the gates: the snapshot, the placement engines and the
    tallies of what teams hold (both updated as jobs are admitted), and the decisions so far."""

    snap: Snapshot
    engines: Engines
    tallies: Tallies
    out: Decisions = field(default_factory=Decisions)
    #: (team, class) → GPU-hours the jobs admitted this cycle may use
    budget_committed: dict[tuple[int, int], float] = field(default_factory=lambda: defaultdict(float))
    #: classes with a within-guarantee job that did not fit
    guaranteed_waiting: set[int] = field(default_factory=set)
    #: active jobs already chosen for preemption this cycle
    reclaimed: set[int] = field(default_factory=set)


@dataclass(slots=True)
class Ask:
    """One queued job at the gates: what it asks, its position in its class's queue, its team's name and quota.
    decide fills in the rest as the stages pass (see the module docstring)."""

    job: JobView
    cls: ClassView | None
    position: int
    team_name: str
    quota: QuotaView | None
    #: Units the team holds of the class, and would hold with this job; whether that is above the guarantee.
    in_use: int = 0
    after: int = 0
    borrowing: bool = False
    #: The quota figures every quota and capacity wait carries in its detail.
    numbers: dict | None = None
    #: The class's placement engine, and the shapes of the nodes the team may use (ClassIndex.shapes).
    idx: ClassIndex | None = None
    shapes: set[tuple] | None = None
    #: The clusters the team's caps bar for this job: cluster → (units held there, cap) (``cluster_cap``).
    capped: dict[str, tuple[int, int]] = field(default_factory=dict)


# -- ENTRY ---------------------------------------------------------------------------------------------------
def class_missing(c: Cycle, a: Ask) -> Wait | None:
    if a.cls is None:
        return Wait(WaitReason.NEVER_FITS, "Its resource class no longer exists.", position=a.position)
    return None


def class_gone(c: Cycle, a: Ask) -> Wait | None:
    """No node of the fleet offers the class any more: the job cannot start as it is, whatever frees up."""
    if not a.cls.offered:
        return Wait(
            WaitReason.CLASS_GONE,
            f"No node offers {a.cls.name} any more: the GPUs that did were carved into other classes. It cannot start "
            "as it is: submit it again with a class that exists (a job's page offers Resubmit with changes; a notebook "
            "is launched again), and cancel this one.",
            {"class_offered": False},
            a.position,
        )
    return None


def array_cap(c: Cycle, a: Ask) -> Wait | None:
    """A task of an array whose array holds its cap of active jobs waits; it blocks nobody else."""
    group = a.job.group
    cap = c.snap.group_caps.get(group) if group is not None else None
    active = c.tallies.group_active
    if cap is not None and active[group] >= cap:
        return Wait(
            WaitReason.ARRAY,
            f"Its array runs at most {cap} task(s) at once and {active[group]} are admitted or running; "
            "it starts when one of them ends.",
            {"array_cap": cap, "array_active": active[group]},
            a.position,
        )
    return None


def no_quota(c: Cycle, a: Ask) -> Wait | None:
    if a.quota is None or a.quota.limit == 0:
        return Wait(
            WaitReason.QUOTA,
            f"Team {a.team_name} has no quota for {a.cls.name}; an admin must grant one.",
            {"limit": 0},
            a.position,
        )
    return None


# -- QUOTA ---------------------------------------------------------------------------------------------------
def over_limit(c: Cycle, a: Ask) -> Wait | None:
    if a.after > a.quota.limit:
        return Wait(
            WaitReason.QUOTA,
            f"Team {a.team_name} holds {a.in_use} of its limit of {a.quota.limit} × {a.cls.name}; this job needs "
            f"{a.job.total} more. It starts when the team's running jobs free enough.",
            a.numbers,
            a.position,
        )
    return None


def cluster_cap(c: Cycle, a: Ask) -> Wait | None:
    """A cluster where the job would take its team above the quota's cap there is barred for this job this cycle
    (``JobView.barred``: placement and reclaim try the other clusters); when every cluster it may use is barred, it
    waits. The fleet-wide limit (``over_limit``) is checked first: a cap never lets a team above it."""
    if not a.quota.caps:
        return None
    eligible = clusters.eligible(c.engines.index(a.job.class_id), a.job)
    a.capped = capped = clusters.capped(a.job, a.quota, c.tallies, eligible)
    if not capped:
        return None
    if len(capped) < len(eligible):
        a.job = replace(a.job, barred=frozenset(capped))
        return None
    found = [
        (cluster, WaitReason.QUOTA, clusters.cap_sentence(a.team_name, a.cls, cluster, held, cap, a.job))
        for cluster, (held, cap) in capped.items()
    ]
    said = (
        f"Team {found[0][2]}."
        if len(found) == 1
        else f"Every cluster it may use is capped: {clusters.sentence(found)}."
    )
    return Wait(
        WaitReason.QUOTA,
        f"{said} It starts when the team's jobs there free enough, or ask an admin to raise a cap.",
        a.numbers | {"clusters": clusters.detail(found)},
        a.position,
    )


def borrowing_needs_preemptible(c: Cycle, a: Ask) -> Wait | None:
    """Above the guarantee (up to the limit) only preemptible jobs run: that capacity may be reclaimed."""
    if a.borrowing and not a.job.preemptible:
        return Wait(
            WaitReason.QUOTA,
            f"Team {a.team_name} holds {a.in_use} × {a.cls.name} and is guaranteed {a.quota.guaranteed}; going "
            f"above the guarantee (up to the limit of {a.quota.limit}) is only for preemptible jobs. It starts when "
            "the team's running jobs free enough, or resubmit it as preemptible (Resubmit with changes).",
            a.numbers,
            a.position,
        )
    return None


def budget_exhausted(c: Cycle, a: Ask) -> Wait | None:
    """The month's GPU-hour budget, when set, must cover the job's maximum runtime (with what this cycle
    admitted already)."""
    quota, job, cls = a.quota, a.job, a.cls
    if quota.budget_hours is None:
        return None
    charge = job.total * cls.gpu_fraction * job.max_runtime_s / 3600
    spent = quota.used_hours + c.budget_committed[(job.team, job.class_id)]
    if spent + charge > quota.budget_hours:
        left = max(0.0, quota.budget_hours - spent)
        return Wait(
            WaitReason.BUDGET,
            f"Team {a.team_name} has {left:.1f} of its {quota.budget_hours:g} GPU-hours for {cls.name} left this "
            f"month; this job may use {charge:.1f} (GPUs × share of a GPU × maximum runtime). Shorten its "
            "maximum runtime or wait for next month.",
            {"budget_hours": quota.budget_hours, "used_hours": round(spent, 2), "charge": charge},
            a.position,
        )
    return None


def guaranteed_first(c: Cycle, a: Ask) -> Wait | None:
    """Borrowing uses capacity nobody with a guarantee wants: not while a job within its guarantee waits for
    the class."""
    if a.borrowing and a.job.class_id in c.guaranteed_waiting:
        return Wait(
            WaitReason.CAPACITY,
            f"Free {a.cls.name} capacity is held for jobs within their teams' guarantees; borrowing above the "
            "guarantee waits until they are placed.",
            a.numbers,
            a.position,
        )
    return None


# -- NODES ---------------------------------------------------------------------------------------------------
def cuda_too_new(c: Cycle, a: Ask) -> Wait | None:
    """No node of the class the team may use has a driver new enough for the image's CUDA."""
    job, shapes = a.job, a.shapes
    if job.cuda and shapes and not any(not cuda or cuda >= job.cuda for *_, cuda in shapes):
        newest = max(cuda for *_, cuda in shapes)
        return Wait(
            WaitReason.CUDA,
            f"Its image needs CUDA {'.'.join(map(str, job.cuda))}, but the drivers on the {a.cls.name} nodes "
            f"now support at most CUDA {'.'.join(map(str, newest))}. Resubmit it with an older image.",
            {"image_cuda": ".".join(map(str, job.cuda)), "node_cuda": ".".join(map(str, newest))},
            a.position,
        )
    return None


def no_node_of_architecture(c: Cycle, a: Ask) -> Wait | None:
    job = a.job
    if job.architecture and not any(
        n.schedulable and n.architecture == job.architecture and (n.team is None or n.team == job.team)
        for n in a.idx.nodes
    ):
        return Wait(
            WaitReason.NEVER_FITS,
            f"It is pinned to {job.architecture} nodes and no schedulable {a.cls.name} node that team "
            f"{a.team_name} may use is {job.architecture}. It waits until one is; or resubmit it for any "
            "architecture.",
            {"architecture": job.architecture},
            a.position,
        )
    return None


def behind_starving(c: Cycle, a: Ask) -> Wait | None:
    """A job that has waited its patience holds back the jobs after it in its class (rule 4)."""
    starving = c.out.starving.get(a.job.class_id)
    if starving is not None and starving != a.job.id:
        if not a.borrowing:
            c.guaranteed_waiting.add(a.job.class_id)
        return Wait(
            WaitReason.CAPACITY,
            f"Job #{starving} has waited longest for {a.cls.name}; GPUs that free up go to it first.",
            a.numbers | {"held_for": starving},
            a.position,
        )
    return None


# -- NO_ROOM: the job does not fit now -------------------------------------------------------------------------
def gang_never_fits(c: Cycle, a: Ask) -> Wait | None:
    """Fewer than W nodes the gang may use could ever hold a worker (within one domain when it requires one)."""
    if a.job.workers > 1:
        never = gangs.never_fits(a.idx, a.job, a.team_name, a.cls.name)
        if never is not None:
            return Wait(WaitReason.NEVER_FITS, never[0], never[1], a.position)
    return None


def never_fits(c: Cycle, a: Ask) -> Wait | None:
    """No node the job may use could ever hold it, even empty."""
    job = a.job
    if job.workers > 1 or any(
        units >= job.count
        and cpu >= job.cpu_m
        and memory >= job.memory_mb
        and (not job.cuda or not cuda or cuda >= job.cuda)
        for units, cpu, memory, cuda in a.shapes
    ):
        return None
    biggest = max((units for units, *_ in a.shapes), default=0)
    off = a.idx.kept_off(job.team)
    return Wait(
        WaitReason.NEVER_FITS,
        f"No schedulable node that team {a.team_name} may use can hold {job.count} × {a.cls.name} (the largest "
        f"offers {biggest}).{node_trust.kept_off_sentence(off)} It waits until such a node is back; or "
        "cancel it and ask for fewer.",
        {"requested": job.count, "largest_node": biggest, **({"kept_off": sorted(off)} if off else {})},
        a.position,
    )


def reclaim_borrowed(c: Cycle, a: Ask) -> Wait | None:
    """A job within its guarantee that does not fit: capacity other teams borrow is coming back, or is taken
    back from the borrowed preemptible jobs where the fewest units must go (rule 6)."""
    if a.borrowing:
        return None
    job, cls = a.job, a.cls
    c.guaranteed_waiting.add(job.class_id)
    find = reclaim.for_gang if job.workers > 1 else reclaim.for_job
    victims, returning = find(
        a.idx, job, c.tallies.borrowed_on[job.class_id], c.tallies.returning_on[job.class_id], c.reclaimed
    )
    if returning:
        return Wait(
            WaitReason.RECLAIMING,
            f"Borrowed {cls.name} capacity is being handed back (preempted jobs are in their grace period); "
            "this job is placed as soon as it is free.",
            a.numbers,
            a.position,
        )
    if victims:
        for victim in victims:
            c.out.preempt[victim] = job.id
            c.reclaimed.add(victim)
        return Wait(
            WaitReason.RECLAIMING,
            f"Team {a.team_name} is within its guarantee of {a.quota.guaranteed} × {cls.name}; "
            f"{len(victims)} preemptible job(s) running on borrowed capacity are being stopped to make room.",
            a.numbers | {"preempting": sorted(victims)},
            a.position,
        )
    return None


def no_room(c: Cycle, a: Ask) -> Wait:
    """It could fit some day but not now: what is free, in its own terms. A job that has waited its patience
    starves (the jobs after it in its class wait); a gang instead holds the nodes nearest to fitting it."""
    job, idx, cls, position = a.job, a.idx, a.cls, a.position
    waited = c.snap.now - job.submitted
    if job.workers > 1:
        message, detail = gangs.explain(idx, job, cls.name)
        message += f" Position {position} in the queue for this class."
        if waited >= c.snap.patience:
            # A starving gang holds the nodes nearest to fitting it; later jobs of its class go elsewhere.
            soonest = (job.estimated_cluster,) if job.estimated_cluster else ()
            c.out.reserved[job.id] = held_nodes = gangs.reserve(idx, job, soonest)
            c.engines.hold(idx, held_nodes)
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
        if waited >= c.snap.patience and job.class_id not in c.out.starving:
            c.out.starving[job.class_id] = job.id
            message += " It has waited long enough that smaller jobs no longer pass it."
    if off := idx.kept_off(job.team):  # nodes of the class placement does not use, and why
        message += node_trust.kept_off_sentence(off)
        detail["kept_off"] = sorted(off)
    return Wait(WaitReason.CAPACITY, message, a.numbers | detail | {"waited_seconds": int(waited)}, position)


#: The gates, stage by stage, in the order decide asks them (the module docstring says what each stage has);
#: ``no_room`` answers a job that does not fit and passed ``NO_ROOM``.
ENTRY = (class_missing, class_gone, array_cap, no_quota)
QUOTA = (over_limit, cluster_cap, borrowing_needs_preemptible, budget_exhausted, guaranteed_first)
NODES = (cuda_too_new, no_node_of_architecture, behind_starving)
NO_ROOM = (gang_never_fits, never_fits, reclaim_borrowed)
