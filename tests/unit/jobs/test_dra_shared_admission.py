"""Admission counts a shared DRA class as it counts a device plugin's time-sliced units (issue 33, item 3): a unit is
1/replicas of a device, quota counts the units asked for, and placement counts the devices the workloads' claims
hold: a claim is one workload's, so each workload's units on a node take whole devices (ceil(units / replicas)),
taken from the same devices the whole-GPU class counts. Pure Python over hand-built snapshots."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from jobs.scheduling.decide import decide
from jobs.scheduling.dra import (
    WHOLE_GPU,
    DraDevices,
    DraGpuRow,
    base_of,
    devices_for,
    held_units,
    mig_resource,
    profile_of,
    replicas_of,
    shared_resource,
)
from jobs.scheduling.snapshot import ClassView, NodeView, QuotaView, Snapshot
from tests.snapshots import A, B, job

H100 = "NVIDIA-H100-80GB-HBM3"
A100 = "NVIDIA-A100-SXM4-40GB"
TS4 = shared_resource(WHOLE_GPU, "time-slicing", 4)
MPS7 = shared_resource(mig_resource("1g.5gb"), "mps", 7)
WHOLE = ClassView(11, WHOLE_GPU, H100, 1.0, "H100 (DRA)")
SHARED = ClassView(12, TS4, H100, 0.25, "H100 · 1/4 time-sliced (DRA)")
CLASSES = {c.id: c for c in (WHOLE, SHARED)}


def h100s(gpus: int) -> DraDevices:
    return DraDevices.of(H100, [DraGpuRow()] * gpus, shared=[TS4])


def node(name: str, devices: DraDevices) -> NodeView:
    return NodeView(
        name=name, product_label=H100, team=None, schedulable=True, allocatable=devices.allocatable(),
        free=devices.free(), cpu_free_m=128_000, memory_free_mb=1_000_000, cpu_capacity_m=128_000,
        memory_capacity_mb=1_000_000, dra=devices,
    )  # fmt: skip


def snap(nodes, queued, active=(), quotas=None) -> Snapshot:
    everyone = {(team, c): QuotaView(64, 64) for team in (A, B) for c in CLASSES}
    return Snapshot(
        now=1000.0, nodes={n.name: n for n in nodes}, classes=CLASSES, quotas=everyone | (quotas or {}),
        queued=list(queued), active=list(active), team_names={A: "Alpha", B: "Beta"},
    )  # fmt: skip


def test_the_shared_resource_names_its_base_and_replicas():
    assert TS4 == "dra:gpu.nvidia.com~time-slicing*4"
    assert MPS7 == "dra:mig.nvidia.com/1g.5gb~mps*7"
    assert (base_of(MPS7), replicas_of(MPS7), profile_of(MPS7)) == (mig_resource("1g.5gb"), 7, "1g.5gb")
    assert (base_of(WHOLE_GPU), replicas_of(WHOLE_GPU)) == (WHOLE_GPU, 1)
    assert [devices_for(TS4, units) for units in (1, 4, 5, 8, 9)] == [1, 1, 2, 2, 3]
    assert [held_units(TS4, units) for units in (1, 4, 5)] == [4, 4, 8]
    assert held_units(WHOLE_GPU, 3) == 3


def test_a_node_offers_replicas_units_per_free_device_and_a_workload_takes_whole_devices():
    devices = h100s(2)
    assert devices.allocatable() == {WHOLE_GPU: 2, TS4: 8}
    one = devices.taking(TS4, 3)  # one workload's 3 pods share one claim's device
    assert one.free() == {WHOLE_GPU: 1, TS4: 4}
    two = one.taking(TS4, 1)  # another workload's pod has a claim, and a device, of its own
    assert two.free() == {WHOLE_GPU: 0, TS4: 0}
    assert two.giving_back(TS4, 1).free() == one.free() and two.giving_back(TS4, 1).giving_back(TS4, 3).free() == {
        WHOLE_GPU: 2, TS4: 8}  # fmt: skip
    # What the portal's work holds is summed per node as held_units, so each workload's claim keeps its device.
    assert devices.holding({TS4: held_units(TS4, 3) + held_units(TS4, 1)}).free() == two.free()
    # A shared resource whose base the node does not offer is not offered either.
    assert TS4 not in DraDevices.of(A100, [DraGpuRow(static=("3g.20gb",))], shared=[TS4]).free()


def test_a_workloads_pods_share_one_device_and_another_workload_needs_its_own():
    service = job(
        cls=SHARED, count=4, submitted=1
    )  # 4 replicas on one claim (admit.py: a shared class's pods go together)
    batch = job(cls=SHARED, count=1, submitted=2)
    out = decide(snap([node("h0", h100s(1))], [service, batch]))
    assert out.admit[service.id] == ("h0", False)
    assert out.wait[batch.id].reason == "capacity"
    out = decide(snap([node("h0", h100s(2))], [service, batch]))
    assert service.id in out.admit and batch.id in out.admit


def test_quota_counts_units_of_a_quarter_device():
    quotas = {(A, SHARED.id): QuotaView(guaranteed=4, limit=4)}
    first = job(cls=SHARED, count=3, submitted=1)
    second = job(cls=SHARED, count=1, submitted=2)
    third = job(cls=SHARED, count=1, submitted=3)
    out = decide(snap([node("h0", h100s(8))], [first, second, third], quotas=quotas))
    assert first.id in out.admit and second.id in out.admit
    assert out.wait[third.id].reason == "quota"
    assert out.wait[third.id].detail == {"requested": 1, "in_use": 4, "guaranteed": 4, "limit": 4}


def test_whole_gpus_and_shares_come_from_the_same_devices():
    whole = job(cls=WHOLE, count=1, submitted=1)
    shared = job(cls=SHARED, count=2, submitted=2)
    late = job(cls=WHOLE, count=1, submitted=3)
    out = decide(snap([node("h0", h100s(2))], [whole, shared, late]))
    assert whole.id in out.admit and shared.id in out.admit
    assert out.wait[late.id].reason == "capacity"
    # Work already running is counted before the queue: the shared claim's device is taken.
    held = h100s(2).holding({TS4: held_units(TS4, 1)})
    out = decide(snap([node("h0", held)], [late, job(cls=WHOLE, count=1, submitted=4)],
                      [job(cls=SHARED, count=1, node="h0")]))  # fmt: skip
    assert late.id in out.admit and len(out.admit) == 1


@given(st.lists(st.integers(min_value=1, max_value=9), max_size=8), st.integers(min_value=1, max_value=8))
def test_each_workload_holds_the_whole_devices_its_claims_need(workloads, gpus):
    devices = h100s(gpus)
    for units in workloads:
        devices = devices.taking(TS4, units)
    held = sum(devices_for(TS4, units) for units in workloads)
    assert devices.free()[WHOLE_GPU] == gpus - held
    assert devices.free()[TS4] == (gpus - held) * 4
    for units in reversed(workloads):
        devices = devices.giving_back(TS4, units)
    assert devices.free() == h100s(gpus).free()
