"""Start-time estimates (issue 34, item 1): their calibration on a month of work, and what a refresh costs.

``calibrate``: a month whose real starts are known — ``--source synthetic``: bench/planner.py's synthetic month
(its starts from one replay through admission, as that bench observes them); ``--source demo``: the demo's month
(planner.demo_synth over the demo cluster and quotas, its starts by that module's own rule, read on a scratch
SQLite database); ``both`` (the default). At ``--samples`` submissions spread over the month (after ``--warmup``
days, so there is finished work to learn from), the state at that moment is rebuilt (running work on its nodes, the
queue), run lengths are learned from the work finished in the 30 days before, and jobs.scheduling.estimate gives
the new job's range with the portal's default bounds. The calibration (jobs.scheduling.estimate.widen) is chosen
on the first half of each month's predictions (in time order): the narrowest on the grid whose range holds at least
``--target`` there, over all submissions and over those that waited, in every month. Reported on both halves, the
second being the test: the median absolute error of the range's midpoint, and the share of real starts inside the
range (to within one estimate step, the estimate's grid) — all submissions, and those that waited more than two
minutes. A start past the horizon counts as inside when the estimate said "not within the next N hours".
``--save``/``--from``: keep the predictions, choose again from them.

``refresh``: admission_scale's 5,000 nodes / 40,000 GPUs and 20 teams with queued work enough that about 10,000
jobs wait after a first cycle (``--queued 36500``), with finished work to learn from and the running jobs started
over the last hours; then explain-only cycles (jobs.cycle.admit.admit, estimates off), timed, and whole replays
driven turn by turn as the job cycle drives them (jobs.cycle.estimates.Refresher; a turn a cycle, of
``estimates.SHARE`` of the CPU the cycle took, jobs.cycle.run) on the snapshot of the cycle that begins each: each
turn's wall and CPU time, the first included, as a share of that cycle's (the two under the same load), the garbage
collector's time in the turns and between them, the turns (cycles) a replay takes and so how old its answers are,
and a turn that finds nothing changed. Beside each, once, the first turn of a replay as the beat task began one
before (on a snapshot it built itself, ``BUDGET_S``). The machine and its load are printed.

    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python -m bench.estimates calibrate --samples 600 --save /tmp/p.json
    .venv/bin/python -m bench.estimates calibrate --from /tmp/p.json
    PORTAL_DATA_DIR=$(mktemp -d) .venv/bin/python -m bench.estimates refresh --queued 36500
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import json
import os
import platform
import pstats
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from datetime import timedelta  # noqa: E402

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test.utils import CaptureQueriesContext  # noqa: E402
from django.utils import timezone  # noqa: E402

from accounts.demo import seed_people  # noqa: E402
from bench.admission_scale import build  # noqa: E402
from bench.planner import synthetic_cluster, synthetic_history  # noqa: E402
from cluster.sim import SimulatedCluster  # noqa: E402
from gpus.reconcile import sync_inventory  # noqa: E402
from jobs.choices import JobState  # noqa: E402
from jobs.cycle import admit as admit_module  # noqa: E402
from jobs.cycle import estimates  # noqa: E402
from jobs.cycle.result import CycleResult  # noqa: E402
from jobs.demo import seed_quotas_and_jobs  # noqa: E402
from jobs.models import Job  # noqa: E402
from jobs.scheduling import estimate  # noqa: E402
from jobs.scheduling.runtimes import Runtimes, Work  # noqa: E402
from jobs.scheduling.snapshot import JobView, Snapshot  # noqa: E402
from planner import demo_history, demo_synth, engine, history, model  # noqa: E402
from planner.engine_replay import Settings, replay_quotas  # noqa: E402

LEARN_S = 30 * 86_400
QUANTILES = (0.1, 0.9)


@dataclass
class Ran:
    """One job of the month: its view (no placement), when it was submitted, started (None: never) and ended, on
    which nodes (one per rank), and its work for learning; ``runs``: each (start, end, nodes) when it was preempted
    and ran again."""

    view: JobView
    submitted: float
    started: float | None
    ended: float
    nodes: tuple[str, ...]
    work: Work
    runs: tuple = ()

    def running_at(self, t: float):
        for start, end, nodes in self.runs or ((self.started, self.ended, self.nodes),):
            if start is not None and start <= t < end:
                return start, tuple(nodes)
        return None


def synthetic(args) -> tuple[model.Cluster, list[Ran], dict[int, int]]:
    cluster = synthetic_cluster(args.nodes)
    history = synthetic_history(cluster, seed=args.seed, days=args.days, jobs=args.jobs, load=args.load)
    began = time.process_time()
    run = engine.replay(history, cluster, engine.Options())
    print(f"replay for the real starts: {time.process_time() - began:.1f} s CPU")
    out = []
    for rec in run.records.values():
        view = replace(rec.view, node="", nodes=(), borrowed=False, preempting=False, cluster="")
        work = Work(rec.job.team, 0, rec.job.class_id, rec.job.kind, "")
        if rec.runs:
            start, _, nodes = rec.runs[0]
            end = rec.runs[-1][1]
            out.append(Ran(view, rec.job.submitted, start, end, tuple(nodes), work, tuple(map(tuple, rec.runs))))
        else:
            out.append(Ran(view, rec.job.submitted, None, float("inf"), (), work))
    return cluster, out, dict(history.group_caps)


def demo(args) -> tuple[model.Cluster, list[Ran], dict[int, int]]:
    call_command("migrate", verbosity=0)
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(__file__).resolve().parents[1] / "cluster" / "scenarios" / "demo.yaml"
        sync_inventory(SimulatedCluster(Path(tmp) / "sim.json", scenario=scenario))
        seed_people(Path(tmp) / "creds.txt")
        seed_quotas_and_jobs()
    start, end = demo_history.window(timezone.now())
    fleet = history.current_cluster()
    _, cluster = engine.scope(model.History(start.timestamp(), end.timestamp(), []), fleet, fleet.home)
    month = demo_synth.synthesise(cluster, start.timestamp(), end.timestamp(), demo_history.SEED, {})
    out = []
    for i, job in enumerate(month.jobs):
        group = job.array[0] if job.array else None
        view = JobView(
            id=i + 1, team=job.team, class_id=job.class_id, count=job.count, cpu_m=job.cpu_m,
            memory_mb=job.memory_mb, priority=job.priority, preemptible=job.preemptible, submitted=job.submitted,
            max_runtime_s=job.max_runtime_s, workers=job.workers, group=group,
        )  # fmt: skip
        work = Work(job.team, 0, job.class_id, job.kind, str(job.count))
        out.append(Ran(view, job.submitted, job.admitted, job.finished, tuple(job.nodes), work))
    caps = {number: cap for number, (_, _, _, cap, _) in month.arrays.items() if cap}
    return cluster, out, caps


def state_at(
    cluster: model.Cluster, jobs: list[Ran], t: float, caps: dict[int, int], new: int, began: dict[int, float]
) -> Snapshot:
    """The month at ``t``: running work on its nodes, the queue (the job submitted at ``t`` included). ``began``
    gets each running job's start of its current run."""

    nodes = {name: replace(n, free=dict(n.free), allocatable=dict(n.allocatable)) for name, n in cluster.nodes.items()}
    active, queued = [], []
    for ran in jobs:
        if ran.submitted > t:
            continue
        running = ran.running_at(t) if ran.view.id != new else None
        if running is not None:
            began[ran.view.id], on = running
            cls = cluster.classes[ran.view.class_id]
            for name in on:
                node = nodes.get(name)
                if node is not None:
                    node.free[cls.resource_name] = node.free.get(cls.resource_name, 0) - ran.view.count
                    node.cpu_free_m -= ran.view.cpu_m
                    node.memory_free_mb -= ran.view.memory_mb
            active.append(replace(ran.view, node=on[0] if on else "", nodes=on))
        elif t < ran.ended or ran.started is None:
            queued.append(replace(ran.view))
    return Snapshot(
        now=t, nodes=nodes, classes=dict(cluster.classes), quotas=replay_quotas(cluster.quotas, Settings()),
        queued=queued, active=active, team_names=dict(cluster.team_names), patience=cluster.patience,
        group_caps=caps,
    )  # fmt: skip


def predictions(args, source: str) -> list[tuple]:
    """(submitted, real start, the range as the two passes give it, the queue's length) at each chosen
    submission of the month."""
    cluster, jobs, caps = synthetic(args) if source == "synthetic" else demo(args)
    jobs.sort(key=lambda r: (r.submitted, r.view.id))
    by_id = {r.view.id: r for r in jobs}
    first = jobs[0].submitted + args.warmup * 86_400
    candidates = [r for r in jobs if r.submitted >= first and r.started is not None]
    step = max(1, len(candidates) // args.samples)
    chosen = candidates[::step][: args.samples]
    bounds = estimate.Bounds()  # the portal's defaults: 6 h, 200 steps, a 5-minute grid; no calibration yet
    print(f"{source}: {len(jobs):,} jobs, {len(cluster.nodes)} nodes; {len(chosen)} submissions predicted; "
          f"quantiles {args.quantiles[0]:g}/{args.quantiles[1]:g}")  # fmt: skip
    rows, cpu = [], 0.0
    for ran in chosen:
        t = ran.submitted
        learned = Runtimes.learn(
            (r.work, r.ended - r.started) for r in jobs if r.started is not None and t - LEARN_S <= r.ended <= t
        )
        began: dict[int, float] = {}
        snap = state_at(cluster, jobs, t, caps, ran.view.id, began)

        def model_at(q: float, t=t, learned=learned, began=began):
            def end_of(view: JobView) -> float:
                start = began[view.id]
                return start + learned.predict(by_id[view.id].work, q, view.max_runtime_s, elapsed_s=t - start)

            def run_of(view: JobView) -> float:
                return learned.predict(by_id[view.id].work, q, view.max_runtime_s)

            return end_of, run_of

        began = time.process_time()
        span = estimate.ranges(snap, model_at(args.quantiles[0]), model_at(args.quantiles[1]), bounds)[ran.view.id]
        cpu += time.process_time() - began
        rows.append((t, ran.started, span, len(snap.queued)))
    print(f"  estimator: {cpu:.1f} s CPU for {len(rows)} predictions ({cpu / max(1, len(rows)) * 1000:.0f} ms each)")
    return rows


#: The calibrations tried (jobs.scheduling.estimate.widen): the start's share of the wait, the end's multiple of it,
#: and the slack added to the end (seconds).
LOWS = (1.0, 0.75, 0.5, 0.25, 0.0)
HIGHS = (1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 8.0)
SLACKS = (0.0, 300.0, 600.0, 900.0, 1800.0, 3600.0)


def calibrate(args) -> None:
    """Each month's predictions in time order: the first half chooses the calibration (the narrowest whose range
    holds at least ``--target`` of the time there, over all submissions and over those that waited, in every
    month), the second half is the test: the figures reported."""
    sources = ["demo", "synthetic"] if args.source == "both" else [args.source]
    if args.saved:
        months = {source: [(t, real, estimate.Range(*span), q) for t, real, span, q in rows]
                  for source, rows in json.loads(Path(args.saved).read_text()).items()}  # fmt: skip
    else:
        months = {source: predictions(args, source) for source in sources}
    if args.save:
        Path(args.save).write_text(json.dumps({
            source: [(t, real, (s.low, s.high, s.cluster, s.earliest), q) for t, real, s, q in rows]
            for source, rows in months.items()
        }))  # fmt: skip
    bounds = estimate.Bounds()
    halves = {source: (rows[: len(rows) // 2], rows[len(rows) // 2 :]) for source, rows in months.items()}

    def fits(pair):
        scores = [figures(fit, bounds, pair) for fit, _ in halves.values()]
        worst = min(min(s["inside"], s["waited_inside"]) for s in scores)
        return worst >= args.target, sum(s["width"] for s in scores), worst

    tried = {(lo, hi, slack): fits((lo, hi, slack)) for lo in LOWS for hi in HIGHS for slack in SLACKS}
    good = [pair for pair, (ok, _, _) in tried.items() if ok]
    chosen = min(good, key=lambda pair: tried[pair][1]) if good else max(tried, key=lambda pair: tried[pair][2])
    print(f"calibration chosen on the first halves: start {chosen[0]:g} of the wait, end {chosen[1]:g} × the wait "
          f"+ {chosen[2] / 60:g} min ({'holds' if good else 'the best, though short of'} {args.target:.0%} there; "
          f"the portal's jobs.cycle.estimates.WIDEN is {'/'.join(f'{x:g}' for x in estimates.WIDEN)})")  # fmt: skip
    head = "| month | half | calibration | predictions | median abs. error | inside | waited > 2 min | their error"
    print(head + " | inside |")
    print("|---|---|---|---|---|---|---|---|---|")
    for source, (fit, test) in halves.items():
        for half, rows in (("first (fit)", fit), ("second (test)", test)):
            for pair in dict.fromkeys(((1.0, 1.0, 0.0), chosen, tuple(estimates.WIDEN))):
                f = figures(rows, bounds, pair)
                print(f"| {source} | {half} | {pair[0]:g}/{pair[1]:g}/{pair[2] / 60:g} min | {f['n']} | "
                      f"{f['error']:.1f} min | "
                      f"{f['inside']:.0%} | {f['waited']} | {f['waited_error']:.1f} min | "
                      f"{f['waited_inside']:.0%} |")  # fmt: skip
    if args.misses:
        for source, rows in months.items():
            for t, real, span, queue in rows:
                low = "-" if span.low is None else f"{(span.low - t) / 60:.1f}"
                high = "-" if span.high is None else f"{(span.high - t) / 60:.1f}"
                print(f"    {source} real {(real - t) / 60:7.1f} min  range {low}..{high} min  queue {queue}")


def figures(rows, bounds: estimate.Bounds, pair: tuple[float, float, float]) -> dict:
    """The range's figures over ``rows`` calibrated by ``pair``: "inside" allows one step of the estimate's grid;
    the error is that of the range's midpoint; a start past the horizon is inside when the estimate said "not
    within the next N hours"."""
    tol = bounds.step_s

    def of(subset):
        inside, errors, width = 0, [], 0.0
        for t, real, raw, _ in subset:
            span = estimate.widen(raw, t, pair[0], pair[1], bounds.horizon_s, pair[2])
            if span.low is None:
                inside += real - t > bounds.horizon_s - tol
                width += bounds.horizon_s
                continue
            high = span.high if span.high is not None else float("inf")
            inside += span.low - tol <= real <= high + tol
            width += min(high, t + bounds.horizon_s) - span.low
            mid = (span.low + span.high) / 2 if span.high is not None else span.low
            errors.append(abs(mid - real))
        n = max(1, len(subset))
        return inside / n, (statistics.median(errors) / 60 if errors else 0.0), width / n / 60

    waited = [row for row in rows if row[1] - row[0] > 120]
    inside, error, width = of(rows)
    w_inside, w_error, _ = of(waited)
    return {"n": len(rows), "inside": inside, "error": error, "width": width, "waited": len(waited),
            "waited_inside": w_inside, "waited_error": w_error}  # fmt: skip


def refresh(args) -> None:
    settings.PORTAL_ESTIMATE_EVERY = 0
    rng = random.Random(7)
    began = time.perf_counter()
    build(rng, args.queued)
    admit_module.admit(CycleResult())
    now = timezone.now()
    # The running work started over the last 6 hours; a month of finished work like it to learn from.
    running = list(Job.objects.exclude(state=JobState.QUEUED).values_list("pk", flat=True))
    for pk in running:
        Job.objects.filter(pk=pk).update(started_at=now - timedelta(seconds=rng.uniform(0, 6 * 3600)))
    done = []
    for job in Job.objects.filter(pk__in=rng.sample(running, min(len(running), args.finished))):
        job.pk = None
        job.state = JobState.SUCCEEDED
        job.finished_at = now - timedelta(days=rng.uniform(0, 29))
        job.started_at = job.finished_at - timedelta(seconds=rng.lognormvariate(8.6, 0.8))
        done.append(job)
    Job.objects.bulk_create(done, batch_size=1000)
    queued = Job.objects.filter(state=JobState.QUEUED).count()
    print(f"database: {connection.vendor}; 5,000 nodes, {len(running):,} running, {queued:,} queued, "
          f"{len(done):,} finished to learn from (built in {time.perf_counter() - began:.0f} s)")  # fmt: skip
    cycles = []
    for _ in range(args.repeat):
        t, cpu = time.perf_counter(), time.thread_time()
        admit_module.admit(CycleResult())
        cycles.append((time.perf_counter() - t, time.thread_time() - cpu))
    if args.profile:
        snap, _ = admit_module.admitting(CycleResult())
        profiler = cProfile.Profile()
        profiler.runcall(estimates.refresh, snap, set(), timezone.now())
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    cycle = statistics.median(c[0] for c in cycles)
    cycle_cpu = statistics.median(c[1] for c in cycles)
    print(f"  machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.python_implementation()} "
          f"{platform.python_version()}; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
    print(f"  explain-only cycle: {cycle:.2f} s wall, CPU {cycle_cpu:.2f} s (medians of {args.repeat})")
    share = estimates.SHARE if args.share is None else args.share
    refresher = estimates.Refresher()
    in_gc = GcClock()
    gc.callbacks.append(in_gc)
    worst_share = 0.0
    interval = settings.PORTAL_JOB_CYCLE_INTERVAL
    for label in ("first replay (learns the whole window)", *(["next replay"] * args.repeat)):
        # Before: a replay beside the cycle (the beat task's) began on a snapshot of its own, built in its first
        # turn. Measured here once a round, beside a cycle of its own, then dropped.
        t, c = time.perf_counter(), time.thread_time()
        admit_module.admit(CycleResult())
        before_cycle, before_cycle_cpu = time.perf_counter() - t, time.thread_time() - c
        beside = estimates.Refresher()
        beside.runtimes, beside.learned_at, beside.mark = refresher.runtimes, refresher.learned_at, refresher.mark
        t, c = time.perf_counter(), time.thread_time()
        beside.turn(lambda: admit_module.build_snapshot(timezone.now(), admit_module.FleetKeys())[0],
                    timezone.now(), estimates.BUDGET_S)  # fmt: skip
        first, first_cpu = time.perf_counter() - t, time.thread_time() - c
        beside.replay = None
        gc.unfreeze()
        print(f"  {label}, before (its own snapshot, beside a cycle of {before_cycle:.2f} s wall, CPU "
              f"{before_cycle_cpu:.2f} s): its first turn {first:.2f} s wall ({first / before_cycle:.0%}), CPU "
              f"{first_cpu:.2f} s ({first_cpu / before_cycle_cpu:.0%})")  # fmt: skip
        # Now: the cycle's own snapshot; a turn a cycle of SHARE of that cycle's CPU (its thread's), as
        # jobs.cycle.run gives it (the turns measured against the cycle that began the replay: each turn stands for
        # the next cycle's).
        t, c = time.perf_counter(), time.thread_time()
        snap, decisions = admit_module.admitting(CycleResult())
        by, by_cpu = time.perf_counter() - t, time.thread_time() - c
        budget = max(estimates.MIN_BUDGET_S, share * by_cpu)
        wall_budget = max(estimates.MIN_BUDGET_S, share * by)
        refresher.last = None  # the inputs count as changed: a whole replay again, on what carried over
        turns, cpus, gcs, spans, written, queries = [], [], [], [], 0, 0
        gc_before, in_gc.longest = in_gc.cpu, 0.0
        while not written:
            with CaptureQueriesContext(connection) as seen:
                t, c, g, before = time.perf_counter(), time.thread_time(), in_gc.cpu, where(refresher.replay)
                written = refresher.turn(
                    lambda snap=snap: snap, timezone.now(), budget, set(decisions.admit), wall_s=wall_budget
                )
                turns.append(time.perf_counter() - t)
                cpus.append(time.thread_time() - c)
                gcs.append(in_gc.cpu - g)
                spans.append((before, where(refresher.replay)))
            queries += len(seen)
        load = " ".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"  {label}, now: {len(turns)} turns (cycles) of {budget:.3f} s CPU budget ({wall_budget:.3f} s wall), "
              f"{sum(turns):.2f} s wall "
              f"in all (CPU {sum(cpus):.2f} s, of which {sum(gcs):.2f} s the garbage collector's), {queries} "
              f"queries, {written:,} estimates written")  # fmt: skip
        print(f"    the cycle that began it: {by:.2f} s wall, CPU {by_cpu:.2f} s; load average {load}")
        between = in_gc.cpu - gc_before - sum(gcs)
        print(f"    the garbage collector between the turns: {between:.2f} s CPU in all, its longest collection "
              f"{in_gc.longest:.3f} s ({in_gc.longest / by_cpu:.0%} of that cycle's)")  # fmt: skip
        for name, values, base in (("wall", turns, by), ("CPU", cpus, by_cpu)):
            mid, worst = statistics.median(values), max(values)
            over = sum(v > base / 4 for v in values)
            print(f"    a turn, {name}: first {values[0]:.3f} s ({values[0] / base:.0%} of that cycle's), median "
                  f"{mid:.3f} s ({mid / base:.0%}), longest {worst:.3f} s ({worst / base:.0%}); {over} of "
                  f"{len(values)} over a quarter of that cycle")  # fmt: skip
        longest = max(range(len(cpus)), key=cpus.__getitem__)
        worst_share = max(worst_share, cpus[longest] / by_cpu)
        print(f"    the longest turn (CPU; {gcs[longest]:.3f} s of it the garbage collector's) ran from "
              f"{spans[longest][0] or 'the start'} to {spans[longest][1] or 'the end'}")  # fmt: skip
        print(f"    its answers when written: {len(turns) * interval / 60:.1f} min old with a cycle every "
              f"{interval:.0f} s, a turn a cycle (before, turns of {estimates.BUDGET_S * 1000:.0f} ms a minute: "
              f"about {sum(cpus) / estimates.BUDGET_S / 60:.1f} h for this much CPU)")  # fmt: skip
    gc.callbacks.remove(in_gc)
    print(f"  the longest turn of all, now, CPU: {worst_share:.0%} of the cycle that began its replay")
    t, c = time.perf_counter(), time.thread_time()
    refresher.turn(lambda: snap, timezone.now(), budget)
    quiet, quiet_cpu = time.perf_counter() - t, time.thread_time() - c
    print(f"  a refresh that finds nothing changed: {quiet:.3f} s wall ({quiet / cycle:.0%} of a cycle's), CPU "
          f"{quiet_cpu:.3f} s ({quiet_cpu / cycle_cpu:.0%})")  # fmt: skip


class GcClock:
    """A gc callback: the CPU seconds spent in the garbage collector so far (``cpu``) and the longest collection
    (``longest``). A turn runs with the collector paused (as the cycle does); what the collector does when it
    resumes falls between turns, and is reported beside them."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.longest = 0.0
        self._began = 0.0

    def __call__(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            took = time.process_time() - self._began
            self.cpu += took
            self.longest = max(self.longest, took)


def where(replay) -> str:
    """Where a replay in progress stands: its generators' functions and lines, outermost first."""
    parts = []
    while replay is not None and replay.gi_frame is not None:
        parts.append(f"{replay.gi_code.co_name}:{replay.gi_frame.f_lineno}")
        replay = replay.gi_yieldfrom
    return " > ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    cal = sub.add_parser("calibrate")
    cal.add_argument("--source", choices=["both", "synthetic", "demo"], default="both")
    cal.add_argument("--target", type=float, default=0.85, help="share the range must hold on the first halves")
    cal.add_argument("--jobs", type=int, default=50_000)
    cal.add_argument("--nodes", type=int, default=500)
    cal.add_argument("--days", type=float, default=30)
    cal.add_argument("--load", type=float, default=0.9)
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument("--samples", type=int, default=300)
    cal.add_argument(
        "--quantiles",
        type=float,
        nargs=2,
        default=list(QUANTILES),
        metavar=("LOW", "HIGH"),
        help="run-length quantiles of the two passes (the portal's PORTAL_ESTIMATE_QUANTILES)",
    )
    cal.add_argument("--misses", action="store_true", help="print every prediction")
    cal.add_argument("--save", help="write the predictions (JSON) to this file")
    cal.add_argument("--from", dest="saved", help="read the predictions --save wrote instead of making them")
    cal.add_argument("--warmup", type=float, default=3.0, help="days before the first prediction")
    ref = sub.add_parser("refresh")
    ref.add_argument("--queued", type=int, default=20_000, help="jobs submitted before the first cycle")
    ref.add_argument("--finished", type=int, default=20_000)
    ref.add_argument("--repeat", type=int, default=3)
    ref.add_argument("--profile", action="store_true", help="cProfile one refresh")
    ref.add_argument("--share", type=float, help="share of a cycle's CPU its turn gets (jobs.cycle.estimates.SHARE)")
    args = parser.parse_args(argv)
    calibrate(args) if args.command == "calibrate" else refresh(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
