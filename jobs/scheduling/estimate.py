"""Start-time estimates: the queue replayed forward from now through admission itself (``decide``, on the
placement engines and tallies kept between steps, as the planner's replay drives them). Pure Python, no Django;
jobs.cycle.estimates runs it on the cycle's snapshot and writes the answers.

One pass: every running job ends at its predicted end (``end_of``: its predicted total run length, bounded by its
maximum runtime, minus what it has run); a job being preempted ends after the grace. At each end — ends closer
than ``step_s`` share one step, like the real cycle's coalesced kicks — the units are handed back and ``decide``
is asked about the whole remaining queue, as the cycle would; what it admits starts then and runs its own
predicted length (``run_of``), and a job it preempts stops after the grace. A queued job's estimate is the time it
is first admitted; one not admitted within the horizon, or within ``max_steps`` steps, has none ("not within the
next N hours").

The range is two passes: optimistic (every run its low quantile) and pessimistic (its high quantile). The
earliest of a job's two answers is the range's start, the latest its end; a pessimistic pass that never admits
the job leaves the range open-ended.

Cost: at most ``max_steps`` admission cycles per pass, each stopping once every class with queued work has a
starving job (``until_all_starve``), on engines built once; a job waiting for its team's quota (its array's cap)
is asked again only once something of its team's class (its array) was handed back, as in the planner's replay.
A pass is a generator (``stepping``) that yields every few jobs a cycle considers (``decide.deciding``), so a
caller spreads it over turns of bounded cost: no turn need finish a cycle over the whole queue.

What it does not model: work submitted after now, jobs that fail early, nodes that come or go, budgets spent
meanwhile, requeued victims (they leave the queue for good), fair-share averages moving.
"""

from __future__ import annotations

import copy
import heapq
import math
from collections import defaultdict
from collections.abc import Callable, Generator
from dataclasses import dataclass, field, replace

from jobs.scheduling.decide import deciding
from jobs.scheduling.engines import Engines
from jobs.scheduling.snapshot import JobView, Snapshot
from jobs.scheduling.tallies import Tallies
from vocab.waits import WaitReason

#: Running jobs' ends predicted, and units handed back (a hand-back costs more: the tallies' borrowed work is
#: recounted), between two yields of ``stepping``.
ENDS_PER_YIELD = 1000
HANDBACKS_PER_YIELD = 50
#: Queued jobs one step's admission (``deciding``) considers between two yields: an admission or a reclaim costs
#: up to a few milliseconds, most jobs tens of microseconds.
JOBS_PER_YIELD = 10
#: Running jobs copied between two yields while a pass builds its state.
COPIES_PER_YIELD = 5000
#: Queued jobs' ranges made (and calibrated) between two yields once both passes are done.
RANGES_PER_YIELD = 2000
#: Wait reasons an unchanging cluster keeps for good (planner.engine_replay.STATIC).
STATIC = (WaitReason.NEVER_FITS, WaitReason.CLASS_GONE, WaitReason.CUDA)


@dataclass(frozen=True)
class Bounds:
    horizon_s: float = 6 * 3600.0  # settings.PORTAL_ESTIMATE_HORIZON
    max_steps: int = 200  # settings.PORTAL_ESTIMATE_MAX_STEPS
    step_s: float = 300.0  # ends closer than this share a step (jobs.cycle.estimates.bounds: horizon / 72)
    grace_s: float = 60.0  # settings.PORTAL_PREEMPTION_GRACE
    #: The range's calibration (``widen``); 1, 1 and 0: the two passes' answers as they are.
    widen_low: float = 1.0
    widen_high: float = 1.0
    widen_slack_s: float = 0.0


DEFAULT = Bounds()


@dataclass(frozen=True)
class Range:
    """A queued job's estimated start (epoch seconds): ``low`` None when not within the horizon; ``high`` None when
    the pessimistic pass did not start it within the horizon (open-ended)."""

    low: float | None
    high: float | None
    #: The cluster it starts on soonest: that of the pass whose answer is ``low`` ("" for none).
    cluster: str = ""
    #: The earliest it could start: now when admitted at once, else the first moment anything is handed back in
    #: the optimistic pass (None when nothing is within the horizon).
    earliest: float | None = field(default=None, compare=False)


def widen(span: Range, now: float, low: float, high: float, horizon_s: float, slack_s: float = 0.0) -> Range:
    """The range calibrated against what the replay leaves out (work submitted later, reclaim, early ends): its
    start drawn towards now by ``low`` (0..1) of the wait, never before ``earliest``; its end pushed out to ``high``
    (≥ 1) times the wait plus ``slack_s``, open-ended past the horizon. Both are monotone in the answer, so a job
    later in the queue still never gets a sooner range."""
    if span.low is None:
        return span
    start = span.low if span.low <= now else max(now + (span.low - now) * low, span.earliest or now)
    end = None if span.high is None else now + (span.high - now) * high + slack_s
    return replace(span, low=start, high=end if end is None or end <= now + horizon_s else None)


def starts(
    snap: Snapshot,
    end_of: Callable[[JobView], float],
    run_of: Callable[[JobView], float],
    bounds: Bounds = DEFAULT,
    where: dict[int, str] | None = None,
) -> dict[int, float]:
    """One pass: queued job id → when it is first admitted, for those admitted within the bounds.
    ``end_of(active job)``: when it ends (epoch seconds); ``run_of(queued job)``: how long it runs once started.
    ``where``, when given, gets the cluster each is admitted on."""
    return finish(stepping(snap, end_of, run_of, bounds, where))


def finish(steps: Generator[None, None, object]):
    """Run a stepping replay (``stepping``, ``ranging``) to its end; its answer."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def stepping(
    snap: Snapshot,
    end_of: Callable[[JobView], float],
    run_of: Callable[[JobView], float],
    bounds: Bounds = DEFAULT,
    where: dict[int, str] | None = None,
    times: list[float] | None = None,
) -> Generator[None, None, dict[int, float]]:
    """``starts`` as a generator that yields while building its state, within each step (``deciding``: every
    ``JOBS_PER_YIELD`` jobs it considers; the hand-backs: every ``HANDBACKS_PER_YIELD``) and after it, so a caller
    can spread one pass over several turns (jobs.cycle.estimates), none of which does more than a few tens of
    jobs' admission; it returns the answer, the same however it is driven. It works on its own copies: the
    snapshot is left as it was, and may be kept between turns. ``times``, when given, gets the time of each
    step."""
    now, classes = snap.now, snap.classes
    until = now + bounds.horizon_s
    nodes = {name: _node_copy(n) for name, n in snap.nodes.items()}
    # Shallow copies (copy.copy): a job's fields the replay changes are plain values, not shared containers.
    active = []
    for i, job in enumerate(snap.active, 1):
        active.append(copy.copy(job))
        if i % COPIES_PER_YIELD == 0:
            yield
    queued = {job.id: copy.copy(job) for job in snap.queued}
    yield
    workloads: dict[int, list[JobView]] = defaultdict(list)
    for job in (*queued.values(), *active):
        workloads[job.class_id].append(job)
    engines = Engines(nodes.values(), classes, workloads, copy=False)
    yield
    # Each class's placement engine built before the first step (decide would build it there), one a turn.
    for class_id in sorted({job.class_id for job in queued.values()} & classes.keys()):
        engines.index(class_id)
        yield
    tallies = Tallies.of(active, classes, nodes)
    ends: list[tuple[float, int, JobView]] = []
    seq = 0
    yield
    for i, job in enumerate(active, 1):
        end = now + bounds.grace_s if job.preempting else max(now, end_of(job))
        seq += 1
        ends.append((end, seq, job))
        if i % ENDS_PER_YIELD == 0:
            yield
    heapq.heapify(ends)
    yield
    gone: set[int] = set()  # active jobs already handed back (a victim's stop after its own end)
    running = {job.id: job for job in active}  # what runs now in the replay, by id (reclaim names its victims)
    found: dict[int, float] = {}
    # The planner's replay's shortcut (planner.engine_replay.Replay._asked): a job that can never run here, or that
    # waits for its team's quota (its array's cap) while nothing of the team's class (the array) was handed back
    # since, gets the same answer: it is not asked again, which changes no other job's decision.
    released: dict[tuple[int, int], int] = defaultdict(int)
    group_released: dict[int, int] = defaultdict(int)
    parked: dict[int, tuple] = {}  # job id → what must change before it is asked again
    t, steps = now, 0
    while queued and steps < bounds.max_steps:
        steps += 1
        if times is not None:
            times.append(t)
        asked = [job for job in queued.values() if not _parked(parked.get(job.id), released, group_released)]
        step = replace(snap, now=t, nodes=nodes, queued=asked, active=[])
        engines.begin_cycle()
        decisions = yield from deciding(step, engines, tallies, until_all_starve=True, every=JOBS_PER_YIELD)
        engines.end_cycle(decisions)
        for job_id, (node, borrowed) in decisions.admit.items():
            job = queued.pop(job_id)
            job.node, job.borrowed = node, borrowed
            # Served by an alternative of its class (decide rule 6): it holds, and hands back, that class's units.
            job.class_id = decisions.served_by.get(job_id, job.class_id)
            job.nodes = decisions.ranks.get(job_id, (node,))
            job.cluster = nodes[node].cluster if node in nodes else ""
            tallies.note_admitted(job)
            running[job_id] = job
            found[job_id] = t
            if where is not None:
                where[job_id] = job.cluster
            seq += 1
            heapq.heappush(ends, (t + max(bounds.step_s, run_of(job)), seq, job))
        for job_id, wait in decisions.wait.items():
            job = queued[job_id]
            if wait.reason in STATIC or (wait.reason == WaitReason.QUOTA and wait.detail.get("limit") == 0):
                parked[job_id] = ("never",)
            elif wait.reason == WaitReason.QUOTA:
                key = (job.team, job.class_id)
                parked[job_id] = ("quota", key, released[key])
            elif wait.reason == WaitReason.ARRAY and job.group is not None:
                parked[job_id] = ("array", job.group, group_released[job.group])
            else:
                parked.pop(job_id, None)
        for victim_id in decisions.preempt:
            job = running.get(victim_id)
            if job is not None and not job.preempting:
                job.preempting = True
                tallies.note_preempting(job)
                seq += 1
                heapq.heappush(ends, (t + bounds.grace_s, seq, job))
        if not ends or ends[0][0] > until:
            break
        # The next step: the first end, on a grid of ``step_s`` from now; everything ending by then goes back.
        t = max(t + bounds.step_s, now + math.ceil((ends[0][0] - now) / bounds.step_s) * bounds.step_s)
        handed = 0
        while ends and ends[0][0] <= t:
            _, _, job = heapq.heappop(ends)
            key = id(job)
            if key in gone:
                continue
            gone.add(key)
            running.pop(job.id, None)
            handed += 1
            if handed % HANDBACKS_PER_YIELD == 0:
                yield  # between two hand-backs the state is whole: a turn may end here
            engines.release(job, job.placed_on)
            tallies.remove(job, classes)
            released[(job.team, job.class_id)] += 1
            if job.group is not None:
                group_released[job.group] += 1
        if t > until:
            break
        yield
    return found


def _node_copy(node):
    twin = copy.copy(node)
    twin.free, twin.allocatable = dict(node.free), dict(node.allocatable)
    return twin


def _parked(why: tuple | None, released: dict, group_released: dict) -> bool:
    if why is None:
        return False
    if why[0] == "never":
        return True
    if why[0] == "quota":
        return released[why[1]] == why[2]
    return group_released[why[1]] == why[2]


def ranges(
    snap: Snapshot,
    optimistic: tuple[Callable[[JobView], float], Callable[[JobView], float]],
    pessimistic: tuple[Callable[[JobView], float], Callable[[JobView], float]],
    bounds: Bounds = DEFAULT,
) -> dict[int, Range]:
    """Every queued job's range from the two passes (each an (end_of, run_of) pair)."""
    return finish(ranging(snap, optimistic, pessimistic, bounds))


def ranging(
    snap: Snapshot,
    optimistic: tuple[Callable[[JobView], float], Callable[[JobView], float]],
    pessimistic: tuple[Callable[[JobView], float], Callable[[JobView], float]],
    bounds: Bounds = DEFAULT,
) -> Generator[None, None, dict[int, Range]]:
    """``ranges`` as a generator: the two passes' steps one at a time (``stepping``); it returns the ranges."""
    on_low: dict[int, str] = {}
    on_high: dict[int, str] = {}
    times: list[float] = []
    low = yield from stepping(snap, *optimistic, bounds=bounds, where=on_low, times=times)
    high = yield from stepping(snap, *pessimistic, bounds=bounds, where=on_high)
    yield
    out = {}
    first = times[1] if len(times) > 1 else None  # the first step after now
    for i, job in enumerate(snap.queued, 1):
        if i % RANGES_PER_YIELD == 0:
            yield
        a, b = low.get(job.id), high.get(job.id)
        # The cluster where it starts soonest: that of the pass that gives the range's start.
        sooner = on_high if b is not None and (a is None or b < a) else on_low
        cluster = sooner.get(job.id) or on_low.get(job.id) or on_high.get(job.id, "")
        earliest = snap.now if a == snap.now else first
        if a is None and b is None:
            out[job.id] = Range(None, None, earliest=first)
        elif a is None or b is None:
            out[job.id] = Range(a if a is not None else b, None, cluster, earliest)
        else:
            out[job.id] = Range(min(a, b), max(a, b), cluster, earliest)
    if bounds.widen_low != 1.0 or bounds.widen_high != 1.0 or bounds.widen_slack_s:
        yield
        widened = {}
        for i, (job_id, span) in enumerate(out.items(), 1):
            widened[job_id] = widen(
                span, snap.now, bounds.widen_low, bounds.widen_high, bounds.horizon_s, bounds.widen_slack_s
            )
            if i % RANGES_PER_YIELD == 0:
                yield
        out = widened
    return out
