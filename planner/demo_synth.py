"""A month of plausible GPU work for the demo, synthesised over a cluster and its quotas (pure Python, no Django).

What arrives: for every team quota on a class some node offers, work arrives at a rate that keeps about ``BUSY``
of the team's guarantee busy on average (less where a monthly GPU-hour budget asks for less), following a
working day (a peak at 14:00 UTC, quiet nights) and a working week (weekends at a third). Most of it is batch
jobs of a mix of sizes (1 to 8 GPUs on whole-GPU classes, 1 or 2 units on slices and shared GPUs) and runtimes
(minutes to most of a day); some are job arrays (a sweep of small preemptible tasks with a parallelism cap),
distributed gangs (2 or 4 workers on distinct nodes, on classes with several nodes) and notebook sessions
(office hours, on the team's smallest slice, one session at a time per notebook). Some fail, a few run into
their maximum runtime, a few are cancelled while they run.

When it runs is decided by this module's own simple rule, not by the portal's admission code (the planner's
fidelity check compares its replay with this): work is taken in submission order, and each piece starts at the
first cycle (every ``SLOT_S`` seconds) from which, for its whole run, its team stays within its quota (the
guarantee for work that is not preemptible, the limit for preemptible work), its array within its parallelism,
and enough nodes of its class (one; a gang: one per worker) have the units free, never exceeding what a node
advertises. Nothing ends after
the window's end, and a team's use of a budgeted class stays under its monthly budget (``BUDGET_SHARE`` of it in
the month of the window's end, so the live demo has room). Waits come out of the rule: a team's afternoon peak
above its guarantee queues.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime

from . import model

#: The grid the rule works on (seconds, the job cycle's interval): a job holds its units from the start of its
#: first step until the end of its last; it is admitted within ``ADMIT_S`` of that start and its pod starts within
#: ``POD_START_S`` after.
SLOT_S = 10
ADMIT_S, POD_START_S = (0.5, 2.0), (2.0, 6.0)
#: Share of a team's guarantee its work keeps busy on average.
BUSY = 0.3
#: Most of a monthly budget the history may use: in the month of the window's end, and in earlier months.
BUDGET_SHARE, BUDGET_SHARE_PAST = 0.6, 0.9
#: Whole-GPU sizes and their weights; slices and shared GPUs.
WHOLE_SIZES = ((1, 0.4), (2, 0.25), (4, 0.2), (8, 0.15))
SLICE_SIZES = ((1, 0.8), (2, 0.2))
#: Per kind of arrival: the chance that an arrival is a gang (where gangs fit), an array, a notebook session
#: (during office hours, where the team has a notebook class).
GANG_CHANCE, ARRAY_CHANCE, NOTEBOOK_CHANCE = 0.06, 0.04, 0.3
#: Most CPU (millicores) and memory (MiB) a job asks per unit, before the node's own share per unit caps it.
CPU_PER_UNIT, MEMORY_PER_UNIT = 8000, 65536
#: 0/1 translation tables: ``OVER[room]`` marks the steps where more than ``room`` units are in use.
OVER = [bytes(1 if v > room else 0 for v in range(256)) for room in range(256)]
ADD = [bytes(min(v + n, 255) for v in range(256)) for n in range(256)]


@dataclass
class Profile:
    """What one team runs on one class."""

    team: int
    cls: model.ClassView
    nodes: list[str]
    capacity: dict[str, int]
    guaranteed: int
    limit: int
    budget: float | None
    sizes: tuple[tuple[int, float], ...]
    gangs: bool
    cpu_m: int
    memory_mb: int
    #: Arrivals per hour, averaged over the week.
    rate: float = 0.0


@dataclass
class Planned:
    """One piece of work the history holds: what it asked for and what happened to it, times in epoch seconds."""

    team: int
    class_id: int
    kind: str
    count: int
    submitted: float
    admitted: float
    started: float
    finished: float
    run_s: float
    max_runtime_s: int
    preemptible: bool
    priority: int
    cpu_m: int
    memory_mb: int
    nodes: list[str]
    borrowed: bool
    #: "succeeded", "failed", "deadline", "cancelled", or a notebook's stop reason ("idle", "user", "ttl").
    outcome: str
    workers: int = 1
    #: Why it waited, when it waited more than a cycle: "quota", "array", "capacity" (with the team's use then).
    waited: str = ""
    in_use: int = 0
    #: (array number, index) for an array's task.
    array: tuple[int, int] | None = None
    #: Its place in ``Month.jobs``.
    seq: int = 0


@dataclass
class Month:
    """The synthesised month: the work, and each array's (team, class, size, parallelism, submitted)."""

    jobs: list[Planned]
    arrays: dict[int, tuple[int, int, int, int | None, float]] = field(default_factory=dict)


def rhythm(t: float) -> float:
    """How busy the hour at ``t`` is, relative: a working day peaking at 14:00 UTC, weekends at a third."""
    when = datetime.fromtimestamp(t, UTC)
    hour = when.hour + when.minute / 60
    day = 0.35 + 1.2 * math.exp(-(((hour - 14) / 4.5) ** 2))
    return day * (0.35 if when.weekday() >= 5 else 1.0)


#: The week's mean of ``rhythm`` (so a profile's rate is its weekly average).
RHYTHM_MEAN = sum(rhythm(h * 3600 + 4 * 86400) for h in range(168)) / 168  # 1970-01-05 was a Monday


def runtime(rng: random.Random) -> float:
    """Seconds a batch job runs: a quarter are short (5-30 min), most around 1.5 h, some long (4-12 h)."""
    r = rng.random()
    if r < 0.25:
        return rng.uniform(300, 1800)
    if r < 0.85:
        return min(8 * 3600, rng.lognormvariate(math.log(5400), 0.6))
    return rng.uniform(4 * 3600, 12 * 3600)


MEAN_RUNTIME_H = (0.25 * 1050 + 0.6 * 5400 * math.exp(0.18) + 0.15 * 28800) / 3600


def profiles(cluster: model.Cluster) -> list[Profile]:
    """One profile per quota with a limit on a class that schedulable nodes offer the team."""
    out = []
    for (team, class_id), quota in sorted(cluster.quotas.items()):
        cls = cluster.classes.get(class_id)
        if cls is None or quota.limit <= 0:
            continue
        nodes = sorted(
            n.name
            for n in cluster.nodes.values()
            if n.schedulable
            and not n.pool
            and n.product_label == cls.product_label
            and n.allocatable.get(cls.resource_name, 0) > 0
            and n.team in (None, team)
        )
        if not nodes:
            continue
        capacity = {name: min(cluster.nodes[name].allocatable[cls.resource_name], 255) for name in nodes}
        widest = min(max(capacity.values()), quota.limit)
        whole = cls.gpu_fraction >= 1.0 and widest >= 4
        # A size only where the team's guarantee holds two such jobs (8 GPUs for a guarantee of 16).
        top = min(widest, max(1, quota.guaranteed // 2))
        sizes = tuple((units, w) for units, w in (WHOLE_SIZES if whole else SLICE_SIZES) if units <= top)
        # A job never asks more CPU or memory per unit than its node has per unit of all it advertises.
        per_unit_cpu, per_unit_memory = CPU_PER_UNIT, MEMORY_PER_UNIT
        for name in nodes:
            node = cluster.nodes[name]
            units = max(1, sum(node.allocatable.values()))
            per_unit_cpu = min(per_unit_cpu, node.cpu_capacity_m // units)
            per_unit_memory = min(per_unit_memory, node.memory_capacity_mb // units)
        profile = Profile(
            team=team, cls=cls, nodes=nodes, capacity=capacity, guaranteed=quota.guaranteed, limit=quota.limit,
            budget=quota.budget_hours, sizes=sizes, gangs=whole and len(nodes) >= 2 and quota.guaranteed >= 4,
            cpu_m=max(100, per_unit_cpu // 500 * 500), memory_mb=max(256, per_unit_memory // 1024 * 1024),
        )  # fmt: skip
        busy = BUSY * quota.guaranteed if quota.guaranteed else 0.2 * quota.limit
        if quota.budget_hours is not None:
            busy = min(busy, 0.7 * BUDGET_SHARE * quota.budget_hours / (30 * 24) / cls.gpu_fraction)
        mean_size = sum(u * w for u, w in sizes) / sum(w for _, w in sizes)
        profile.rate = busy / (mean_size * MEAN_RUNTIME_H)
        out.append(profile)
    return out


def notebook_classes(found: list[Profile]) -> dict[int, int]:
    """Team → the class its notebook runs on: its smallest slice or shared GPU (teams with none have none)."""
    out: dict[int, tuple[float, int]] = {}
    for p in found:
        if p.cls.gpu_fraction < 1.0 and (p.team not in out or (p.cls.gpu_fraction, p.cls.id) < out[p.team]):
            out[p.team] = (p.cls.gpu_fraction, p.cls.id)
    return {team: class_id for team, (_, class_id) in out.items()}


def poisson(rng: random.Random, mean: float) -> int:
    limit, k, p = math.exp(-mean), 0, rng.random()
    while p > limit:
        k += 1
        p *= rng.random()
    return k


class Grid:
    """Units in use per step (``SLOT_S``) of the window, per node, per (team, class) and per array; the rule's
    search."""

    def __init__(self, start: float, end: float) -> None:
        self.start = start
        self.slots = int((end - start) // SLOT_S)
        self.lines: dict[object, bytearray] = {}

    def line(self, key) -> bytearray:
        found = self.lines.get(key)
        if found is None:
            found = self.lines[key] = bytearray(self.slots)
        return found

    def conflict(self, key, s: int, d: int, room: int) -> int | None:
        """The last step of [s, s + d) where more than ``room`` units are in use, or None."""
        if room < 0:
            return s + d - 1
        i = self.line(key)[s : s + d].translate(OVER[min(room, 255)]).rfind(1)
        return None if i < 0 else s + i

    def add(self, key, s: int, d: int, units: int) -> None:
        line = self.line(key)
        line[s : s + d] = line[s : s + d].translate(ADD[units])

    def earliest(self, s: int, d: int, limits: list, nodes: list[str], room: dict, workers: int):
        """The first step from ``s`` at which every (key, room, why) of ``limits`` has room for ``d`` minutes and
        ``workers`` distinct nodes have ``room[node]``; returns (minute, nodes, why it waited) or None."""
        why = ""
        while s + d <= self.slots:
            jump = None
            for key, space, reason in limits:
                c = self.conflict(key, s, d, space)
                if c is not None:
                    why = why or reason
                    jump = c + 1 if jump is None else max(jump, c + 1)
            if jump is None:
                free, later = [], []
                for name in nodes:
                    c = self.conflict(name, s, d, room[name])
                    if c is None:
                        free.append(name)
                        if len(free) == workers:
                            return s, free, why
                    else:
                        later.append(c + 1)
                why = why or "capacity"
                jump = min(later) if later else self.slots
            s = jump
        return None


def months_of(start: float, end: float) -> dict[tuple[int, int], float]:
    """Seconds of [start, end) in each UTC calendar month."""
    out: dict[tuple[int, int], float] = {}
    t = start
    while t < end:
        when = datetime.fromtimestamp(t, UTC)
        nxt = datetime(when.year + (when.month == 12), when.month % 12 + 1, 1, tzinfo=UTC).timestamp()
        out[(when.year, when.month)] = out.get((when.year, when.month), 0.0) + min(end, nxt) - t
        t = nxt
    return out


def synthesise(
    cluster: model.Cluster, start: float, end: float, seed: int, notebooks: dict[int, tuple[int, int]]
) -> Month:
    """The window [start, end)'s work over ``cluster`` (see the module's docstring). ``notebooks``: team → its
    notebooks' (maximum age, maximum runtime of a session) in seconds; teams left out get no notebook sessions."""
    rng = random.Random(seed)
    found = profiles(cluster)
    notebook_of = {team: cls for team, cls in notebook_classes(found).items() if team in notebooks}
    arrivals: list[tuple[float, int]] = []
    hours = int((end - start) // 3600)
    for index, profile in enumerate(found):
        for hour in range(hours):
            t0 = start + hour * 3600
            for _ in range(poisson(rng, profile.rate * rhythm(t0 + 1800) / RHYTHM_MEAN)):
                arrivals.append((t0 + rng.random() * 3600, index))
    arrivals.sort()
    grid = Grid(start, end)
    month = Month(jobs=[])
    budget_used: dict[tuple[int, int, tuple[int, int]], float] = {}
    last_month = datetime.fromtimestamp(end, UTC).timetuple()[:2]
    notebook_busy: dict[int, float] = {}

    def place(profile: Profile, job: Planned, group: int | None = None, cap: int | None = None) -> bool:
        """Start ``job`` by the rule, or leave it out (it would end after the window or break a budget)."""
        s0 = math.ceil((job.submitted + 1 - start) / SLOT_S)
        d = math.ceil((job.run_s + ADMIT_S[1] + POD_START_S[1]) / SLOT_S)
        total = job.count * job.workers
        team_key = (profile.team, profile.cls.id)
        ceiling = profile.limit if job.preemptible else profile.guaranteed
        limits = [(team_key, ceiling - total, "quota")]
        if group is not None and cap is not None:
            limits.append((("array", group), cap - 1, "array"))
        room = {name: cap_ - job.count for name, cap_ in profile.capacity.items()}
        got = grid.earliest(s0, d, limits, profile.nodes, room, job.workers)
        if got is None:
            return False
        s, nodes, why = got
        slot = start + s * SLOT_S
        admitted = slot + rng.uniform(*ADMIT_S)
        started = admitted + rng.uniform(*POD_START_S)
        if profile.budget is not None:
            spent = months_of(admitted, started + job.run_s)
            for key, seconds in spent.items():
                share = BUDGET_SHARE if key == last_month else BUDGET_SHARE_PAST
                used = budget_used.get((*team_key, key), 0.0) + seconds * total * profile.cls.gpu_fraction / 3600
                if used > share * profile.budget:
                    return False
            for key, seconds in spent.items():
                budget_key = (*team_key, key)
                budget_used[budget_key] = budget_used.get(budget_key, 0.0) + (
                    seconds * total * profile.cls.gpu_fraction / 3600
                )
        in_use, at_start = grid.line(team_key)[min(s0, grid.slots - 1)], grid.line(team_key)[s]
        grid.add(team_key, s, d, total)
        if group is not None and cap is not None:
            grid.add(("array", group), s, d, 1)
        for name in nodes:
            grid.add(name, s, d, job.count)
        job.admitted, job.started, job.finished = admitted, started, started + job.run_s
        job.nodes, job.in_use = nodes, in_use
        job.borrowed = at_start + total > profile.guaranteed
        job.waited = why if admitted - job.submitted > 2 * SLOT_S else ""
        job.seq = len(month.jobs)
        month.jobs.append(job)
        return True

    def outcome(run: float) -> tuple[str, float, int]:
        """(outcome, seconds it ran, maximum runtime)."""
        r = rng.random()
        limit = int(math.ceil(run * rng.uniform(1.3, 3.0) / 1800) * 1800)
        if r < 0.86:
            return "succeeded", run, limit
        if r < 0.93:
            return "failed", run * rng.uniform(0.05, 0.9), limit
        if r < 0.95:
            limit = max(600, int(math.ceil(run / 600) * 600))
            return "deadline", float(limit), limit
        return "cancelled", run * rng.uniform(0.1, 0.8), limit

    def job_of(profile: Profile, t: float, kind: str, count: int, run: float, result: str, limit: int, **extra):
        preemptible = extra.pop("preemptible", False)
        priority = extra.pop("priority", 50)
        workers = extra.pop("workers", 1)
        return Planned(
            team=profile.team, class_id=profile.cls.id, kind=kind, count=count, submitted=t, admitted=0.0,
            started=0.0, finished=0.0, run_s=run, max_runtime_s=limit, preemptible=preemptible, priority=priority,
            cpu_m=profile.cpu_m * count, memory_mb=profile.memory_mb * count, nodes=[], borrowed=False,
            outcome=result, workers=workers, **extra,
        )  # fmt: skip

    for t, index in arrivals:
        if t > end - 3600:
            continue
        profile = found[index]
        when = datetime.fromtimestamp(t, UTC)
        office = when.weekday() < 5 and 8 <= when.hour < 19
        r = rng.random()
        ttl, session_limit = notebooks.get(profile.team, (0, 0))
        if notebook_of.get(profile.team) == profile.cls.id and office and r < NOTEBOOK_CHANCE:
            if notebook_busy.get(profile.team, 0.0) > t:
                continue  # the team's notebook has a session already: this arrival is not work
            stop = rng.random()
            if stop < 0.15:
                result, run = "ttl", float(ttl) + rng.uniform(5, 60)
            else:
                result, run = ("idle" if stop < 0.6 else "user"), min(rng.uniform(1800, 5 * 3600), float(ttl))
            job = job_of(profile, t, "notebook", 1, run, result, session_limit)
            if place(profile, job):
                notebook_busy[profile.team] = job.finished
            continue
        if profile.gangs and NOTEBOOK_CHANCE <= r < NOTEBOOK_CHANCE + GANG_CHANCE:
            workers = 2 if rng.random() < 0.7 else 4
            counts = [c for c in (2, 4, 8) if c * workers <= profile.guaranteed and c <= min(profile.capacity.values())]
            if len(profile.nodes) >= workers and counts:
                count = rng.choice(counts)
                result, run, limit = outcome(rng.uniform(2 * 3600, 10 * 3600))
                place(profile, job_of(profile, t, "distributed", count, run, result, limit, workers=workers))
                continue
        if rng.random() < ARRAY_CHANCE:
            number = len(month.arrays)
            size, cap = rng.randint(4, 12), rng.choice((2, 3, 4, None))
            median = rng.uniform(600, 3600)
            kept = 0
            for _ in range(size):
                result, run, limit = outcome(median * math.exp(rng.gauss(0, 0.25)))
                task = job_of(profile, t, "batch", 1, run, result, limit, preemptible=True, array=(number, kept))
                kept += place(profile, task, number, cap or profile.limit)
            if kept:
                month.arrays[number] = (profile.team, profile.cls.id, kept, cap, t)
            continue
        units = rng.choices([u for u, _ in profile.sizes], [w for _, w in profile.sizes])[0]
        preemptible = units > profile.guaranteed or rng.random() < 0.3
        priority = rng.choices((50, 100, 0), (0.8, 0.1, 0.1))[0]
        result, run, limit = outcome(runtime(rng))
        place(profile, job_of(profile, t, "batch", units, run, result, limit, preemptible=preemptible,
                              priority=priority))  # fmt: skip
    return month
