"""Fair share among a team's members (jobs.scheduling.members), on the pure core: one member's 200-task array does
not hold a colleague's single job behind it, weights change the order, priority still comes first, the waiting
member is told why in words, and quotas hold whatever the order."""

from __future__ import annotations

from jobs.scheduling.decide import decide
from jobs.scheduling.snapshot import QuotaView
from tests.snapshots import H100, A, B, job, node, snapshot
from vocab.waits import WaitReason

ALICE, BOB, CAROL = 11, 12, 13
NAMES = {ALICE: "alice", BOB: "bob", CAROL: "carol"}


def busy_team(free: int = 1, array: int = 200, bob_at: float = 500.0, **snap_fields):
    """Alice's running tasks fill team A's one 8-GPU node but ``free`` GPUs; 200 more of her array are queued,
    submitted before bob's one job (at ``bob_at``)."""
    running = [job(A, owner=ALICE, group=7, node="n1", submitted=0.0) for _ in range(8 - free)]
    tasks = [job(A, owner=ALICE, group=7, submitted=float(i)) for i in range(array)]
    bobs = job(A, owner=BOB, submitted=bob_at)
    snap = snapshot([node("n1", free=free)], [*tasks, bobs], running, now=600.0)
    snap.user_names = dict(NAMES)
    for name, value in snap_fields.items():
        setattr(snap, name, value)
    return snap, tasks, bobs


def test_a_colleagues_single_job_goes_before_a_200_task_array():
    snap, tasks, bobs = busy_team()
    out = decide(snap)
    assert list(out.admit) == [bobs.id]
    wait = out.wait[tasks[0].id]
    assert wait.reason == WaitReason.MEMBER_SHARE
    # Of the 8 GPUs the team holds now (bob's just admitted one included), alice holds 7: 1.75× her equal half.
    assert wait.message.startswith("alice has used 1.8× their share of team Alpha's GPUs lately")
    assert f"bob's job #{bobs.id} goes first (bob: 0.2×)" in wait.message
    assert "use counts half after 1 hour" in wait.message
    assert wait.detail["member_share"] == {
        "user": "alice", "ratio": 1.75, "weight": 1.0, "ahead_job": bobs.id, "ahead_user": "bob",
        "ahead_ratio": 0.25, "half_life_seconds": 3600.0,
    }  # fmt: skip
    assert wait.detail["passed_by"] == WaitReason.CAPACITY and wait.detail["requested"] == 1


def test_without_member_share_the_array_goes_first_in_submission_order():
    snap, tasks, bobs = busy_team(member_share=False)
    out = decide(snap)
    assert list(out.admit) == [tasks[0].id]
    assert out.wait[bobs.id].reason == WaitReason.CAPACITY
    assert all(w.reason != WaitReason.MEMBER_SHARE for w in out.wait.values())


def test_the_free_gpus_are_shared_out_member_by_member():
    # 3 free GPUs, alice's array, bob's and carol's jobs: bob and carol first (no use), then alice's oldest task.
    snap, tasks, bobs = busy_team(free=3)
    carols = job(A, owner=CAROL, submitted=550.0)
    snap.queued.append(carols)
    out = decide(snap)
    assert set(out.admit) == {bobs.id, carols.id, tasks[0].id}


def test_recent_use_counts_too():
    # Nothing runs; bob used 4 GPUs lately, alice nothing: alice's task goes before bob's older job on one free GPU.
    snap, tasks, bobs = busy_team(free=8, bob_at=-1.0)
    snap.nodes["n1"].free[H100.resource_name] = 1
    snap.active = []
    snap.member_average = {(A, BOB): 4.0}
    out = decide(snap)
    assert list(out.admit) == [tasks[0].id]
    assert out.wait[bobs.id].reason == WaitReason.MEMBER_SHARE
    # Use: bob 4 lately, alice the 1 GPU just admitted: 4/5 of the use for half of the weights.
    assert out.wait[bobs.id].message.startswith("bob has used 1.6× their share")


def test_weights_change_the_order():
    # alice holds 7 GPUs now; bob used 4 lately. Equal weights: bob (4) goes before alice (7).
    snap, tasks, bobs = busy_team(member_average={(A, BOB): 4.0})
    assert list(decide(snap).admit) == [bobs.id]
    # Alice's weight 2: 7/2 = 3.5 < 4: her task goes before bob's (older) job, and bob reads the weighted share.
    snap, tasks, bobs = busy_team(bob_at=-1.0, member_average={(A, BOB): 4.0}, member_weights={(A, ALICE): 2.0})
    out = decide(snap)
    assert list(out.admit) == [tasks[0].id]
    wait = out.wait[bobs.id]
    assert wait.reason == WaitReason.MEMBER_SHARE
    # bob: 4 of 12 GPUs used for 1 of 3 weights: exactly his share; alice 8 of 12 for 2 of 3: hers too.
    assert wait.message.startswith("bob has used 1.0× their weighted share of team Alpha's GPUs")
    assert wait.detail["member_share"]["weight"] == 1.0


def test_priority_comes_before_member_share():
    snap, tasks, bobs = busy_team()
    urgent = job(A, owner=ALICE, priority=90, submitted=590.0)
    snap.queued.append(urgent)
    out = decide(snap)
    assert list(out.admit) == [urgent.id]
    # bob's job waits for capacity a higher priority took: that is no teammate going first by fair share.
    assert out.wait[bobs.id].reason == WaitReason.CAPACITY


def test_teams_keep_their_order_and_other_teams_are_not_named():
    # Team B's job waits for its own quota; member share never explains another team's wait.
    snap, tasks, bobs = busy_team()
    other = job(B, owner=CAROL, submitted=100.0)
    snap.queued.append(other)
    snap.quotas[(B, 1)] = QuotaView(0, 0)
    out = decide(snap)
    assert out.wait[other.id].reason == WaitReason.QUOTA


def test_the_team_limit_holds_whatever_the_order():
    # Limit 7: alice's 6 running + bob's admitted; 2 GPUs are free but the rest wait for the quota, the first of
    # alice's tasks told bob went first.
    snap, tasks, bobs = busy_team(free=2)
    snap.quotas[(A, 1)] = QuotaView(7, 7)
    out = decide(snap)
    assert list(out.admit) == [bobs.id]
    wait = out.wait[tasks[0].id]
    assert wait.reason == WaitReason.MEMBER_SHARE and wait.detail["passed_by"] == WaitReason.QUOTA
    assert "holds 7 of its limit of 7" in wait.message


def test_a_job_submitted_before_the_one_that_went_first_is_the_only_one_told():
    # bob's second job, submitted after alice's tasks, waits behind his first: it was not passed by anyone.
    snap, tasks, bobs = busy_team()
    later = job(A, owner=BOB, submitted=520.0)
    snap.queued.append(later)
    out = decide(snap)
    assert list(out.admit) == [bobs.id]
    assert out.wait[later.id].reason == WaitReason.CAPACITY


def test_a_services_replica_view_passes_no_member():
    """A service's replicas above its minimum are views of no one (owner 0, a negative id): admitted before a
    member's job, they are the team's, not a teammate going first, and no member is told "job #-1 goes first"."""
    snap, _, bobs = busy_team(array=0, bob_at=500.0)
    replica = job(A, owner=0, submitted=550.0, id=-1)
    snap.queued = [bobs, replica]
    snap.member_average = {(A, BOB): 5.0}  # bob has used GPUs lately; the replica's "owner" none
    out = decide(snap)
    assert list(out.admit) == [replica.id]  # the team's services go first by the member order, as before
    assert out.wait[bobs.id].reason == WaitReason.CAPACITY
    assert "#-1" not in out.wait[bobs.id].message
