"""Checkpoint-aware reclaim (issue 34, item 3), in the pure scheduling core: victims are those whose stopping loses
the fewest GPU-hours since their last checkpoint (``JobView.at_risk``), and a job younger than its team's minimum
runtime (``JobView.protected``) is never one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduling.decide import decide
from jobs.scheduling.reclaim import stoppable, victim_order
from jobs.scheduling.snapshot import QuotaView
from tests.snapshots import A, B, job, node, snapshot

QUOTAS = {(A, 1): QuotaView(8, 8), (B, 1): QuotaView(0, 8)}


def borrower(**kw):
    return job(team=B, count=2, node="n1", borrowed=True, preemptible=True, **kw)


def test_the_job_that_checkpointed_last_is_stopped_not_the_youngest():
    # The older job wrote a checkpoint a minute ago (2 GPUs × 60 s at risk); the younger one never did and has run an
    # hour (2 × 3600 s): stopping the older one loses least.
    checkpointed = borrower(submitted=1, at_risk=2 * 60.0)
    young = borrower(submitted=5, at_risk=2 * 3600.0)
    wanted = job(team=A, count=2, submitted=10)
    out = decide(snapshot([node("n1", gpus=4, free=0)], [wanted], [checkpointed, young], QUOTAS, now=5000))
    assert out.preempt == {checkpointed.id: wanted.id}


def test_with_equal_loss_the_youngest_goes_first_as_before():
    old = borrower(submitted=1, at_risk=100.0)
    young = borrower(submitted=5, at_risk=100.0)
    wanted = job(team=A, count=2, submitted=10)
    out = decide(snapshot([node("n1", gpus=4, free=0)], [wanted], [old, young], QUOTAS))
    assert out.preempt == {young.id: wanted.id}


def test_a_job_younger_than_its_teams_minimum_runtime_is_never_a_victim():
    protected = borrower(submitted=5, at_risk=0.0, protected=True)
    other = borrower(submitted=1, at_risk=10_000.0)
    wanted = job(team=A, count=2, submitted=10)
    out = decide(snapshot([node("n1", gpus=4, free=0)], [wanted], [protected, other], QUOTAS))
    assert out.preempt == {other.id: wanted.id}


def test_when_only_protected_jobs_could_make_room_nothing_is_preempted():
    protected = [borrower(submitted=s, protected=True) for s in (1, 2, 3, 4)]
    wanted = job(team=A, count=2, submitted=10)
    out = decide(snapshot([node("n1", free=0)], [wanted], protected, QUOTAS))
    assert out.preempt == {}
    assert wanted.id in out.wait


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(0, 100), st.integers(1, 4), st.booleans()),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 8),
)
def test_victims_are_never_protected_and_come_in_order_of_least_loss(rows, needed):
    jobs = [
        job(
            team=B,
            count=count,
            node="n1",
            borrowed=True,
            preemptible=True,
            submitted=submitted,
            at_risk=risk,
            protected=protected,
        )  # fmt: skip
        for risk, submitted, count, protected in rows
    ]
    order = stoppable(jobs, A, reclaimed=set())
    assert not any(j.protected for j in order)
    assert {j.id for j in order} == {j.id for j in jobs if not j.protected}
    keys = [victim_order(j) for j in order]
    assert keys == sorted(keys)
    assert all(a.at_risk <= b.at_risk for a, b in zip(order, order[1:], strict=False))
    wanted = job(team=A, count=needed, submitted=1000)
    out = decide(snapshot([node("n1", free=0)], [wanted], jobs, {(A, 1): QuotaView(8, 8), (B, 1): QuotaView(0, 64)}))
    chosen = [j for j in jobs if j.id in out.preempt]
    assert not any(j.protected for j in chosen)
    # The victims are a prefix of the order: nobody who would lose less is kept while one losing more is stopped.
    assert [j.id for j in order[: len(chosen)]] == sorted((j.id for j in chosen), key=[j.id for j in order].index)
