"""Admission and placement: pure Python over an in-memory snapshot, no Django, no I/O.

One call of ``decide(snapshot)`` is one admission cycle. The caller (jobs.cycle.run) builds the snapshot with a
constant number of queries, applies the decisions in one transaction and creates the workloads. Each reason a
job waits is one gate (jobs.scheduling.gates), asked in the order below; this module orders the queue, asks the
gates and admits what passes and fits.

The rules, in order (docs/user-guide.md explains them to users):

1. Order. Queued jobs are considered by priority (high first); within a priority, the team furthest below
   its fair share goes first; within a team, the member who used least for their weight
   (jobs.scheduling.members); within a member, the oldest submission. A team's share is
   ``(held now + recent average held) / (2 × guaranteed)``, in normalised GPUs (a 3g.40gb slice is 3/7 of a
   GPU), where the recent average decays with ``half_life``; a member's use is the same sum over their own jobs,
   divided by the weight the team's leads gave them. Shares and uses are updated as jobs are admitted within
   the cycle, so one team cannot take a whole cycle's capacity while another waits, nor one member a team's.
A job is ``workers`` pods of ``count`` units each; a job of more than one worker is a *gang*, and counts as
workers × count units wherever a rule below counts units (quota, shares, budgets). A gang is admitted whole
(every rank on its own node) in one cycle or not at all; jobs.scheduling.gangs places, explains and reserves for it.

2. Quota. A job is admitted within its team's guarantee for its class, or above it up to the hard limit
   only if it is preemptible and no job within its own team's guarantee is waiting for that class (borrowing
   uses capacity nobody with a guarantee wants). A monthly GPU-hour budget, when set, must cover the job's
   maximum runtime. Quota is fleet-wide; a quota may also cap what the team holds on one cluster: a cluster
   where the job would take the team above its cap is not used for it (placement tries the others), and the
   job waits when every cluster it may use is capped (jobs.scheduling.clusters).
3. Capacity and placement. The job needs one node of its class (product label), Ready and not cordoned,
   dedicated to no team or to its own, with ``count`` free units of the resource, and the CPU and memory.
   Among those the placement engine (jobs.scheduling.placement) prefers the node where the job fragments the class's
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
A job that may run on several clusters and starts on none says why per cluster (its cap, no node that could
ever hold it, no room now), after its one headline reason.

6. Alternatives. A job of a class that allows alternatives (``ClassView.alternatives``, DRA classes: "a 2g.20gb
   slice, else a 3g.40gb") and whose pods the portal pins to their nodes (``JobView.alternatives``) is tried as a
   job of each class in priority order, through every gate above but the ones that act for a job that does not fit
   (reclaim, starving, reservations); the first that passes and fits is what it gets: its quota, shares and devices
   are that class's (``Decisions.served_by``), exactly as if it had been submitted for it, and its pods ask
   exactly that class. When none fits, the job is answered as a job of its own class (that may reclaim, starve and
   hold nodes for it), and its sentence says why each alternative could not serve it either.
7. Reclaim. A job within its team's guarantee that does not fit may preempt preemptible jobs other teams
   run on borrowed capacity on one node (the node where the fewest units must go; a gang: on the W nodes
   where the fewest must go). They are told, get a grace period, and are requeued; the waiting job is admitted
   once the capacity is back. A gang is one job: preempting it frees its units on every rank's node.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Generator
from dataclasses import replace

from jobs.scheduling import clusters, gangs, gates, members
from jobs.scheduling.engines import Engines
from jobs.scheduling.gates import Ask, Cycle
from jobs.scheduling.snapshot import ClassView, Decisions, JobView, Snapshot, Wait
from jobs.scheduling.tallies import Tallies
from vocab.waits import WaitReason


def decide(
    snap: Snapshot, engines: Engines | None = None, tallies: Tallies | None = None, until_all_starve: bool = False
) -> Decisions:
    """One admission cycle over ``snap``. The placement engines and the tallies of what the active jobs hold are
    built from the snapshot, or are the caller's own (a replay that keeps them between cycles: then
    ``snap.active`` is not read, and what this cycle admits is recorded in them).

    ``until_all_starve``: stop once every class with queued work has a starving job. Every job after that point
    would wait (rule 4) and nothing more is admitted, preempted or held, so the decisions are the same except that
    those jobs have no ``wait`` (the planner's replay, which keeps their last answer)."""
    steps = deciding(snap, engines, tallies, until_all_starve)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def deciding(
    snap: Snapshot,
    engines: Engines | None = None,
    tallies: Tallies | None = None,
    until_all_starve: bool = False,
    every: int = 0,
) -> Generator[None, None, Decisions]:
    """``decide`` as a generator that yields after each ``every`` jobs it considered (0: never), between two jobs,
    where its working state is whole; it returns the decisions. A caller that owns the engines, the tallies and
    the snapshot's nodes (the start-time estimate's replay) may so spread one cycle over several turns of its own:
    the decisions are the same as ``decide``'s as long as nothing else touches that state in between."""
    classes = snap.classes
    if engines is None:
        # Work on copies: the snapshot stays what was observed.
        jobs_by_class: dict[int, list[JobView]] = defaultdict(list)
        for job in (*snap.queued, *snap.active):
            jobs_by_class[job.class_id].append(job)
        engines = Engines(snap.nodes.values(), classes, jobs_by_class)
    if tallies is None:
        tallies = Tallies.of(snap.active, classes, snap.nodes)
    cycle = Cycle(snap, engines, tallies)
    out = cycle.out
    held = tallies.held  # what teams hold now, in normalised GPUs (updated as jobs are admitted)
    guaranteed_units: dict[int, float] = defaultdict(float)
    for (team, class_id), quota in snap.quotas.items():
        cls = classes.get(class_id)
        if cls is not None:
            guaranteed_units[team] += quota.guaranteed * cls.gpu_fraction

    def share(team: int) -> float:
        g = guaranteed_units.get(team, 0.0)
        h = held.get(team, 0.0) + snap.recent_average.get(team, 0.0)
        return h / (2 * g) if g > 0 else math.inf if h > 0 else 1e9

    # Per priority level, a heap of teams keyed by share; within a team, its members by their use for their
    # weight (jobs.scheduling.members); each member's jobs oldest first.
    by_level: dict[int, dict[int, list[JobView]]] = defaultdict(lambda: defaultdict(list))
    for job in snap.queued:
        by_level[job.priority][job.team].append(job)
    positions: dict[int, int] = defaultdict(int)
    shares = members.MemberShares(snap, tallies)

    queued_classes = len({job.class_id for job in snap.queued}) if until_all_starve else 0
    considered = 0
    for level in sorted(by_level, reverse=True):
        queues = {team: shares.queue(team, jobs) for team, jobs in by_level[level].items()}
        heap = [(share(team), queue.head().submitted, team) for team, queue in queues.items()]
        heapq.heapify(heap)
        while heap:
            team = heapq.heappop(heap)[2]
            queue = queues[team]
            job = queue.pop()
            positions[job.class_id] += 1
            wait = shares.passed(job, consider(cycle, job, positions[job.class_id]))
            if wait is not None:
                out.wait[job.id] = wait
            if queued_classes and len(out.starving) == queued_classes:
                return out
            queue.done(job)
            if queue:
                heapq.heappush(heap, (share(team), queue.head().submitted, team))
            considered += 1
            if every and considered % every == 0:
                yield
    return out


def consider(c: Cycle, job: JobView, position: int) -> Wait | None:
    """Ask the gates about one queued job, stage by stage, and admit it if it passes them and fits: its wait,
    or None when it was admitted. A job that may be served by its class's alternatives tries them in order (rule 6)."""
    cls = c.snap.classes.get(job.class_id)
    choices = cls.alternatives if cls is not None and job.alternatives else ()
    if not choices:
        return _consider(c, job, position)
    tried: list[tuple[ClassView | None, Wait]] = []
    for choice in (job.class_id, *choices):
        a, wait = _gates_until_placed(c, replace(job, class_id=choice), position)
        if wait is None and admit(c, a):
            if choice != job.class_id:
                c.out.served_by[job.id] = choice
            return None
        tried.append((c.snap.classes.get(choice), wait))
    wait = _consider(c, job, position)
    if wait is None:  # not reached: its own class did not fit a moment ago, and nothing changed since
        return None
    return _with_alternatives(wait, tried[1:])


def _with_alternatives(wait: Wait, tried: list[tuple[ClassView | None, Wait | None]]) -> Wait:
    """``wait`` (of the job's own class), saying why each alternative could not serve the job either."""
    reasons = []
    for cls, alternative in tried:
        name = cls.name if cls is not None else "a class that is gone"
        why = alternative.reason.label.lower() if alternative is not None else "no room on any node now"
        reasons.append({"class": cls.id if cls is not None else None, "name": name, "reason": why})
    listed = "; ".join(f"{r['name']}: {r['reason']}" for r in reasons)
    message = f"{wait.message} Its alternatives could not serve it either ({listed})."
    return Wait(wait.reason, message, wait.detail | {"alternatives": reasons}, wait.position)


def _gates_until_placed(c: Cycle, job: JobView, position: int) -> tuple[Ask, Wait | None]:
    """The job at the entry, quota and node gates (none of which acts on the cycle): its Ask ready to place, and the
    first gate's wait (None: it may be placed)."""
    snap = c.snap
    a = Ask(
        job,
        snap.classes.get(job.class_id),
        position,
        snap.team_names.get(job.team, str(job.team)),
        snap.quotas.get((job.team, job.class_id)),
    )
    for gate in gates.ENTRY:
        if (wait := gate(c, a)) is not None:
            return a, wait
    a.in_use = c.tallies.used[(job.team, job.class_id)]
    a.after = a.in_use + job.total
    a.borrowing = a.after > a.quota.guaranteed
    a.numbers = {"requested": job.total, "in_use": a.in_use, "guaranteed": a.quota.guaranteed, "limit": a.quota.limit}
    for gate in gates.QUOTA:
        if (wait := gate(c, a)) is not None:
            return a, wait
    a.idx = c.engines.index(job.class_id)
    a.shapes = a.idx.shapes(job.team)
    for gate in gates.NODES:
        if (wait := gate(c, a)) is not None:
            return a, wait
    return a, None


def _consider(c: Cycle, job: JobView, position: int) -> Wait | None:
    """``consider`` for one class: the gates, the placement, and when it does not fit the gates that act for it."""
    a, wait = _gates_until_placed(c, job, position)
    if wait is not None:
        return wait
    if admit(c, a):
        return None
    for gate in gates.NO_ROOM:
        if (wait := gate(c, a)) is not None:
            return per_cluster(c, a, wait)
    return per_cluster(c, a, gates.no_room(c, a))


def per_cluster(c: Cycle, a: Ask, wait: Wait) -> Wait:
    """A job that may run on several clusters and starts on none: its wait says, per cluster, why not there
    (jobs.scheduling.clusters.reasons), in its sentence and as ``detail["clusters"]``. Reclaiming is one answer
    for the job, not per cluster."""
    if wait.reason == WaitReason.RECLAIMING or len(clusters.eligible(a.idx, a.job)) < 2:
        return wait
    found = clusters.reasons(a.idx, a.job, a.team_name, a.capped)
    wait.message += f"{clusters.LEAD}{clusters.sentence(found)}."
    wait.detail = wait.detail | {"clusters": clusters.detail(found)}
    return wait


def admit(c: Cycle, a: Ask) -> bool:
    """Place the job (a gang: all its ranks) and record it in the engines, the tallies and the decisions;
    False when it does not fit now."""
    job, idx, cls = a.job, a.idx, a.cls
    gang = job.workers > 1
    if gang:
        placed = gangs.place(idx, job)
    else:
        node = idx.place(job)
        placed = [node] if node is not None else None
    if not placed:
        return False
    for node in placed:
        # Other classes of the same node share its NodeView; their engines re-read its CPU and memory.
        c.engines.take(idx, node, job)
    tallies = c.tallies
    tallies.used[(job.team, job.class_id)] = a.after
    tallies.used_on[(job.team, job.class_id, placed[0].cluster)] += job.total
    if job.group is not None:
        tallies.group_active[job.group] += 1
    tallies.held[job.team] += job.total * cls.gpu_fraction
    tallies.member_held[(job.team, job.owner)] += job.total * cls.gpu_fraction
    c.budget_committed[(job.team, job.class_id)] += job.total * cls.gpu_fraction * job.max_runtime_s / 3600
    c.out.admit[job.id] = (placed[0].name, a.borrowing)
    if gang:
        c.out.ranks[job.id] = tuple(node.name for node in placed)
    return True
