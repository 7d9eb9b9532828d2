"""Start-time estimates on the pure core (jobs.scheduling.estimate, jobs.scheduling.runtimes): never earlier than
the earliest possible start, later in the same queue never sooner, run lengths learned from similar work and
bounded by the maximum runtime. Pure Python."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.estimate_words import phrase
from jobs.scheduling import estimate
from jobs.scheduling.decide import decide, deciding
from jobs.scheduling.runtimes import MAX_SAMPLES, MIN_SAMPLES, Runtimes, Work
from jobs.scheduling.snapshot import JobView, QuotaView
from tests.snapshots import A, B, job, node, snapshot

NOW = 100_000.0
BOUNDS = estimate.Bounds(horizon_s=48 * 3600.0, max_steps=500, step_s=60.0, grace_s=60.0)


def ends_at(ends: dict[int, float]):
    return lambda view: ends[view.id]


def runs(seconds: float):
    return lambda view: seconds


def running(team, count, node_name, id, **kw) -> JobView:
    return job(team, count=count, id=id, node=node_name, nodes=(node_name,), submitted=NOW - 7200, **kw)


def test_a_full_node_frees_at_the_running_jobs_end():
    busy = running(A, 8, "n1", id=1)
    waiting = job(A, count=8, id=2, submitted=NOW - 60)
    snap = snapshot([node("n1", free=0)], [waiting], [busy], now=NOW)
    found = estimate.starts(snap, ends_at({1: NOW + 3600}), runs(600), BOUNDS)
    assert found == {2: NOW + 3600}


def test_the_range_spans_the_optimistic_and_pessimistic_ends_and_the_horizon_bounds_it():
    busy = running(A, 8, "n1", id=1)
    first = job(A, count=8, id=2, submitted=NOW - 60)
    second = job(A, count=8, id=3, submitted=NOW - 30)
    snap = snapshot([node("n1", free=0)], [first, second], [busy], now=NOW)
    short = estimate.Bounds(horizon_s=3.5 * 3600.0, max_steps=500, step_s=60.0)
    found = estimate.ranges(
        snap, (ends_at({1: NOW + 1800}), runs(1800)), (ends_at({1: NOW + 3600}), runs(3 * 3600)), short
    )
    assert found[2] == estimate.Range(NOW + 1800, NOW + 3600)
    # Optimistic: 1800 + 1800; pessimistic: 3600 + 3 h, past the 3.5-hour horizon: open-ended.
    assert found[3] == estimate.Range(NOW + 3600, None)


def test_nothing_ends_within_the_horizon_means_no_estimate():
    busy = running(A, 8, "n1", id=1)
    waiting = job(A, count=8, id=2, submitted=NOW - 60)
    snap = snapshot([node("n1", free=0)], [waiting], [busy], now=NOW)
    short = estimate.Bounds(horizon_s=3600.0, step_s=60.0)
    assert estimate.ranges(snap, (ends_at({1: NOW + 7200}), runs(60)), (ends_at({1: NOW + 7200}), runs(60)), short) == {
        2: estimate.Range(None, None)
    }


def test_on_a_fleet_the_range_names_the_cluster_where_it_starts_first():
    a, b = replace(node("a1", free=0), cluster="a"), replace(node("b1", free=0), cluster="b")
    busy_a, busy_b = running(A, 8, "a1", id=1), running(A, 8, "b1", id=2)
    waiting = job(A, count=8, id=3, submitted=NOW - 60)
    snap = snapshot([a, b], [waiting], [busy_a, busy_b], now=NOW)
    ends = ends_at({1: NOW + 7200, 2: NOW + 1800})
    assert estimate.ranges(snap, (ends, runs(600)), (ends, runs(600)), BOUNDS)[3] == estimate.Range(
        NOW + 1800, NOW + 1800, "b"
    )


def test_the_range_names_the_cluster_of_the_soonest_start_whichever_pass_found_it():
    a, b = replace(node("a1", free=0), cluster="a"), replace(node("b1", free=0), cluster="b")
    busy_a, busy_b = running(A, 8, "a1", id=1), running(A, 8, "b1", id=2)
    waiting = job(A, count=8, id=3, submitted=NOW - 60)
    snap = snapshot([a, b], [waiting], [busy_a, busy_b], now=NOW)
    # Optimistic: a frees at +30 min; pessimistic: b frees at +20 min (a only at +90): the soonest is b's.
    optimistic = ends_at({1: NOW + 1800, 2: NOW + 3600})
    pessimistic = ends_at({1: NOW + 5400, 2: NOW + 1200})
    found = estimate.ranges(snap, (optimistic, runs(600)), (pessimistic, runs(600)), BOUNDS)[3]
    assert (found.low, found.high, found.cluster) == (NOW + 1200, NOW + 1800, "b")


def test_the_words_name_the_cluster_and_the_horizon(settings):
    settings.TIME_ZONE = "UTC"
    at = datetime(2026, 12, 2, 13, 0, tzinfo=UTC)
    low, high = at + timedelta(minutes=80), at + timedelta(minutes=125)
    assert phrase(low, high, at) == "likely between 14:20 and 15:05"
    assert phrase(low, high, at, cluster="cloud") == "likely between 14:20 and 15:05 on cloud"
    assert phrase(low, None, at, horizon_s=6 * 3600) == "likely after 14:20 (possibly not within the next 6 hours)"
    assert phrase(None, None, at, horizon_s=6 * 3600, cluster="cloud") == "not within the next 6 hours"
    assert phrase(None, None, None) == ""


@st.composite
def queues(draw):
    nodes = draw(st.integers(1, 3))
    gpus = 8
    free = {f"n{i}": gpus for i in range(nodes)}
    active, ends, next_id = [], {}, 1000
    for name in list(free):
        for _ in range(draw(st.integers(0, 3))):
            count = draw(st.integers(1, 4))
            if free[name] < count:
                break
            free[name] -= count
            team = draw(st.sampled_from([A, B]))
            active.append(running(team, count, name, id=next_id))
            ends[next_id] = NOW + draw(st.integers(1, 40)) * 300
            next_id += 1
    count = draw(st.integers(1, 8))
    size = draw(st.integers(1, 12))
    queued = [job(A, count=count, id=i + 1, submitted=NOW - 3600 + i * 10, owner=7) for i in range(size)]
    others = [
        job(B, count=draw(st.integers(1, 8)), id=500 + i, submitted=NOW - 3000 + i * 7, owner=8)
        for i in range(draw(st.integers(0, 5)))
    ]
    run = draw(st.integers(1, 30)) * 300
    snap = snapshot([node(n, free=f) for n, f in free.items()], queued + others, active, now=NOW)
    return snap, ends, run, [j.id for j in queued]


@settings(max_examples=60, deadline=None)
@given(queues())
def test_never_before_the_earliest_possible_start_and_later_in_the_queue_never_sooner(case):
    snap, ends, run, order = case
    found = estimate.starts(snap, ends_at(ends), runs(run), BOUNDS)
    now_admitted = set(decide(snapshot(list(snap.nodes.values()), snap.queued, snap.active, now=NOW)).admit)
    # The first moment anything hands units back: a running job's end, or the end of one admitted now.
    first_end = min([*ends.values(), *([NOW + run] if now_admitted else [])], default=None)
    for job_id, at in found.items():
        assert at >= NOW
        if job_id not in now_admitted:  # it cannot start before something ends
            assert first_end is not None and at >= first_end
        else:
            assert at == NOW
    # The same team, owner, size and priority, submitted later: never an earlier start, never one where the earlier
    # job has none.
    previous = NOW
    for job_id in order:
        at = found.get(job_id)
        if at is None:
            previous = float("inf")
            continue
        assert at >= previous
        previous = at


@settings(max_examples=30, deadline=None)
@given(queues(), st.integers(1, 30), st.sampled_from([(1.0, 1.0), (0.5, 2.0), (0.0, 8.0)]))
def test_ranges_keep_the_queue_order(case, longer, widen):
    snap, ends, run, order = case
    late = {k: v + longer * 60 for k, v in ends.items()}
    bounds = replace(BOUNDS, widen_low=widen[0], widen_high=widen[1])
    found = estimate.ranges(snap, (ends_at(ends), runs(run)), (ends_at(late), runs(run + longer * 60)), bounds)
    lows = [found[j].low if found[j].low is not None else float("inf") for j in order]
    assert lows == sorted(lows)
    highs = [found[j].high if found[j].high is not None else float("inf") for j in order]
    assert highs == sorted(highs)
    now_admitted = set(decide(snapshot(list(snap.nodes.values()), snap.queued, snap.active, now=NOW)).admit)
    first_end = min([*ends.values(), *([NOW + run] if now_admitted else [])], default=None)
    for job_id, span in found.items():
        assert span.low is None or span.low >= NOW
        # Calibrated or not, never before the earliest possible start: now, or the first moment anything ends.
        if span.low is not None and job_id not in now_admitted:
            assert span.low >= first_end
        assert span.high is None or span.low is not None and span.high >= span.low


@st.composite
def mixed(draw):
    """Two teams guaranteed 8 GPUs each up to a limit of 24 on a few 8-GPU nodes: work running on each node (some of
    it preemptible and borrowed), and a queue of both teams' jobs of several owners, sizes, priorities, ages
    (some past their patience) and preemptibility: what admits, borrows, reclaims, starves and waits for quota."""
    free = {f"n{i}": 8 for i in range(draw(st.integers(1, 4)))}
    active, ends, next_id = [], {}, 1000
    for name in list(free):
        for _ in range(draw(st.integers(0, 3))):
            count = draw(st.integers(1, 4))
            if free[name] < count:
                break
            free[name] -= count
            borrowed = draw(st.booleans())
            team = draw(st.sampled_from([A, B]))
            active.append(running(team, count, name, id=next_id, borrowed=borrowed, preemptible=borrowed))
            ends[next_id] = NOW + draw(st.integers(1, 40)) * 300
            next_id += 1
    queued = [
        job(
            draw(st.sampled_from([A, B])),
            count=draw(st.sampled_from([1, 2, 4, 8])),
            id=i + 1,
            submitted=NOW - draw(st.integers(0, 7200)),
            owner=draw(st.sampled_from([7, 8, 9])),
            priority=draw(st.sampled_from([50, 100])),
            preemptible=draw(st.booleans()),
        )
        for i in range(draw(st.integers(1, 25)))
    ]
    quotas = {(A, 1): QuotaView(8, 24), (B, 1): QuotaView(8, 24)}
    snap = snapshot([node(n, free=f) for n, f in free.items()], queued, active, quotas=quotas, now=NOW)
    return snap, ends, draw(st.integers(1, 30)) * 300


@settings(max_examples=60, deadline=None)
@given(mixed(), st.integers(1, 5))
def test_an_admission_cycle_cut_into_pieces_decides_as_in_one_go(case, every):
    snap, _, _ = case
    steps, pieces = deciding(snap, every=every), 0
    while True:
        try:
            next(steps)
            pieces += 1
        except StopIteration as done:
            cut = done.value
            break
    assert cut == decide(snap)
    # It did stop within the queue: after each ``every`` jobs considered.
    assert pieces == len(snap.queued) // every


@settings(max_examples=30, deadline=None)
@given(mixed())
def test_the_estimate_is_the_same_however_finely_its_steps_are_cut(case):
    snap, ends, run = case
    late = {k: v + 900 for k, v in ends.items()}
    models = (ends_at(ends), runs(run)), (ends_at(late), runs(run + 900))
    with mock.patch.object(estimate, "JOBS_PER_YIELD", 1_000_000), mock.patch.object(estimate, "COPIES_PER_YIELD", 1):
        whole = estimate.ranges(snap, *models, BOUNDS)
    with mock.patch.object(estimate, "JOBS_PER_YIELD", 1):
        assert estimate.ranges(snap, *models, BOUNDS) == whole


def test_the_calibration_widens_the_range_within_the_earliest_start_and_the_horizon():
    span = estimate.Range(NOW + 3600, NOW + 5400, "a", earliest=NOW + 1800)
    assert estimate.widen(span, NOW, 0.25, 2.0, 6 * 3600) == estimate.Range(NOW + 1800, NOW + 10_800, "a")
    assert estimate.widen(span, NOW, 0.75, 1.5, 6 * 3600) == estimate.Range(NOW + 2700, NOW + 8100, "a")
    # Past the horizon: open-ended; starting now stays now; no estimate stays none.
    assert estimate.widen(span, NOW, 1.0, 5.0, 6 * 3600).high is None
    assert estimate.widen(estimate.Range(NOW, NOW), NOW, 0.0, 8.0, 6 * 3600) == estimate.Range(NOW, NOW)
    assert estimate.widen(estimate.Range(None, None), NOW, 0.0, 8.0, 6 * 3600) == estimate.Range(None, None)


def test_run_lengths_come_from_the_most_specific_work_with_enough_samples():
    work = Work(team=A, owner=7, class_id=1, image="img:1", command="python train.py")
    colleague = Work(team=A, owner=8, class_id=1, image="other", command="x")
    learned = Runtimes.learn([(work, 600.0 + i) for i in range(MIN_SAMPLES)] + [(colleague, 5000.0) for _ in range(20)])
    assert 600 <= learned.predict(work, 0.5, max_runtime_s=7200) <= 600 + MIN_SAMPLES
    # Bounded by the maximum runtime.
    assert learned.predict(colleague, 0.5, max_runtime_s=3600) == 3600
    # Nothing like it learned: the maximum runtime.
    stranger = Work(team=B, owner=9, class_id=1)
    assert learned.predict(stranger, 0.5, max_runtime_s=7200) == 7200
    # Another of the team's users with no history of their own: the team and class's lengths.
    newcomer = Work(team=A, owner=9, class_id=1, image="new", command="y")
    assert learned.predict(newcomer, 0.9, max_runtime_s=99_999) > 4000


def test_a_running_job_outlasting_everything_learned_runs_to_its_maximum():
    work = Work(team=A, owner=7, class_id=1)
    learned = Runtimes.learn([(work, float(s)) for s in (100, 200, 300, 400, 500, 600)])
    assert learned.predict(work, 0.5, max_runtime_s=3600, elapsed_s=1000) == 3600
    # Conditional on what it ran: only the longer lengths count.
    assert learned.predict(work, 0.0, max_runtime_s=3600, elapsed_s=350) == 400
    # Never less than it has run.
    assert learned.predict(work, 0.5, max_runtime_s=60, elapsed_s=100) >= 100


def test_learning_more_later_is_learning_it_all_at_once():
    work = Work(team=A, owner=7, class_id=1)
    lengths = [float((i * 37) % 1000) for i in range(2 * MAX_SAMPLES)]
    whole = Runtimes.learn([(work, x) for x in lengths])
    step = Runtimes.learn([(work, x) for x in lengths[:100]])
    step.add([(work, x) for x in lengths[100:]])
    # Each key keeps its newest MAX_SAMPLES lengths, sorted, however they came.
    assert step.lengths == whole.lengths
    assert whole.lengths[work.keys()[0]] == sorted(lengths[-MAX_SAMPLES:])
