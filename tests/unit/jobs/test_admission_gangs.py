"""Gangs in the admission engine: W workers on W distinct nodes, admitted whole or not at all; quota, shares and
budgets count W × count; topology; waits in gang terms; never-fits; the starvation bound; preemption whole and
reclaim for a gang. Pure Python, no database (the property test over random queues is in
test_admission_gang_properties.py)."""

from __future__ import annotations

import pytest

from jobs.scheduling import gangs
from jobs.scheduling.decide import decide
from jobs.scheduling.engines import Engines
from jobs.scheduling.snapshot import JobView, QuotaView
from tests.snapshots import H100, MIG3, A, B, job, node, snapshot
from vocab.names import ZONE_LABEL as ZONE


def zoned(name, zone, **kw):
    n = node(name, **kw)
    if zone:
        n.topology = {ZONE: zone}
    return n


def gang(workers, count=8, **kw):
    return job(workers=workers, count=count, **kw)


def running(j: JobView, nodes) -> JobView:
    """``j`` as an active job on ``nodes`` (rank order)."""
    return JobView(**{**j.__dict__, "node": nodes[0], "nodes": tuple(nodes) if j.workers > 1 else ()})


def test_a_gang_gets_w_distinct_nodes_with_rank_0_in_admit():
    g = gang(3)
    out = decide(snapshot([node(f"n{i}") for i in range(4)], [g], quotas={(A, 1): QuotaView(32, 32)}))
    ranks = out.ranks[g.id]
    assert len(ranks) == 3 and len(set(ranks)) == 3
    assert out.admit[g.id] == (ranks[0], False)


def test_a_single_job_has_no_ranks():
    j = job(count=2)
    out = decide(snapshot([node("n1")], [j]))
    assert j.id in out.admit and out.ranks == {}


def test_all_or_nothing_a_gang_that_does_not_fit_whole_takes_nothing_and_others_backfill():
    g = gang(3, submitted=0)
    single = job(count=8, submitted=1)
    nodes = [node("a"), node("b"), node("c", free=4), node("d", free=4)]
    out = decide(snapshot(nodes, [g, single], quotas={(A, 1): QuotaView(64, 64)}, now=100.0))
    assert g.id not in out.admit and g.id not in out.ranks and not out.reserved
    wait = out.wait[g.id]
    assert wait.reason == "capacity"
    assert wait.detail["nodes_needed"] == 3 and wait.detail["nodes_fitting_now"] == 2
    assert wait.message.startswith("Needs 3 nodes with 8 free × H100 each; 2 have that now.")
    # The failed attempt left the engine as it was: a whole node is still there for the 8-GPU job.
    assert out.admit[single.id][0] in {"a", "b"}


def test_a_gang_goes_to_busy_nodes_and_keeps_empty_ones_whole():
    g = gang(2, count=4)
    nodes = [node("a"), node("b"), node("c", free=4), node("d", free=4)]
    out = decide(snapshot(nodes, [g]))
    assert set(out.ranks[g.id]) == {"c", "d"}


def test_quota_counts_workers_times_count():
    quotas = {(A, 1): QuotaView(guaranteed=8, limit=16)}
    too_big = gang(3, submitted=0)  # 24 > 16
    over_guarantee = gang(2, submitted=1)  # 16 > 8, not preemptible
    out = decide(snapshot([node(f"n{i}") for i in range(4)], [too_big, over_guarantee], quotas=quotas))
    assert out.wait[too_big.id].reason == "quota"
    assert out.wait[too_big.id].detail == {"requested": 24, "in_use": 0, "guaranteed": 8, "limit": 16}
    assert "only for preemptible jobs" in out.wait[over_guarantee.id].message
    borrower = gang(2, preemptible=True)
    out = decide(snapshot([node(f"n{i}") for i in range(4)], [borrower], quotas=quotas))
    assert out.admit[borrower.id][1] is True  # 16 units: borrowing above the guarantee of 8


def test_an_active_gang_counts_against_quota_on_every_rank():
    quotas = {(A, 1): QuotaView(16, 16)}
    active = [running(gang(2, count=4), ["n0", "n1"])]  # 8 units held
    j = job(count=8, submitted=1)
    out = decide(snapshot([node("n0", free=4), node("n1", free=4), node("n2")], [j], active, quotas))
    assert j.id in out.admit
    j2 = job(count=8, submitted=2)
    out = decide(snapshot([node("n0", free=4), node("n1", free=4), node("n2")], [j, j2], active, quotas))
    assert out.wait[j2.id].reason == "quota" and out.wait[j2.id].detail["in_use"] == 16


def test_budget_charges_workers_times_count_times_fraction_times_runtime():
    quotas = {(A, 2): QuotaView(28, 28, budget_hours=10.0, used_hours=0.0)}
    g = gang(3, count=4, cls=MIG3, max_runtime_s=2 * 3600)  # 3 × 4 × 3/7 × 2 = 72/7 > 10
    nodes = [node(f"m{i}", gpus=4, product=MIG3) for i in range(3)]
    out = decide(snapshot(nodes, [g], quotas=quotas))
    assert out.wait[g.id].reason == "budget"
    assert out.wait[g.id].detail["charge"] == pytest.approx(3 * 4 * 3 / 7 * 2)


def test_fair_share_counts_a_running_gang_whole():
    quotas = {(A, 1): QuotaView(8, 16), (B, 1): QuotaView(8, 16)}
    # Alpha holds 2 × 3 = 6 GPUs in a gang, Beta a 4-GPU job: Beta is further below its share and goes first.
    active = [running(gang(2, count=3, team=A, preemptible=True), ["x0", "x1"]), job(team=B, count=4, node="x2")]
    a_job = job(team=A, count=1, submitted=0, preemptible=True)
    b_job = job(team=B, count=1, submitted=5)
    nodes = [node("x0", free=0), node("x1", free=0), node("x2", free=0), node("n1", free=1)]
    out = decide(snapshot(nodes, [a_job, b_job], active, quotas))
    assert b_job.id in out.admit and a_job.id not in out.admit


def test_require_topology_places_all_ranks_in_one_zone():
    nodes = [zoned("a1", "z1"), zoned("a2", "z1"), zoned("b1", "z2"), zoned("b2", "z2"), zoned("b3", "z2")]
    g = gang(3, topology_key=ZONE, topology_mode="require")
    out = decide(snapshot(nodes, [g], quotas={(A, 1): QuotaView(64, 64)}))
    assert set(out.ranks[g.id]) == {"b1", "b2", "b3"}


def test_require_topology_prefers_the_zone_with_busy_nodes():
    nodes = [zoned("a1", "z1", free=4), zoned("a2", "z1", free=4), zoned("b1", "z2"), zoned("b2", "z2")]
    g = gang(2, count=4, topology_key=ZONE, topology_mode="require")
    out = decide(snapshot(nodes, [g]))
    assert set(out.ranks[g.id]) == {"a1", "a2"}


def test_require_topology_waits_in_zone_terms_and_unlabelled_nodes_are_in_no_zone():
    nodes = [zoned("a1", "z1"), zoned("a2", "z1"), zoned("a3", "z1", free=0), zoned("b1", "z2"), zoned("u", "")]
    g = gang(3, topology_key=ZONE, topology_mode="require")
    out = decide(snapshot(nodes, [g], quotas={(A, 1): QuotaView(64, 64)}))
    wait = out.wait[g.id]
    assert wait.reason == "capacity"
    assert "Needs 3 nodes with 8 free × H100 each; 4 have that now; the most in one zone (" + ZONE + ") is 2." in (
        wait.message
    )
    assert {k: wait.detail[k] for k in ("nodes_needed", "nodes_fitting_now", "best_domain_count", "topology_key")} == {
        "nodes_needed": 3, "nodes_fitting_now": 4, "best_domain_count": 2, "topology_key": ZONE,
    }  # fmt: skip
    # Preferring the zone, the same gang goes anywhere.
    g2 = gang(3, topology_key=ZONE, topology_mode="prefer")
    out = decide(snapshot(nodes, [g2], quotas={(A, 1): QuotaView(64, 64)}))
    assert len(set(out.ranks[g2.id])) == 3


def test_prefer_topology_stays_in_one_zone_when_one_has_room():
    nodes = [zoned("a1", "z1", free=4), zoned("b1", "z2"), zoned("b2", "z2"), zoned("c1", "z3", free=4)]
    g = gang(2, count=4, topology_key=ZONE, topology_mode="prefer")
    out = decide(snapshot(nodes, [g]))
    # Anywhere, the two busy nodes a1 and c1 would score best; in one zone only z2 has two.
    assert set(out.ranks[g.id]) == {"b1", "b2"}


def test_a_require_gang_no_zone_can_ever_hold_never_fits_and_blocks_nobody():
    nodes = [zoned("a1", "z1"), zoned("a2", "z1"), zoned("b1", "z2"), zoned("b2", "z2")]
    g = gang(3, topology_key=ZONE, topology_mode="require", submitted=0)
    small = job(count=1, submitted=1)
    out = decide(snapshot(nodes, [g, small], now=10_000.0, quotas={(A, 1): QuotaView(64, 64)}))
    assert out.wait[g.id].reason == "never_fits" and out.wait[g.id].detail["best_domain_able"] == 2
    assert small.id in out.admit and not out.reserved and not out.starving


def test_a_gang_with_fewer_able_nodes_than_workers_never_fits():
    nodes = [node("a"), node("b"), node("c", team=B), node("d", schedulable=False), node("e", gpus=4)]
    g = gang(3, submitted=0)
    out = decide(snapshot(nodes, [g], now=10_000.0, quotas={(A, 1): QuotaView(64, 64)}))
    wait = out.wait[g.id]
    assert wait.reason == "never_fits"
    assert wait.detail == {"nodes_needed": 3, "requested_per_node": 8, "nodes_able": 2}
    assert "needs 3 nodes that can each hold 8 × H100, and only 2" in wait.message
    assert not out.reserved


def test_cuda_and_dedication_apply_to_every_rank():
    old = node("old")
    old.cuda = (12, 2)
    nodes = [old, node("mine", team=A), node("theirs", team=B), node("new")]
    for n in nodes[1:]:
        n.cuda = (12, 4)
    g = gang(2, cuda=(12, 4))
    out = decide(snapshot(nodes, [g]))
    assert set(out.ranks[g.id]) == {"mine", "new"}


def test_small_jobs_pass_a_gang_until_it_starves_then_its_nodes_are_held():
    big = gang(2, submitted=500)
    small = job(count=2, submitted=600)
    nodes = [node("n1", free=4), node("n2", free=4), node("n3", free=2)]
    out = decide(snapshot(nodes, [big, small], now=1000.0, patience=900.0))
    assert out.wait[big.id].reason == "capacity" and small.id in out.admit and not out.reserved
    # After the patience the gang holds the two nodes nearest to fitting it; the small job goes elsewhere.
    nodes = [node("n1", free=4), node("n2", free=4), node("n3", free=2)]
    out = decide(snapshot(nodes, [big, small], now=500 + 901.0, patience=900.0))
    assert out.reserved == {big.id: ("n1", "n2")}
    assert out.admit[small.id][0] == "n3"
    assert out.wait[big.id].detail["reserved_nodes"] == ["n1", "n2"]
    assert "2 nodes are held for it (n1, n2)" in out.wait[big.id].message
    # With no other node the small job waits.
    bigger = job(count=4, submitted=601)
    out = decide(snapshot([node("n1", free=4), node("n2", free=4), node("n3", free=2)], [big, bigger], now=1401.0))
    assert out.wait[bigger.id].reason == "capacity"


def test_a_gang_is_not_starved_by_a_stream_of_small_jobs():
    """Replay: four nodes full of 1-GPU jobs of varied runtimes, two more 1-GPU jobs arriving each minute, a 4 × 8
    gang. The gang must start within the patience plus the longest runtime of the jobs that occupy the nodes."""
    step, patience = 60.0, 900.0
    runtimes = [60.0 * (1 + (i * 7) % 10) for i in range(200)]  # 1–10 minutes, the scenario's own
    longest = max(runtimes)
    nodes = [node(f"n{i}", free=0) for i in range(4)]
    ends: dict[int, float] = {}
    active: list[JobView] = []
    for i in range(32):
        j = job(count=1, node=f"n{i // 8}", submitted=-1)
        active.append(j)
        ends[j.id] = runtimes[i]
    big = gang(4, submitted=0.0)
    queue, now, arrivals = [big], 0.0, 0
    quotas = {(A, 1): QuotaView(64, 64)}
    while True:
        now += step
        assert now <= patience + longest + step, "the gang never started"
        for j in [j for j in active if ends[j.id] <= now]:
            active.remove(j)
            for name in j.placed_on:
                nodes[int(name[1:])].free["nvidia.com/gpu"] += j.count
        for _ in range(2):
            queue.append(job(count=1, submitted=now))
        out = decide(snapshot(nodes, queue, active, quotas=quotas, now=now, patience=patience))
        for j in list(queue):
            if j.id in out.admit:
                placed = out.ranks.get(j.id, (out.admit[j.id][0],))
                for name in placed:
                    nodes[int(name[1:])].free["nvidia.com/gpu"] -= j.count
                    assert nodes[int(name[1:])].free["nvidia.com/gpu"] >= 0
                queue.remove(j)
                active.append(running(j, placed))
                ends[j.id] = now + runtimes[arrivals % len(runtimes)]
                arrivals += 1
        if big.id in out.admit:
            break
    assert len(set(out.ranks[big.id])) == 4
    assert now >= patience  # the small jobs did pass it until then


def test_a_borrowed_gang_is_preempted_whole_and_its_ranks_return_units_on_each_node():
    quotas = {(A, 1): QuotaView(8, 8), (B, 1): QuotaView(0, 16)}
    borrowed = running(gang(2, count=4, team=B, preemptible=True, borrowed=True, submitted=1), ["n1", "n2"])
    wanted = job(team=A, count=8, submitted=10)
    nodes = [node("n1", free=4), node("n2", free=4)]
    out = decide(snapshot(nodes, [wanted], [borrowed], quotas))
    assert out.preempt == {borrowed.id: wanted.id}
    assert out.wait[wanted.id].reason == "reclaiming"
    # While the gang is in its grace period its units count as returning on both nodes: nothing more is stopped.
    borrowed.preempting = True
    out = decide(snapshot([node("n1", free=4), node("n2", free=4)], [wanted], [borrowed], quotas))
    assert out.preempt == {} and out.wait[wanted.id].reason == "reclaiming"


def test_a_gang_within_its_guarantee_reclaims_where_the_fewest_units_must_go():
    quotas = {(A, 1): QuotaView(16, 16), (B, 1): QuotaView(0, 24)}
    whole = job(team=B, count=8, node="n1", borrowed=True, preemptible=True, submitted=1)
    half = job(team=B, count=4, node="n2", borrowed=True, preemptible=True, submitted=2)
    g = gang(2, team=A, submitted=10)
    nodes = [node("n1", free=0), node("n2", free=4), node("n3")]
    out = decide(snapshot(nodes, [g], [whole, half], quotas))
    assert out.preempt == {half.id: g.id}
    assert out.wait[g.id].reason == "reclaiming" and g.id not in out.admit
    # Once the victim is being preempted, the gang waits for its units instead of stopping more.
    half.preempting = True
    out = decide(snapshot(nodes, [g], [whole, half], quotas))
    assert out.preempt == {} and out.wait[g.id].reason == "reclaiming"


def fleet_nodes():
    """Two clusters: a's two nodes have 4 + 4 free, b's 6 + 3 (b1 alone has the most free)."""
    out = []
    for name, free in (("a1", 4), ("a2", 4), ("b1", 6), ("b2", 3)):
        n = node(name, free=free)
        n.cluster = name[0]
        out.append(n)
    return out


def test_a_starving_gang_holds_nodes_of_one_cluster_the_nearest_to_fitting():
    big = gang(2, submitted=0.0)
    out = decide(snapshot(fleet_nodes(), [big], now=1000.0, patience=900.0))
    # Not b1 and a1 (the two with the most free, in two clusters): the ranks share a cluster; b's 9 free beat a's 8.
    assert out.reserved == {big.id: ("b1", "b2")}


def test_a_starving_gang_holds_nodes_where_its_estimated_start_is_soonest():
    big = gang(2, submitted=0.0)
    nodes = fleet_nodes()
    idx = Engines(nodes, {H100.id: H100}).index(H100.id)
    assert gangs.reserve(idx, big, soonest=("a", "b")) == ("a1", "a2")
    # A cluster of the estimate's without W nodes the gang may use is passed over.
    idx = Engines(nodes, {H100.id: H100}).index(H100.id)
    assert gangs.reserve(idx, big, soonest=("c", "b")) == ("b1", "b2")


def test_admission_holds_a_starving_gangs_nodes_in_the_cluster_of_its_soonest_estimated_start():
    """The cycle passes the job's estimated cluster (Job.estimated_cluster, written by the estimates' refresh) to the
    reservation: a's nodes are held though b's have more free units now."""
    big = gang(2, submitted=0.0)
    big.estimated_cluster = "a"
    out = decide(snapshot(fleet_nodes(), [big], now=1000.0, patience=900.0))
    assert out.reserved == {big.id: ("a1", "a2")}
