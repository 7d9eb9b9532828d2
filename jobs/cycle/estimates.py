"""Start-time estimates, refreshed by the job cycle (jobs.cycle.run, after its launches): the queue as admission saw
it replayed forward (jobs.scheduling.estimate) with run lengths learned from the work finished in the last
``PORTAL_ESTIMATE_LEARN_DAYS`` days (jobs.scheduling.runtimes), written to the queued jobs' ``estimated_start_low``/
``estimated_start_high``/``estimated_at``/``estimated_cluster``.

Bounded cost: a whole replay at scale costs several cycles (docs/benchmarks.md section 9), so each cycle gives it a
*turn*: ``SHARE`` of the CPU the cycle itself took (never under ``MIN_BUDGET_S``), then it finishes the piece it is
in (a page, a chunk, or a few jobs of one simulated admission cycle: jobs.scheduling.estimate yields within a
cycle, every ``JOBS_PER_YIELD`` jobs), and the process keeps where it got to (``Refresher``, one a process) for the
next cycle to go on from. A replay begins on the snapshot of the cycle that begins it, the one admission decided on,
so no turn builds one; at most once every ``PORTAL_ESTIMATE_EVERY`` seconds (``due``), and only when none is in
progress. A replay's phases, each a turn or several: learning (the finished work since the last replay, one query;
the whole window again once a day, in pages), the work of jobs not seen before (image and command, in chunks), the
two passes piece by piece, and the writes (one UPDATE per distinct answer, in chunks). What carries over between
replays: the learned run lengths, each job's work and start, each running job's predicted end (until it passes).
A replay's answers are written when it ends — they are its snapshot's, so an estimate is as old as the cycles its
replay took (``calls``); an answer already past when it is written says "now", and a replay that ends after a
later-begun one (another process's) wrote its answers writes nothing. A replay that would begin on the queue, the
running work and the nodes as the last finished replay saw them, less than a step of the estimate's grid ago, does
not.

Which process begins a replay is decided by an atomic ``cache.add`` of a key that lives about
``PORTAL_ESTIMATE_EVERY`` seconds, so a fleet of workers begins one an interval; each worker process advances its
own replay in the cycles it runs.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Generator
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone

from core.gcpause import paused_gc
from jobs.choices import JobState
from jobs.cycle.admit import FleetKeys, build_snapshot
from jobs.models import Job
from jobs.scheduling import estimate
from jobs.scheduling.runtimes import Runtimes, Work
from jobs.scheduling.snapshot import JobView, Snapshot

log = logging.getLogger(__name__)

DUE_KEY = "jobs:estimates:refreshed"
#: The time of the snapshot whose replay wrote last: an older replay (another process's) that ends later writes nothing.
WRITTEN_KEY = "jobs:estimates:written"
#: The estimate's grid: the horizon in this many steps (5 minutes of 6 hours), never finer than the cycle.
STEPS_PER_HORIZON = 72
#: Most ids one UPDATE or one read of jobs' work names.
WRITE_CHUNK = 1000
#: Most finished jobs read to learn from (the newest), and how many a page.
LEARN_ROWS = 50_000
LEARN_PAGE = 1000
#: The whole learning window is read again this often (between, only what finished since the last read).
RELEARN_S = 86_400.0
#: The range's calibration (jobs.scheduling.estimate.widen): its start drawn towards now by this share of the wait,
#: its end pushed out to this many times the wait plus these seconds. Chosen on the first half of
#: bench/estimates.py's two months and checked on the second (docs/benchmarks.md section 9).
WIDEN = (0.5, 2.0, 0.0)
#: CPU seconds of work a turn does, when its caller says no other budget, before it stops at the end of the piece
#: it is in.
BUDGET_S = 0.08
#: A cycle's turn: this share of the CPU the cycle itself took (its thread's, from its start to its launches), never
#: under ``MIN_BUDGET_S`` (a small cluster's whole replay, a few milliseconds, in one cycle). The piece a turn
#: finishes past it (a class's placement engine, the tallies: up to 4% of a cycle at 11,000 queued) keeps a turn
#: under a quarter of its cycle (docs/benchmarks.md section 9).
SHARE = 0.18
MIN_BUDGET_S = 0.05


def command_key(command) -> str:
    return " ".join(str(part) for part in command)[:300] if isinstance(command, list) else str(command)[:300]


def _finished(since: datetime, after: tuple | None = None):
    """Finished work (succeeded, or failed after it ran) since ``since``; after the (finished_at, id) mark."""
    rows = Job.objects.filter(
        finished_at__gte=since, started_at__isnull=False, state__in=(JobState.SUCCEEDED, JobState.FAILED)
    )
    if after is not None:
        rows = rows.filter(finished_at__gte=after[0]).exclude(finished_at=after[0], pk__lte=after[1])
    return rows


_LEARN_COLUMNS = ("pk", "team_id", "owner_id", "resource_class_id", "image", "command", "started_at", "finished_at")


_NONE = Work(0, 0, 0)


def _pairs(rows) -> list[tuple[Work, float]]:
    return [
        (Work(team, owner, rc, image, command_key(command)), (finished - started).total_seconds())
        for _, team, owner, rc, image, command, started, finished in rows
    ]


def bounds() -> estimate.Bounds:
    return estimate.Bounds(
        horizon_s=settings.PORTAL_ESTIMATE_HORIZON,
        max_steps=settings.PORTAL_ESTIMATE_MAX_STEPS,
        step_s=max(settings.PORTAL_JOB_CYCLE_INTERVAL, settings.PORTAL_ESTIMATE_HORIZON / STEPS_PER_HORIZON),
        grace_s=settings.PORTAL_PREEMPTION_GRACE,
        widen_low=WIDEN[0],
        widen_high=WIDEN[1],
        widen_slack_s=WIDEN[2],
    )


def models(
    snap: Snapshot,
    runtimes: Runtimes,
    works: dict[int, tuple[Work, float | None]],
    ends: dict[tuple, float] | None = None,
):
    """The (end_of, run_of) pairs of the two passes. ``works``: job id → (its work, when it started, epoch seconds,
    or None). ``ends``, when given, keeps each running job's predicted end by (id, start, quantile) across
    refreshes; one already past is predicted again (the job outran it)."""
    now = snap.now
    ends = {} if ends is None else ends

    def model(q: float):
        def end_of(job: JobView) -> float:
            work, started = works.get(job.id, (None, None))
            key = (job.id, started, q)
            end = ends.get(key)
            if end is None or end <= now:
                begun = started if started is not None else now
                total = runtimes.predict(work, q, job.max_runtime_s, elapsed_s=max(0.0, now - begun))
                end = ends[key] = begun + total
            return end

        def run_of(job: JobView) -> float:
            work, _ = works.get(job.id, (None, None))
            return runtimes.predict(work, q, job.max_runtime_s)

        return end_of, run_of

    low, high = settings.PORTAL_ESTIMATE_QUANTILES
    return model(low), model(high)


def due() -> bool:
    """Whether a replay may begin now: not within the interval of the last one begun (one process's, when several
    run cycles). The mark lives a little less than the interval, so a cycle that comes a moment early does not
    find it still there (which would halve the rate replays begin)."""
    every = settings.PORTAL_ESTIMATE_EVERY
    return every > 0 and cache.add(DUE_KEY, 1, timeout=max(1, int(every * 0.9)))


def cycle_budget(cycle_cpu_s: float) -> float:
    """The CPU seconds a cycle that took ``cycle_cpu_s`` of CPU (its thread's) gives the replay: ``SHARE`` of it,
    never under ``MIN_BUDGET_S``."""
    return max(MIN_BUDGET_S, SHARE * cycle_cpu_s)


def refresh_now(
    now: datetime | None = None,
    budget_s: float | None = BUDGET_S,
    snap: Snapshot | None = None,
    admitted: set[int] = frozenset(),
    wall_s: float | None = None,
) -> int:
    """A turn of this process's refreshes: ``budget_s`` CPU seconds (None: to the replay's end; ``wall_s``, when
    given, bounds its wall time too) on the replay in progress, or on one it begins when none is and one is
    ``due`` (at most once every PORTAL_ESTIMATE_EVERY seconds; 0: never). The job cycle calls it after its launches
    with its own snapshot (``snap``) and what it just admitted (jobs.cycle.run), so beginning a replay builds
    nothing; without ``snap`` a replay begins on a snapshot of its own (``build_snapshot``). A turn another thread
    of the process is taking is not waited for: this one does nothing. An estimate that cannot be made is logged,
    the replay in progress is dropped, and every job keeps its last one. How many jobs it wrote."""
    if settings.PORTAL_ESTIMATE_EVERY <= 0 or not _TURNING.acquire(blocking=False):
        return 0
    try:
        now = now or timezone.now()
        snapshot = (lambda: snap) if snap is not None else (lambda: build_snapshot(now, FleetKeys())[0])
        return REFRESHER.turn(snapshot, now, budget_s, admitted, may_begin=due, wall_s=wall_s)
    finally:
        _TURNING.release()


def refresh(snap: Snapshot, admitted: set[int], now: datetime) -> int:
    """Compute and write the estimates of the snapshot's queued jobs (less those just admitted) in one go, on a
    refresher of its own; how many written."""
    return Refresher().turn(lambda: snap, now, None, admitted)


class Refresher:
    """One process's refreshes: the replay in progress (a generator, advanced a budget at a time), and what carries
    over between replays (the learned run lengths and their mark, each job's work and start, running jobs'
    predicted ends, the last finished replay's inputs)."""

    def __init__(self) -> None:
        self.runtimes: Runtimes | None = None
        self.learned_at: float = 0.0  # when the whole window was last read (epoch seconds)
        self.mark: tuple | None = None  # (finished_at, id) of the newest finished job learned
        self.works: dict[int, tuple[Work, float | None]] = {}
        self.ends: dict[tuple, float] = {}
        self.replay: Generator[None, None, int] | None = None
        self.last: tuple | None = None  # (inputs, when) of the last finished replay
        #: Turns the replay in progress has taken, and those the last finished one took.
        self.calls = 0
        self.took = 0
        self.now = timezone.now()  # the turn's

    def turn(
        self,
        snapshot: Callable[[], Snapshot],
        now: datetime,
        budget_s: float | None,
        admitted: set[int] = frozenset(),
        may_begin: Callable[[], bool] = lambda: True,
        wall_s: float | None = None,
    ) -> int:
        """Advance the replay in progress (or, when ``may_begin()``, begin one on ``snapshot()``) for ``budget_s``
        seconds of this thread's CPU (and at most ``wall_s`` of wall time, when given), finishing the piece it is
        in; how many estimates it wrote (0 until a replay ends).

        The cyclic garbage collector is paused meanwhile, as for the admission cycle (core.gcpause), and while a
        replay is in progress what the process holds at the end of a turn is frozen (``gc.freeze``) until the
        replay ends (``gc.unfreeze``). Why: the replay's snapshot and state (tens of thousands of views, copies and
        waits, none in a cycle) live across many turns, and the collection the collector catches up with when a
        turn ends would otherwise, now and then, be a full one that walks all of it and everything else the process
        holds: 0.2-0.4 s at 11,000 queued on 5,000 nodes, about a quarter of a cycle and five times a turn's work
        (docs/benchmarks.md section 9). Reference counting still frees what the replay drops as it goes; only
        cyclic garbage among the frozen objects waits for the replay's end. A worker process that froze objects
        of its own for good (portal.webprocess does so in web processes, which never refresh) would see them
        unfrozen then."""
        with paused_gc():
            written = self._turn(snapshot, now, budget_s, admitted, may_begin, wall_s)
            if self.replay is not None:
                gc.freeze()
            else:
                gc.unfreeze()
            return written

    def _turn(
        self,
        snapshot: Callable[[], Snapshot],
        now: datetime,
        budget_s: float | None,
        admitted: set[int],
        may_begin: Callable[[], bool],
        wall_s: float | None = None,
    ) -> int:
        began, began_wall = time.thread_time(), time.perf_counter()
        self.now = now
        try:
            if self.replay is None:
                if not may_begin():
                    return 0
                snap = snapshot()
                inputs = _inputs(snap)
                if self.last is not None and self.last[0] == inputs and snap.now - self.last[1] < bounds().step_s:
                    return 0  # nothing changed since the last replay, a moment ago
                self.replay, self.calls = self._replay(snap, inputs, admitted), 0
            self.calls += 1
            while True:
                try:
                    next(self.replay)
                except StopIteration as done:
                    self.replay, self.took = None, self.calls
                    return done.value
                if (budget_s is not None and time.thread_time() - began >= budget_s) or (
                    wall_s is not None and time.perf_counter() - began_wall >= wall_s
                ):
                    return 0
        except Exception:
            self.replay = None
            log.exception("start-time estimates were not refreshed")
            return 0

    def _replay(self, snap: Snapshot, inputs: tuple, admitted: set[int]) -> Generator[None, None, int]:
        now = datetime.fromtimestamp(snap.now, tz=UTC)
        yield from self._learn(now)
        yield from self._read_works(snap)
        low, high = models(snap, self.runtimes, self.works, self.ends)
        found = yield from estimate.ranging(snap, low, high, bounds())
        written = yield from self._write(snap, found, admitted)
        self.last = (inputs, snap.now)
        return written

    def _learn(self, now: datetime) -> Generator[None, None, None]:
        """The finished work since the mark; the whole window, in pages, when it was read a day ago or never."""
        if self.runtimes is None or now.timestamp() - self.learned_at >= RELEARN_S:
            since = now - timedelta(days=settings.PORTAL_ESTIMATE_LEARN_DAYS)
            window = _finished(since)
            # The oldest of the newest LEARN_ROWS, then pages from it on, oldest first, learned page by page.
            newest = window.order_by("-finished_at", "-pk").values_list("finished_at", "pk")
            oldest = next(iter(newest[LEARN_ROWS - 1 : LEARN_ROWS]), None)
            if oldest is not None:
                window = window.filter(finished_at__gte=oldest[0]).exclude(finished_at=oldest[0], pk__lt=oldest[1])
            learned, after = Runtimes(), None
            while True:
                page = window if after is None else _finished(since, after)
                rows = list(page.order_by("finished_at", "pk").values_list(*_LEARN_COLUMNS)[:LEARN_PAGE])
                learned.add(_pairs(rows))
                if rows:
                    after = (rows[-1][7], rows[-1][0])
                yield
                if len(rows) < LEARN_PAGE:
                    break
            self.runtimes, self.learned_at, self.mark = learned, now.timestamp(), after or self.mark
            self.ends.clear()
            return
        since = now - timedelta(days=settings.PORTAL_ESTIMATE_LEARN_DAYS)
        rows = list(_finished(since, self.mark).order_by("finished_at", "pk").values_list(*_LEARN_COLUMNS))
        pairs = _pairs(rows)
        self.runtimes.add(pairs)
        if rows:
            self.mark = (rows[-1][7], rows[-1][0])
            # Running work like what was just learned is predicted again.
            keys = {key for work, _ in pairs for key in work.keys()}
            for key in [key for key in self.ends if not keys.isdisjoint(self.works.get(key[0], (_NONE,))[0].keys())]:
                del self.ends[key]

    def _read_works(self, snap: Snapshot) -> Generator[None, None, None]:
        """The work (image, command) and start of the snapshot's jobs not read before, or whose start is unknown
        here while they run; jobs no longer queued or running are forgotten."""
        queued = {job.id for job in snap.queued}
        active = {job.id for job in snap.active}
        for gone in self.works.keys() - queued - active:
            del self.works[gone]
        for key in [key for key in self.ends if key[0] not in active]:
            del self.ends[key]
        missing = sorted(
            (queued - self.works.keys()) | {i for i in active if self.works.get(i, (None, None))[1] is None}
        )
        for chunk in range(0, len(missing), WRITE_CHUNK):
            rows = Job.objects.filter(pk__in=missing[chunk : chunk + WRITE_CHUNK]).values_list(
                "id", "team_id", "owner_id", "resource_class_id", "image", "command", "started_at"
            )
            for job_id, team, owner, rc, image, command, started in rows:
                work = Work(team, owner, rc, image, command_key(command))
                self.works[job_id] = (work, started.timestamp() if started else None)
            yield

    def _write(
        self, snap: Snapshot, found: dict[int, estimate.Range], admitted: set[int]
    ) -> Generator[None, None, int]:
        """One UPDATE per distinct (low, high, cluster), in chunks: the answers fall on the estimate's step grid, so
        there are few. A bound already past says now (the replay began a few refreshes ago)."""
        newest = cache.get(WRITTEN_KEY)
        if newest is not None and newest > snap.now:
            return 0  # another process's replay, begun later, wrote first: its answers stand
        stamp = timezone.now()
        floor = self.now.timestamp()
        fleet = len({node.cluster for node in snap.nodes.values()}) > 1  # the cluster is worth saying
        by_answer: dict[tuple, list[int]] = defaultdict(list)
        for i, (job_id, span) in enumerate(found.items(), 1):
            if i % WRITE_CHUNK == 0:
                yield
            if job_id in admitted or job_id not in self.works:
                continue  # admitted this cycle; or a view that is no job row (a service's replicas above its minimum)
            low = None if span.low is None else max(span.low, floor)
            high = None if span.high is None else max(span.high, floor)
            by_answer[(low, high, span.cluster if fleet else "")].append(job_id)
        # A job admitted or cancelled meanwhile may get one too: it is shown only while the job is queued.
        for (low, high, cluster), ids in by_answer.items():
            for chunk in range(0, len(ids), WRITE_CHUNK):
                Job.objects.filter(pk__in=ids[chunk : chunk + WRITE_CHUNK]).update(
                    estimated_start_low=_when(low), estimated_start_high=_when(high), estimated_at=stamp,
                    estimated_cluster=cluster,
                )  # fmt: skip
                yield
        cache.set(WRITTEN_KEY, snap.now, timeout=None)
        return sum(len(ids) for ids in by_answer.values())


def _inputs(snap: Snapshot) -> int:
    """What a replay depends on (the queue, where the running work is, the nodes), hashed: to tell whether anything
    changed since the last one."""
    nodes = frozenset((n.name, n.cluster, n.schedulable, frozenset(n.allocatable.items())) for n in snap.nodes.values())
    return hash(
        (
            frozenset(job.id for job in snap.queued),
            frozenset((job.id, job.node, job.nodes, job.preempting) for job in snap.active),
            nodes,
        )
    )


#: This process's refreshes, and the lock that keeps two threads (a worker's thread pool) from turning it at once.
REFRESHER = Refresher()
_TURNING = threading.Lock()


def _when(ts: float | None) -> datetime | None:
    return datetime.fromtimestamp(ts, tz=UTC) if ts is not None else None
