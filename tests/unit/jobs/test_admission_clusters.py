"""Admission over a fleet, pure core (issue 32, items 3 and 4): per-cluster quota caps bar a cluster and placement
tries the others, a gang stays within one cluster under its cap, a class scoped to one cluster counts only that
cluster's nodes, and a job that may run on several clusters says why it starts on none of them, per cluster."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduling.decide import decide
from jobs.scheduling.snapshot import ClassView, QuotaView
from tests.snapshots import H100, A, B, job, node, snapshot
from vocab.waits import WaitReason


def at(cluster, name, **kw):
    return replace(node(name, **kw), cluster=cluster)


def test_a_cap_bars_its_cluster_and_placement_uses_the_other():
    quotas = {(A, 1): QuotaView(16, 16, caps={"cloud": 4})}
    running = job(count=6, node="c1", cluster="cloud")
    nodes = [at("cloud", "c1", free=2), at("onprem", "o1")]
    wanted = job(count=2, submitted=1)
    # Without a cap the busy cloud node, a tight fit, is the best place ...
    assert decide(snapshot(nodes, [wanted], [running])).admit[wanted.id] == ("c1", False)
    # ... but the team holds 6 there, above its cap of 4: the job goes on-prem.
    out = decide(snapshot(nodes, [wanted], [running], quotas))
    assert out.admit[wanted.id] == ("o1", False)


def test_a_cap_counts_what_the_cycle_admits_and_never_exceeds_the_fleet_limit():
    quotas = {(A, 1): QuotaView(6, 6, caps={"cloud": 4})}
    jobs = [job(count=2, submitted=i, clusters=("cloud", "onprem")) for i in range(4)]
    nodes = [at("cloud", "c1"), at("onprem", "o1", free=2)]
    out = decide(snapshot(nodes, jobs, quotas=quotas))
    # Two fill the cloud cap, the third spills on-prem, the fourth is over the fleet-wide limit of 6.
    assert [out.admit.get(j.id, (None,))[0] for j in jobs] == ["c1", "c1", "o1", None]
    assert out.wait[jobs[3].id].reason == WaitReason.QUOTA
    assert "limit of 6" in out.wait[jobs[3].id].message


def test_every_cluster_capped_waits_for_quota_and_says_which_cap():
    quotas = {(A, 1): QuotaView(16, 16, caps={"cloud": 4})}
    running = job(count=4, node="c1", cluster="cloud")
    capped = job(count=1, submitted=1, clusters=("cloud",))
    out = decide(snapshot([at("cloud", "c1", free=4)], [capped], [running], quotas))
    wait = out.wait[capped.id]
    assert wait.reason == WaitReason.QUOTA
    sentence = "Alpha's cap of 4 × H100 on cloud is reached (it holds 4 there; this job needs 1)"
    assert (
        wait.message
        == f"Team {sentence}. It starts when the team's jobs there free enough, or ask an admin to raise a cap."
    )
    assert wait.detail["clusters"] == [{"cluster": "cloud", "reason": "quota", "message": sentence}]


def test_a_cap_on_a_cluster_the_job_does_not_use_changes_nothing():
    quotas = {(A, 1): QuotaView(16, 16, caps={"cloud": 0})}
    wanted = job(count=2, clusters=("onprem",))
    out = decide(snapshot([at("onprem", "o1"), at("cloud", "c1")], [wanted], quotas=quotas))
    assert out.admit[wanted.id] == ("o1", False)


def test_a_gang_stays_within_one_cluster_and_its_cap():
    quotas = {(A, 1): QuotaView(32, 32, caps={"cloud": 8})}
    nodes = [at("cloud", f"c{i}") for i in range(4)] + [at("onprem", f"o{i}") for i in range(2)]
    # Three workers of 4 each: 12 units, above the cloud cap of 8, and on-prem has two nodes only.
    gang = job(count=4, workers=3, submitted=1)
    out = decide(snapshot(nodes, [gang], quotas=quotas))
    assert gang.id not in out.admit
    wait = out.wait[gang.id]
    by_cluster = {row["cluster"]: row for row in wait.detail["clusters"]}
    assert by_cluster["cloud"]["reason"] == "quota"
    assert by_cluster["onprem"]["reason"] == "never_fits"
    assert "only 2 of the 3 nodes it needs could ever hold 4 × H100" in wait.message
    # Two workers take the team exactly to its cap: allowed, both ranks on cloud.
    pair = job(count=4, workers=2, submitted=2)
    out = decide(snapshot(nodes, [pair], quotas=quotas))
    assert {name[0] for name in out.ranks[pair.id]} == {"c"}


def test_a_class_scoped_to_a_cluster_counts_only_that_clusters_nodes():
    onprem_h100 = replace(H100, cluster="onprem")
    fleet_h100 = ClassView(
        3, H100.resource_name, H100.product_label, 1.0, "H100 elsewhere", not_on=frozenset({"onprem"})
    )
    nodes = [at("onprem", "o1"), at("cloud", "c1")]
    scoped = job(count=8, submitted=1)
    elsewhere = job(count=8, submitted=2, cls=fleet_h100)
    snap = snapshot(nodes, [scoped, elsewhere], quotas={(A, 1): QuotaView(16, 16), (A, 3): QuotaView(16, 16)})
    snap.classes = {1: onprem_h100, 3: fleet_h100}
    out = decide(snap)
    assert out.admit[scoped.id] == ("o1", False)
    assert out.admit[elsewhere.id] == ("c1", False)
    # A second on-prem job does not spill onto the cloud node, which belongs to the other class.
    more = job(count=8, submitted=3)
    snap.queued = [more]
    snap.nodes["o1"].free = {H100.resource_name: 0}
    out = decide(snap)
    assert more.id not in out.admit and out.wait[more.id].reason == WaitReason.CAPACITY


def test_the_wait_says_per_cluster_why_not_there():
    quotas = {(A, 1): QuotaView(16, 16, caps={"cloud": 4})}
    running = job(count=4, node="c1", cluster="cloud")
    nodes = [at("onprem", "o1", free=2), at("onprem", "o2", gpus=2, free=0), at("cloud", "c1", free=4)]
    waiting = job(count=4, submitted=1)
    out = decide(snapshot(nodes, [waiting], [running], quotas))
    wait = out.wait[waiting.id]
    assert wait.reason == WaitReason.CAPACITY  # the headline: it could fit some day
    assert wait.message.endswith(
        "Why not on each cluster: cloud: Alpha's cap of 4 × H100 on cloud is reached (it holds 4 there; this job "
        "needs 4); onprem: no node has 4 free × H100 (the most free on one is 2)."
    )
    assert [(row["cluster"], row["reason"]) for row in wait.detail["clusters"]] == [
        ("cloud", "quota"),
        ("onprem", "capacity"),
    ]


def test_a_job_on_one_cluster_keeps_its_one_reason():
    waiting = job(count=4, clusters=("onprem",))
    out = decide(snapshot([at("onprem", "o1", free=2), at("cloud", "c1")], [waiting]))
    assert "clusters" not in out.wait[waiting.id].detail
    assert "Why not on each cluster" not in out.wait[waiting.id].message


def test_reclaim_does_not_preempt_on_a_capped_cluster():
    quotas = {(A, 1): QuotaView(8, 8, caps={"cloud": 0}), (B, 1): QuotaView(0, 8)}
    borrower = job(team=B, count=4, node="c1", cluster="cloud", borrowed=True, preemptible=True)
    other = job(team=B, count=7, node="o1", cluster="onprem", borrowed=True, preemptible=True, submitted=5)
    nodes = [at("cloud", "c1", free=0), at("onprem", "o1", free=1)]
    wanted = job(count=4, submitted=10)
    # Without the cap the fewest units go on cloud ...
    uncapped = {**quotas, (A, 1): QuotaView(8, 8)}
    assert decide(snapshot(nodes, [wanted], [borrower, other], uncapped)).preempt == {borrower.id: wanted.id}
    # ... but the team may not use cloud: room is made on-prem.
    out = decide(snapshot(nodes, [wanted], [borrower, other], quotas))
    assert out.preempt == {other.id: wanted.id}


@settings(max_examples=60, deadline=None)
@given(
    cap=st.integers(0, 8),
    limit=st.integers(0, 16),
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=8),
    held_cloud=st.integers(0, 4),
)
def test_caps_and_the_limit_are_never_exceeded(cap, limit, sizes, held_cloud):
    """Whatever the queue, what the team holds on cloud stays within the cap (or what it held already), and what it
    holds in all within the fleet-wide limit (or what it held already)."""
    quotas = {(A, 1): QuotaView(limit, limit, caps={"cloud": cap})}
    active = [job(count=held_cloud, node="c0", cluster="cloud")] if held_cloud else []
    nodes = [at("cloud", "c0", free=8 - held_cloud), at("cloud", "c1"), at("onprem", "o1"), at("onprem", "o2")]
    queued = [job(count=n, submitted=i, preemptible=True) for i, n in enumerate(sizes)]
    out = decide(snapshot(nodes, queued, active, quotas))
    by_id = {j.id: j for j in queued}
    on_cloud = sum(by_id[i].total for i, (name, _) in out.admit.items() if name.startswith("c"))
    total = sum(by_id[i].total for i in out.admit)
    assert on_cloud == 0 or held_cloud + on_cloud <= cap
    assert total == 0 or held_cloud + total <= limit
