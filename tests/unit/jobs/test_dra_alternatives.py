"""A DRA class's alternatives at admission (issue 33, item 3; jobs.scheduling.decide rule 6), on the pure core: a job
gets the first of its class and the alternatives that passes the gates and fits, in priority order; that class's
quota, shares and devices (counters included) are charged, exactly as for a job submitted for it; nothing acts for an
alternative that did not fit (no reclaim, no starving); and when none fits the wait says why for each."""

from __future__ import annotations

from dataclasses import replace

from jobs.scheduling import estimate
from jobs.scheduling.decide import decide
from jobs.scheduling.dra import WHOLE_GPU, DraDevices, DraGpuRow, mig_resource
from jobs.scheduling.snapshot import ClassView, NodeView, QuotaView, Snapshot
from tests.snapshots import A, B, job
from vocab.mig import product_geometry

A100 = "NVIDIA-A100-SXM4-40GB"
H100 = "NVIDIA-H100-80GB-HBM3"
PROFILES = ("1g.5gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
MIG = {
    p: ClassView(40 + i, mig_resource(p), A100, product_geometry(A100).profile(p).compute / 7, f"A100 {p} (DRA)")
    for i, p in enumerate(PROFILES)
}
#: "A 4g.20gb slice, else a 3g.20gb, else a 2g.10gb."
FOUR = replace(MIG["4g.20gb"], alternatives=(MIG["3g.20gb"].id, MIG["2g.10gb"].id))
H100_WHOLE = ClassView(31, WHOLE_GPU, H100, 1.0, "H100 (DRA)")
A100_WHOLE = ClassView(32, WHOLE_GPU, A100, 1.0, "A100 (DRA)")
#: "An H100, else an A100."
H100_ELSE_A100 = replace(H100_WHOLE, alternatives=(A100_WHOLE.id,))
CLASSES = {c.id: c for c in (*MIG.values(), FOUR, H100_ELSE_A100, A100_WHOLE)}
BOUNDS = estimate.Bounds(horizon_s=48 * 3600.0, max_steps=500, step_s=60.0, grace_s=60.0)


def dynamic_a100(gpus: int = 1) -> DraDevices:
    return DraDevices.of(A100, [DraGpuRow(partitionable=True, profiles=PROFILES)] * gpus)


def dra_node(name: str, devices: DraDevices) -> NodeView:
    return NodeView(
        name=name, product_label=devices.product_label, team=None, schedulable=True,
        allocatable=devices.allocatable(), free=devices.free(), cpu_free_m=128_000, memory_free_mb=1_000_000,
        cpu_capacity_m=128_000, memory_capacity_mb=1_000_000, dra=devices,
    )  # fmt: skip


def snap(nodes, queued, active=(), quotas=None) -> Snapshot:
    everyone = {(team, c): QuotaView(64, 64) for team in (A, B) for c in CLASSES}
    return Snapshot(
        now=1000.0, nodes={n.name: n for n in nodes}, classes=CLASSES, quotas=everyone | (quotas or {}),
        queued=list(queued), active=list(active), team_names={A: "Alpha", B: "Beta"},
    )  # fmt: skip


def wants(cls: ClassView, **kw):
    """A queued job of ``cls`` whose pods the portal pins (so its class's alternatives may serve it)."""
    return job(cls=cls, alternatives=True, **kw)


def test_the_first_choice_that_fits_is_taken_and_its_devices_counted():
    # A 3g.20gb held at slices 0-3 leaves room for a 3g.20gb (4-7) but not a 4g.20gb.
    held = dynamic_a100().holding({mig_resource("3g.20gb"): 1})
    asked = wants(FOUR, submitted=1)
    after = job(cls=MIG["3g.20gb"], submitted=2)
    out = decide(snap([dra_node("a100", held)], [asked, after], [job(cls=MIG["3g.20gb"], node="a100")]))
    assert out.admit[asked.id] == ("a100", False)
    assert out.served_by == {asked.id: MIG["3g.20gb"].id}
    # The counters it took are gone: the 3g.20gb submitted next has no room.
    assert out.wait[after.id].reason == "capacity"


def test_its_own_class_goes_first_when_it_fits():
    asked = wants(FOUR)
    out = decide(snap([dra_node("a100", dynamic_a100())], [asked]))
    assert asked.id in out.admit and out.served_by == {}


def test_a_job_the_scheduler_places_is_never_served_by_an_alternative():
    held = dynamic_a100().holding({mig_resource("3g.20gb"): 1})
    replica = job(cls=FOUR)  # alternatives=False: a service's replicas
    out = decide(snap([dra_node("a100", held)], [replica], [job(cls=MIG["3g.20gb"], node="a100")]))
    assert replica.id not in out.admit and out.served_by == {} and "alternatives" not in out.wait[replica.id].detail


def test_the_alternative_s_quota_is_charged():
    # Alpha's 4g.20gb quota is spent; its 3g.20gb quota has room for one.
    quotas = {(A, FOUR.id): QuotaView(0, 0), (A, MIG["3g.20gb"].id): QuotaView(1, 1)}
    first = wants(FOUR, submitted=1)
    second = wants(FOUR, submitted=2)
    out = decide(snap([dra_node("a100", dynamic_a100(2))], [first, second], quotas=quotas))
    assert out.served_by[first.id] == MIG["3g.20gb"].id
    # The second: no 4g.20gb quota, the 3g.20gb quota now used by the first, and the 2g.10gb fits: it gets that.
    assert out.served_by[second.id] == MIG["2g.10gb"].id


def test_when_none_fits_the_job_waits_for_its_own_class_and_says_why_for_each():
    full = dynamic_a100().holding({mig_resource("7g.40gb"): 1})
    quotas = {(A, MIG["2g.10gb"].id): QuotaView(0, 0)}
    asked = wants(FOUR)
    out = decide(snap([dra_node("a100", full)], [asked], [job(cls=MIG["7g.40gb"], node="a100")], quotas))
    wait = out.wait[asked.id]
    assert wait.reason == "capacity" and not out.admit
    assert wait.detail["alternatives"] == [
        {"class": MIG["3g.20gb"].id, "name": "A100 3g.20gb (DRA)", "reason": "no room on any node now"},
        {"class": MIG["2g.10gb"].id, "name": "A100 2g.10gb (DRA)", "reason": "team quota"},
    ]
    assert wait.message.endswith(
        "Its alternatives could not serve it either (A100 3g.20gb (DRA): no room on any node now; "
        "A100 2g.10gb (DRA): team quota)."
    )


def test_reclaim_acts_for_its_own_class_only_when_no_alternative_fits():
    quotas = {(A, H100_ELSE_A100.id): QuotaView(8, 8), (B, H100_ELSE_A100.id): QuotaView(0, 8)}
    h100 = DraDevices.of(H100, [DraGpuRow()] * 8).holding({WHOLE_GPU: 8})
    borrower = job(team=B, cls=H100_ELSE_A100, count=8, node="h0", borrowed=True, preemptible=True)
    a100 = DraDevices.of(A100, [DraGpuRow()] * 4)
    guaranteed = wants(H100_ELSE_A100, count=4)
    # Four A100s are free: it runs there, and nobody is preempted.
    out = decide(snap([dra_node("h0", h100), dra_node("a0", a100)], [guaranteed], [borrower], quotas))
    assert out.served_by == {guaranteed.id: A100_WHOLE.id} and out.admit[guaranteed.id] == ("a0", False)
    assert out.preempt == {}
    # No A100 to spare: it reclaims the borrowed H100s for its own class.
    busy = a100.holding({WHOLE_GPU: 4})
    active = [borrower, job(team=B, cls=A100_WHOLE, count=4, node="a0")]
    out = decide(snap([dra_node("h0", h100), dra_node("a0", busy)], [guaranteed], active, quotas))
    assert out.preempt == {borrower.id: guaranteed.id} and out.wait[guaranteed.id].reason == "reclaiming"


def test_a_gang_gets_one_class_on_every_rank():
    h100 = DraDevices.of(H100, [DraGpuRow()] * 8)
    a100 = DraDevices.of(A100, [DraGpuRow()] * 8)
    nodes = [dra_node("h0", h100), dra_node("a0", a100), dra_node("a1", a100)]
    gang = wants(H100_ELSE_A100, count=8, workers=2)
    out = decide(snap(nodes, [gang]))
    assert out.served_by == {gang.id: A100_WHOLE.id} and sorted(out.ranks[gang.id]) == ["a0", "a1"]


def test_start_estimates_hand_back_the_class_an_alternative_served():
    quotas = {(A, A100_WHOLE.id): QuotaView(8, 8)}
    h100 = DraDevices.of(H100, [DraGpuRow()] * 8).holding({WHOLE_GPU: 8})
    a100 = DraDevices.of(A100, [DraGpuRow()] * 16)
    busy = job(team=B, cls=H100_ELSE_A100, count=8, node="h0", nodes=("h0",), submitted=0)
    first = wants(H100_ELSE_A100, count=8, submitted=10)
    then = job(cls=A100_WHOLE, count=8, submitted=20)
    state = replace(snap([dra_node("h0", h100), dra_node("a0", a100)], [first, then], [busy], quotas), now=1000.0)
    ends = {busy.id: 1000.0 + 7200}
    found = estimate.starts(state, lambda view: ends[view.id], lambda view: 600.0, BOUNDS)
    # The first starts now on the A100s, charged to the A100 quota; the next A100 job when it ends and gives it back.
    assert found == {first.id: 1000.0, then.id: 1000.0 + 600}
