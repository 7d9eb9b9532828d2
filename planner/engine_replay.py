"""One replay of a window's history on one cluster: a discrete-event simulation around the job cycle's own
admission code (jobs.scheduling.decide). Pure Python, no Django; planner.engine runs one per scenario.

Events, in time order: a job's arrival (its submission), a job's end (it started and ran its observed run time),
a preempted job's stop (after the portal's grace, then it is requeued as jobs.lifecycle.requeue does), and a
queued job reaching admission's patience. Admission cycles run on the cycle's grid (every ``cycle_s`` from the
window's start) when something changed since the last one: everything that happens within one interval shares
the cycle at its end, like the coalesced kicks of the real cycle. Each cycle hands ``decide`` a Snapshot of the
replayed state, exactly as jobs.cycle.admit builds one from the database, and applies its decisions: admitted
jobs start (all ranks of a gang together), preempted jobs get their grace, waiting jobs keep decide's reason.

The fast path (see ``Replay``): the placement engines (jobs.scheduling.engines.Engines) live for the whole replay
instead of being rebuilt every cycle, departures are handed back to them (``release``), and a cycle only asks
about the classes something happened to since the last one (``dirty``): a queued job of a class where nothing
was freed, nothing arrived and nobody reached patience gets the same answer as last time.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from jobs.scheduling.decide import decide
from jobs.scheduling.engines import Engines
from jobs.scheduling.snapshot import JobView, Snapshot, Wait
from jobs.scheduling.tallies import Tallies
from vocab.waits import WaitReason

from . import model

ARRIVE, END, STOP, PATIENCE = 1, 0, 0, 2
#: Wait reasons the replay's unchanging cluster keeps for good.
STATIC = (
    WaitReason.NEVER_FITS,
    WaitReason.CLASS_GONE,
    WaitReason.CUDA,
)  # events at one instant: ends and stops free capacity before arrivals


@dataclass
class JobRecord:
    """What happened to one job in the replay."""

    job: model.PastJob
    view: JobView
    #: Seconds of work left (a job running at the window's start has run part of it already).
    work_s: float
    state: str = "future"  # future | queued | active | done
    first_start: float | None = None
    #: (start, end, nodes) of each run; the end is None while running.
    runs: list[list] = field(default_factory=list)
    #: (since, until) of each wait in the queue; until None while queued.
    waits: list[list] = field(default_factory=list)
    wait: Wait | None = None
    attempt: int = 0
    preemptions: int = 0
    #: The team's count of releases of the class when the job was last answered (see ``Replay._asked``).
    released: int = 0


@dataclass
class Settings:
    cycle_s: float = 10.0
    grace_s: float = 60.0
    half_life_s: float = 3600.0
    preemption: bool = True
    borrowing: bool = True
    #: Ask the queued jobs of every class in every cycle, not only of the classes something happened to (slower;
    #: bench/planner.py --every-class measures what the shortcut changes).
    every_class: bool = False


class Replay:
    def __init__(
        self,
        cluster: model.Cluster,
        history: model.History,
        settings: Settings,
        tick: Callable[[float], None] | None = None,
        reference: bool = False,
    ) -> None:
        #: The slow path, for checking the fast one: every queued job asked every cycle, the tallies counted
        #: afresh from the active jobs each time (the engines are kept either way).
        self.reference = reference
        self.cluster = cluster
        self.start, self.end = history.start, history.end
        self.settings = settings
        self.tick = tick
        self.classes = dict(cluster.classes)
        self.quotas = replay_quotas(cluster.quotas, settings)
        # Every node starts with none of the portal's work (planner.history.current_cluster's views: what runs
        # outside the portal stays subtracted); the history's work, what ran at the start included, is replayed.
        self.nodes = {
            name: replace(
                n,
                free=dict(n.free),
                allocatable=dict(n.allocatable),
                cpu_capacity_m=n.cpu_capacity_m or n.cpu_free_m,
                memory_capacity_mb=n.memory_capacity_mb or n.memory_free_mb,
            )
            for name, n in cluster.nodes.items()
        }
        self.records: dict[int, JobRecord] = {}
        self.events: list[tuple] = []
        self._seq = 0
        # A job's preferred clusters, less those this replay does not hold (one cluster of the fleet replayed: the
        # work that ran on it may run on it; a cluster since removed): admission tries the rest in order.
        held = set(cluster.clusters)
        for job in history.jobs:
            if job.submitted >= self.end:
                continue
            work = job.run_s
            if job.started is not None and job.started < self.start:
                work = max(0.0, job.run_s - (self.start - job.started))
                if work <= 0:
                    continue  # it ended before the window began
            view = JobView(
                id=job.id, team=job.team, class_id=job.class_id, count=job.count, cpu_m=job.cpu_m,
                memory_mb=job.memory_mb, priority=job.priority, preemptible=job.preemptible,
                submitted=job.submitted, max_runtime_s=job.max_runtime_s, cuda=tuple(job.cuda), group=job.group,
                architecture=job.architecture, workers=job.workers, topology_key=job.topology_key,
                topology_mode=job.topology_mode, pool=job.pool,
                clusters=tuple(c for c in job.clusters if c in held) if held else tuple(job.clusters),
            )  # fmt: skip
            self.records[job.id] = JobRecord(job, view, work)
            self._push(max(job.submitted, self.start), ARRIVE, job.id, 0)
        #: class → its queued jobs (id → record)
        self.queued: dict[int, dict[int, JobRecord]] = defaultdict(dict)
        #: (team, class) → how many times the team's use of the class went down (a quota wait may end); group →
        #: how many times one of its jobs ended (an array's wait may end), and the classes its jobs queue for
        self.released: dict[tuple[int, int], int] = defaultdict(int)
        self.group_released: dict[int, int] = defaultdict(int)
        self.group_classes: dict[int, set[int]] = defaultdict(set)
        self.group_caps = dict(history.group_caps)
        self.active: dict[int, JobRecord] = {}
        #: Classes something happened to since the last cycle (their queued jobs are asked about again).
        self.dirty: set[int] = set()
        self.cycle_at: float | None = None
        self.cycles = 0
        # The decayed average of normalised GPUs held that the fair share adds (jobs.cycle.admit).
        self.average: dict[int, float] = defaultdict(float)
        self.average_at: dict[int, float] = defaultdict(lambda: self.start)
        #: class → free units on schedulable nodes, and the stranded-capacity integral (see ``_strand``)
        self.free_units: dict[int, float] = {}
        self.capacity_units: dict[int, float] = {}
        #: cluster → its normalised GPUs (the capacity of the classes on its schedulable nodes)
        self.capacity_clusters: dict[str, float] = defaultdict(float)
        for cls in self.classes.values():
            units = 0
            for n in self.nodes.values():
                if n.schedulable and n.product_label == cls.product_label:
                    free = max(0, n.free.get(cls.resource_name, 0))
                    units += free
                    self.capacity_clusters[n.cluster or cluster.home] += free * cls.gpu_fraction
            self.capacity_units[cls.id] = self.free_units[cls.id] = float(units)
        #: class → team → jobs waiting for capacity after the last cycle that asked about the class
        self.short: dict[int, dict[int, int]] = defaultdict(dict)
        self.stranded: dict[tuple[int, int], float] = defaultdict(float)
        self.stranded_class: dict[int, float] = defaultdict(float)
        self._strand_at: dict[int, float] = {}
        self.engines = Engines(self.nodes.values(), self.classes, workloads=self._workloads(), copy=False)
        self.tallies = Tallies()
        #: node → the classes it offers (what a departure from it may let start)
        self.classes_on: dict[str, list[int]] = defaultdict(list)
        for cls in self.classes.values():
            for node in self.nodes.values():
                if node.product_label == cls.product_label and node.allocatable.get(cls.resource_name, 0) > 0:
                    self.classes_on[node.name].append(cls.id)

    # -- events ---------------------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, job_id: int, attempt: int) -> None:
        self._seq += 1
        heapq.heappush(self.events, (t, kind, self._seq, job_id, attempt))

    def _want_cycle(self, t: float) -> None:
        """A cycle at the end of the cycle interval ``t`` falls in (at ``t`` itself when it is on the grid)."""
        step = self.settings.cycle_s
        at = self.start + math.ceil((t - self.start) / step - 1e-9) * step
        if self.cycle_at is None or at < self.cycle_at:
            self.cycle_at = at

    def run(self) -> None:
        events = self.events
        while True:
            next_event = events[0][0] if events else math.inf
            cycle = self.cycle_at if self.cycle_at is not None else math.inf
            if next_event <= cycle and next_event < self.end:
                t, kind, _, job_id, attempt = heapq.heappop(events)
                self._event(t, kind, self.records[job_id], attempt)
            elif cycle < self.end:
                self.cycle_at = None
                if self.dirty:
                    self._cycle(cycle)
                self.dirty.clear()
            else:
                break
        self._finish()

    def _event(self, t: float, kind: int, rec: JobRecord, attempt: int) -> None:
        if kind == ARRIVE:
            self._enqueue(rec, t)
            self._push(rec.view.submitted + self.cluster.patience, PATIENCE, rec.view.id, rec.attempt)
        elif kind == PATIENCE:
            if rec.state == "queued" and rec.attempt == attempt and t >= self.start:
                self.dirty.add(rec.view.class_id)
                self._want_cycle(t)
        elif rec.state == "active" and rec.attempt == attempt:
            self._release(rec, t)
            if rec.view.preempting:  # a stop after the grace: requeued for a new attempt, from the start
                rec.view.preempting = False
                rec.attempt += 1
                rec.preemptions += 1
                self._enqueue(rec, t)
            else:
                rec.state = "done"
        if self.tick is not None:
            self.tick(t)

    def _enqueue(self, rec: JobRecord, t: float) -> None:
        rec.state = "queued"
        rec.waits.append([t, None])
        rec.wait = None
        self.queued[rec.view.class_id][rec.view.id] = rec
        self.dirty.add(rec.view.class_id)
        if rec.view.group is not None:
            self.group_classes[rec.view.group].add(rec.view.class_id)
        self._want_cycle(t)

    def _release(self, rec: JobRecord, t: float) -> None:
        view = rec.view
        del self.active[view.id]
        rec.runs[-1][1] = t
        cls = self.classes.get(view.class_id)
        nodes = view.placed_on
        self.engines.release(view, nodes)
        self._fold(view.team, t)
        self.tallies.remove(view, self.classes)
        if cls is not None:
            self._strand(cls.id, t)
            self.free_units[cls.id] += view.total
        self.released[(view.team, view.class_id)] += 1
        if view.group is not None:
            self.group_released[view.group] += 1
            for cid in self.group_classes.get(view.group, ()):
                if self.queued.get(cid):
                    self.dirty.add(cid)
        # What was freed may let queued work of any class of those nodes start (units, CPU, memory).
        waiting = self.queued
        for name in nodes:
            for other in self.classes_on.get(name, ()):
                if waiting.get(other):
                    self.dirty.add(other)
        if self.dirty:
            self._want_cycle(t)
        view.node, view.nodes, view.borrowed = "", (), False

    # -- the fair share ---------------------------------------------------------------------------------------
    def _fold(self, team: int, t: float) -> None:
        """The team's decayed average of GPUs held, brought up to ``t`` (held was constant since the last fold)."""
        age = t - self.average_at[team]
        if age > 0:
            keep = 0.5 ** (age / self.settings.half_life_s)
            self.average[team] = self.average[team] * keep + self.tallies.held.get(team, 0.0) * (1 - keep)
            self.average_at[team] = t

    # -- stranded capacity --------------------------------------------------------------------------------------
    def _strand(self, class_id: int, t: float) -> None:
        """Add the free units of the class since the last change, for the time work of it waited for capacity."""
        since = self._strand_at.get(class_id, self.start)
        short = self.short.get(class_id)
        if t > since and short:
            free = self.free_units[class_id] * (t - since)
            self.stranded_class[class_id] += free
            for team in short:
                self.stranded[(team, class_id)] += free
        self._strand_at[class_id] = t

    # -- the cycle ----------------------------------------------------------------------------------------------
    def _workloads(self) -> dict[int, list[JobView]]:
        """The job sizes each class's placement measures fragmentation against: the window's own demand for it
        (the cycle measures against what is queued and running at that moment; the window's mix is its average
        and keeps the engine's memo valid for the whole replay)."""
        out: dict[int, list[JobView]] = defaultdict(list)
        for rec in self.records.values():
            out[rec.view.class_id].append(rec.view)
        return out

    def _asked(self) -> list[JobRecord]:
        """The queued jobs of the classes something happened to, less those whose answer cannot have changed:
        work that can never run here (no node of its class could ever hold it, its CUDA, no quota at all: the
        replay's cluster does not change), and work over its team's quota while the team's use of the class has
        not gone down, or over its array's cap while none of the array's jobs ended (admission stops at these
        before anything else, so leaving them out changes no other job's decision, only the queue positions its
        messages quote)."""
        asked = []
        released = self.released
        if self.reference:
            return [rec for queue in self.queued.values() for rec in queue.values()]
        for cid in self.queued if self.settings.every_class else self.dirty:
            for rec in self.queued.get(cid, {}).values():
                wait = rec.wait
                if wait is not None:
                    if wait.reason in STATIC or (wait.reason == WaitReason.QUOTA and wait.detail.get("limit") == 0):
                        continue
                    if wait.reason == WaitReason.QUOTA and rec.released == released[(rec.view.team, cid)]:
                        continue
                    if wait.reason == WaitReason.ARRAY and rec.released == self.group_released[rec.view.group]:
                        continue
                asked.append(rec)
        return asked

    def _cycle(self, now: float) -> None:
        self.cycles += 1
        asked = self._asked()
        if not asked:
            return
        for team in {rec.view.team for rec in asked}:  # the teams whose shares order this cycle
            self._fold(team, now)
        snap = Snapshot(
            now=now,
            nodes=self.nodes,
            classes=self.classes,
            quotas=self.quotas,
            queued=[rec.view for rec in asked],
            active=[],
            recent_average=dict(self.average),
            team_names=self.cluster.team_names,
            patience=self.cluster.patience,
            group_caps=self.group_caps,
        )
        self.engines.begin_cycle()
        if self.reference:
            tallies = Tallies.of([rec.view for rec in self.active.values()], self.classes)
            decisions = decide(snap, engines=self.engines, tallies=tallies)
        else:
            decisions = decide(snap, engines=self.engines, tallies=self.tallies, until_all_starve=True)
        self.engines.end_cycle(decisions)
        touched = {rec.view.class_id for rec in asked}
        for cid in touched:
            self._strand(cid, now)
        for job_id, (node, borrowed) in decisions.admit.items():
            rec = self.records[job_id]
            view = rec.view
            del self.queued[view.class_id][job_id]
            view.node, view.borrowed = node, borrowed
            view.nodes = decisions.ranks.get(job_id, (node,))
            rec.state = "active"
            rec.waits[-1][1] = now
            rec.runs.append([now, None, view.nodes])
            if rec.first_start is None:
                rec.first_start = now
            rec.wait = None
            self.active[job_id] = rec
            # decide has taken its units in the engines and counted it in the tallies, all but what reclaiming
            # needs to know of borrowed work.
            if self.reference:
                self.tallies.add(view, self.classes)  # decide counted it in the fresh tallies only
            self.tallies.note_admitted(view)
            self.free_units[view.class_id] -= view.total
            self._push(now + rec.work_s, END, job_id, rec.attempt)
        if self.settings.preemption:
            for victim in decisions.preempt:
                rec = self.active[victim]
                if not rec.view.preempting:
                    rec.view.preempting = True
                    self.tallies.note_preempting(rec.view)
                    self._push(now + self.settings.grace_s, STOP, victim, rec.attempt)
        released = self.released
        for job_id, wait in decisions.wait.items():
            rec = self.records[job_id]
            rec.wait = wait
            if wait.reason == WaitReason.ARRAY:
                rec.released = self.group_released[rec.view.group]
            else:
                rec.released = released[(rec.view.team, rec.view.class_id)]
        # Who waits for capacity now: the answers of this cycle, and for the jobs decide did not reach (all behind
        # a starving job, so waiting for capacity too) their last one.
        for cid in touched:
            self.short.pop(cid, None)
        for rec in asked:
            if rec.state == "queued" and (rec.wait is None or rec.wait.reason == WaitReason.CAPACITY):
                short = self.short[rec.view.class_id]
                short[rec.view.team] = short.get(rec.view.team, 0) + 1

    def _finish(self) -> None:
        end = self.end
        for cid in self.classes:
            self._strand(cid, end)
        for queue in self.queued.values():
            for rec in queue.values():
                rec.waits[-1][1] = end
        for rec in self.active.values():
            rec.runs[-1][1] = end


def replay_quotas(quotas: dict, settings: Settings) -> dict:
    """Quotas as the replay uses them: without borrowing no team goes above its guarantee; monthly GPU-hour
    budgets are left out (the replay does not follow what each team has spent)."""
    out = {}
    for key, q in quotas.items():
        q = replace(q, budget_hours=None, used_hours=0.0)
        out[key] = q if settings.borrowing else replace(q, limit=q.guaranteed)
    return out
