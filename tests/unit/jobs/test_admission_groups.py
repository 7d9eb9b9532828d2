"""Group caps in admission (a job array's parallelism): a group never holds more active jobs than its cap,
whatever the queue, the quota or the capacity; a capped group blocks nobody else. Pure Python."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduling.decide import decide
from jobs.scheduling.snapshot import QuotaView
from tests.snapshots import H100, A, B, job, node, snapshot


def test_a_capped_group_is_admitted_up_to_its_cap_and_the_rest_wait_with_the_reason():
    tasks = [job(group=7, submitted=i) for i in range(5)]
    snap = snapshot([node("n1")], tasks)
    snap.group_caps = {7: 2}
    out = decide(snap)
    assert len(out.admit) == 2
    waiting = [out.wait[t.id] for t in tasks if t.id not in out.admit]
    assert len(waiting) == 3
    assert {w.reason for w in waiting} == {"array"}
    assert "at most 2 task(s) at once" in waiting[0].message
    assert waiting[0].detail == {"array_cap": 2, "array_active": 2}


def test_active_tasks_count_against_the_cap():
    running = [job(group=7, node="n1") for _ in range(2)]
    queued = [job(group=7, submitted=i) for i in range(3)]
    snap = snapshot([node("n1", free=6)], queued, running)
    snap.group_caps = {7: 3}
    out = decide(snap)
    assert len(out.admit) == 1


def test_a_capped_group_does_not_hold_back_other_jobs():
    tasks = [job(group=7, submitted=i) for i in range(4)]
    other = job(team=B, submitted=100)
    snap = snapshot([node("n1", gpus=4)], [*tasks, other])
    snap.group_caps = {7: 1}
    out = decide(snap)
    assert other.id in out.admit
    assert sum(1 for t in tasks if t.id in out.admit) == 1


def test_a_group_without_a_cap_is_admitted_like_any_jobs():
    tasks = [job(group=8, submitted=i) for i in range(4)]
    out = decide(snapshot([node("n1", gpus=4)], tasks))
    assert len(out.admit) == 4


@st.composite
def queues(draw):
    groups = draw(st.lists(st.integers(1, 4), min_size=1, max_size=4, unique=True))
    caps = {g: draw(st.integers(1, 4)) for g in groups if draw(st.booleans())}
    queued = [
        job(
            team=draw(st.sampled_from([A, B])),
            count=draw(st.integers(1, 3)),
            group=draw(st.sampled_from([*groups, None])),
            priority=draw(st.sampled_from([0, 50, 100])),
            preemptible=draw(st.booleans()),
            submitted=float(i),
        )
        for i in range(draw(st.integers(0, 25)))
    ]
    # Active jobs within each cap: the cap holds from the start.
    active = []
    for g in groups:
        for _ in range(draw(st.integers(0, caps.get(g, 3)))):
            active.append(job(group=g, node="n1", count=1))
    nodes = [node(f"n{i}", gpus=8, free=draw(st.integers(0, 8))) for i in range(1, draw(st.integers(1, 4)) + 1)]
    quotas = {(A, H100.id): QuotaView(draw(st.integers(0, 16)), 32), (B, H100.id): QuotaView(8, 16)}
    return nodes, queued, active, quotas, caps


@settings(max_examples=200, deadline=None)
@given(queues(), st.integers(1, 4))
def test_running_tasks_of_a_group_never_exceed_its_cap(case, cycles):
    nodes, queued, active, quotas, caps = case
    for _ in range(cycles):
        snap = snapshot(nodes, queued, active, quotas=quotas)
        snap.group_caps = caps
        out = decide(snap)
        admitted = [j for j in queued if j.id in out.admit]
        active = [*active, *admitted]
        queued = [j for j in queued if j.id not in out.admit]
        held = Counter(j.group for j in active if j.group is not None)
        for group, cap in caps.items():
            assert held[group] <= cap, (group, held[group], cap)
        for j in queued:
            if j.group in caps and held[j.group] < caps[j.group]:
                assert out.wait[j.id].reason != "array"
