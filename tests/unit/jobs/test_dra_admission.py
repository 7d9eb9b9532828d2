"""Admission counts DRA devices exactly as device-plugin units (issue 33, item 3): whole GPUs and static MIG devices
one unit each; dynamic MIG through the GPU's counters, so taking one profile lowers what the others (and the whole
GPU) have at once, within the cycle. Quota, gangs, reclaim and the wait sentences are the device plugin's. Pure
Python over hand-built snapshots; the counter model is checked against the counters of the simulated driver's
slices (gpus.dra_inventory over real ResourceSlices)."""

from __future__ import annotations

import itertools
import tempfile
import time
from functools import cache
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.sim import SimulatedCluster
from gpus.dra_inventory import node_inventories
from jobs.scheduling.decide import decide
from jobs.scheduling.dra import WHOLE_GPU, DraDevices, DraGpuRow, mig_resource
from jobs.scheduling.snapshot import ClassView, NodeView, QuotaView, Snapshot
from tests.dra_objects import DRA_SMALL
from tests.snapshots import A, B, job
from vocab.mig import place, product_geometry

A100 = "NVIDIA-A100-SXM4-40GB"
H100 = "NVIDIA-H100-80GB-HBM3"
PROFILES = ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
#: The DRA classes as admission sees them (jobs.cycle.admit.class_views): one resource per device class and profile.
H100_WHOLE = ClassView(11, WHOLE_GPU, H100, 1.0, "H100 (DRA)")
A100_WHOLE = ClassView(12, WHOLE_GPU, A100, 1.0, "A100 (DRA)")
MIG = {
    p: ClassView(20 + i, mig_resource(p), A100, product_geometry(A100).profile(p).compute / 7, f"A100 {p} (DRA)")
    for i, p in enumerate(PROFILES)
}
CLASSES = {c.id: c for c in (H100_WHOLE, A100_WHOLE, *MIG.values())}


def dynamic_a100(gpus: int = 1) -> DraDevices:
    return DraDevices.of(A100, [DraGpuRow(partitionable=True, profiles=PROFILES)] * gpus)


def dra_node(name: str, devices: DraDevices, cpu: int = 128_000, **extra) -> NodeView:
    return NodeView(
        name=name, product_label=devices.product_label, team=None, schedulable=True,
        allocatable=devices.allocatable(), free=devices.free(), cpu_free_m=cpu, memory_free_mb=1_000_000,
        cpu_capacity_m=cpu, memory_capacity_mb=1_000_000, dra=devices, **extra,
    )  # fmt: skip


def snap(nodes, queued, active=(), quotas=None, now=1000.0) -> Snapshot:
    everyone = {(team, c): QuotaView(64, 64) for team in (A, B) for c in CLASSES}
    return Snapshot(
        now=now, nodes={n.name: n for n in nodes}, classes=CLASSES, quotas=everyone | (quotas or {}),
        queued=list(queued), active=list(active), team_names={A: "Alpha", B: "Beta"},
    )  # fmt: skip


# -- the counting -------------------------------------------------------------------------------------------------


def test_whole_gpus_count_one_unit_each_and_a_tainted_one_none():
    taint = ({"key": "example.com/xid", "value": "79", "effect": "NoSchedule"},)
    marked = ({"key": "example.com/note", "effect": "None"},)
    devices = DraDevices.of(H100, [DraGpuRow()] * 6 + [DraGpuRow(taints=taint), DraGpuRow(taints=marked)])
    assert devices.allocatable() == devices.free() == {WHOLE_GPU: 7}
    taken = devices.taking(WHOLE_GPU, 5)
    assert taken.free() == {WHOLE_GPU: 2} and devices.free() == {WHOLE_GPU: 7}  # a value: the original is unchanged
    assert taken.taking(WHOLE_GPU, 3).free() == {WHOLE_GPU: -1}  # more than there is counts against it, as units do
    assert taken.taking(WHOLE_GPU, 3).giving_back(WHOLE_GPU, 3).free() == {WHOLE_GPU: 2}


def test_static_mig_devices_count_as_they_exist_and_their_gpus_are_not_whole():
    rows = [DraGpuRow(static=("3g.20gb", "2g.10gb", "1g.5gb")), DraGpuRow(static=("3g.20gb", "3g.20gb")), DraGpuRow()]
    devices = DraDevices.of(A100, rows)
    assert devices.allocatable() == {
        WHOLE_GPU: 1, mig_resource("3g.20gb"): 3, mig_resource("2g.10gb"): 1, mig_resource("1g.5gb"): 1,
    }  # fmt: skip
    # Static devices are independent of each other: taking the 3g.20gb devices leaves the others as they were.
    free = devices.taking(mig_resource("3g.20gb"), 3).free()
    assert free == {WHOLE_GPU: 1, mig_resource("3g.20gb"): 0, mig_resource("2g.10gb"): 1, mig_resource("1g.5gb"): 1}


def test_dynamic_mig_counts_what_could_be_carved_and_taking_one_profile_lowers_the_others():
    devices = dynamic_a100()
    assert devices.free() == {
        WHOLE_GPU: 1, mig_resource("1g.5gb"): 7, mig_resource("1g.5gb+me"): 1, mig_resource("1g.10gb"): 4,
        mig_resource("2g.10gb"): 3, mig_resource("3g.20gb"): 2, mig_resource("4g.20gb"): 1, mig_resource("7g.40gb"): 1,
    }  # fmt: skip
    # A 3g.20gb takes memory slices 0-3 (the lowest start, where the allocator puts it): one more 3g.20gb fits,
    # the 4g.20gb (it starts only at 0), the 7g.40gb and the whole GPU no longer do; three 1g.5gb do.
    three = devices.taking(mig_resource("3g.20gb"), 1)
    free = three.free()
    assert (free[mig_resource("3g.20gb")], free[mig_resource("4g.20gb")], free[mig_resource("7g.40gb")]) == (1, 0, 0)
    assert (free[WHOLE_GPU], free[mig_resource("1g.5gb")], free[mig_resource("2g.10gb")]) == (0, 3, 1)
    # The whole GPU takes every counter; handing it back leaves the GPU as it was.
    whole = devices.taking(WHOLE_GPU, 1)
    assert set(whole.free().values()) == {0}
    assert whole.giving_back(WHOLE_GPU, 1) == devices
    # One media-extensions set per GPU: a 1g.5gb+me leaves no other; compute slices bound the 1g.5gb at 7.
    # (Allocated, so that what is left is the counters' answer, not the limit on instances not yet allocated.)
    row = DraGpuRow(partitionable=True, profiles=PROFILES, placed=(("1g.5gb+me", 0),))
    me = DraDevices.of(A100, [row]).holding({mig_resource("1g.5gb+me"): 1}).free()
    assert me[mig_resource("1g.5gb+me")] == 0 and me[mig_resource("1g.5gb")] == 6


def test_what_the_portal_holds_is_placed_largest_first():
    # A 4g.20gb and three 1g.5gb held on one GPU fit (4g at 0-3, 1g at 4, 5, 6) whatever order they were admitted in.
    held = dynamic_a100().holding({mig_resource("1g.5gb"): 3, mig_resource("4g.20gb"): 1})
    assert held.over == () and held.free()[mig_resource("1g.5gb")] == 0
    # More than the GPU holds is counted against what is free, not dropped.
    over = dynamic_a100().holding({mig_resource("3g.20gb"): 3})
    assert over.free()[mig_resource("3g.20gb")] == -1


@cache
def _a100_slices() -> tuple[list[dict], dict[tuple[int, str, int], str]]:
    """The simulated driver's slices for DRA_SMALL's dynamic-MIG A100 node (2 GPUs), and the placement devices by
    (GPU minor, profile, start)."""
    scenario = {
        **DRA_SMALL,
        "nodes": [{**DRA_SMALL["nodes"][2], "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 2}}],
    }
    sim = SimulatedCluster(Path(tempfile.mkdtemp()) / "dra.json", scenario=scenario, clock=time.time)
    slices = sim.list_resource_slices()
    names = {}
    for s in slices:
        for device in s["spec"].get("devices") or []:
            attributes = device["attributes"]
            if attributes["type"]["string"] == "mig" and device.get("consumesCounters"):
                minor, start = int(device["name"].split("-")[1]), int(device["name"].rsplit("-", 1)[1])
                names[(minor, attributes["profile"]["string"], start)] = device["name"]
    return slices, names


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from((WHOLE_GPU, *(mig_resource(p) for p in PROFILES))), max_size=12))
def test_the_counter_model_agrees_with_the_driver_s_counters(takes):
    """Whatever is taken, one unit after another, what each GPU could still carve of every profile is what the
    counters of the driver's slices say once the same devices are allocated (gpus.dra_inventory)."""
    slices, names = _a100_slices()
    devices = dynamic_a100(2)
    for name in takes:
        if devices.free()[name] > 0:
            devices = devices.taking(name, 1)
    results = []
    for minor, gpu in enumerate(devices.gpus):
        for profile, start in gpu.taken:
            device = f"gpu-{minor}" if profile == "" else names[(minor, profile, start)]
            results.append({"driver": "gpu.nvidia.com", "pool": "dra-a100", "device": device})
    claim = {"status": {"allocation": {"devices": {"results": results}}}}
    inventory = node_inventories(slices, [claim])["dra-a100"]
    for gpu, seen in zip(devices.gpus, inventory.gpus, strict=True):
        mine = {p: len(gpu.starts(A100, p)) for p in PROFILES}
        theirs = {p: 0 if seen.allocated else seen.carvable[p] for p in PROFILES}
        assert mine == theirs
        assert (not gpu.taken) == seen.whole_free


# -- admission over DRA nodes -------------------------------------------------------------------------------------


def test_two_jobs_are_never_admitted_onto_counters_only_one_can_get():
    # Before either is placed, the GPU could carve a 3g.20gb and a 4g.20gb; not both.
    three = job(cls=MIG["3g.20gb"], submitted=901)
    four = job(cls=MIG["4g.20gb"], submitted=902)
    two_more = job(cls=MIG["3g.20gb"], count=2, submitted=903)
    out = decide(snap([dra_node("a100", dynamic_a100())], [three, four, two_more]))
    assert out.admit[three.id] == ("a100", False)
    assert out.wait[four.id].reason == "capacity" and out.wait[two_more.id].reason == "capacity"
    # The sentence is the device plugin's, in the class's name.
    assert out.wait[four.id].message == (
        "All A100 4g.20gb (DRA) capacity that fits is taken: it needs 1 on one node; the most free on any node is 0 "
        "(0 free in total). Position 1 in the queue for this class."
    )
    assert out.wait[two_more.id].detail["largest_free_on_a_node"] == 1


def test_the_whole_gpu_and_its_partitions_exclude_each_other():
    small = job(cls=MIG["1g.5gb"], submitted=1)
    whole = job(cls=A100_WHOLE, submitted=2)
    out = decide(snap([dra_node("a100", dynamic_a100())], [small, whole]))
    assert small.id in out.admit and out.wait[whole.id].reason == "capacity"
    # With two GPUs the whole one goes to the GPU nothing was carved from.
    out = decide(snap([dra_node("a100", dynamic_a100(2))], [small, whole]))
    assert small.id in out.admit and whole.id in out.admit


def test_what_active_work_holds_is_counted_before_the_queue():
    devices = dynamic_a100().holding({mig_resource("4g.20gb"): 1})
    queued = job(cls=MIG["3g.20gb"], count=2)
    out = decide(snap([dra_node("a100", devices)], [queued], [job(cls=MIG["4g.20gb"], node="a100")]))
    assert out.wait[queued.id].reason == "capacity"


def test_a_gang_of_dra_gpus_takes_every_rank_on_its_own_node_or_waits_whole():
    nodes = [dra_node(f"h{i}", DraDevices.of(H100, [DraGpuRow()] * 8)) for i in range(2)]
    gang = job(cls=H100_WHOLE, count=8, workers=2, submitted=1)
    after = job(cls=H100_WHOLE, count=1, submitted=2)
    out = decide(snap(nodes, [gang, after]))
    assert set(out.ranks[gang.id]) == {"h0", "h1"} and after.id not in out.admit
    three = job(cls=H100_WHOLE, count=8, workers=3)
    out = decide(snap(nodes, [three]))
    assert out.wait[three.id].reason == "never_fits" and not out.admit


def test_a_gang_of_mig_instances_counts_each_rank_on_its_node_s_counters():
    busy = dynamic_a100().holding({mig_resource("4g.20gb"): 1})
    nodes = [dra_node("m0", dynamic_a100()), dra_node("m1", busy), dra_node("m2", dynamic_a100())]
    gang = job(cls=MIG["3g.20gb"], count=2, workers=2)
    out = decide(snap(nodes, [gang]))
    assert sorted(out.ranks[gang.id]) == ["m0", "m2"]  # m1's 4g.20gb leaves room for one 3g.20gb only


def test_nodes_held_for_a_starving_mig_gang_take_no_other_profile_on_their_counters():
    # A 2-rank gang of 2 × 3g.20gb a rank has waited its patience; neither node fits a rank now (m0's 4g.20gb leaves
    # room for one 3g.20gb). Both nodes are held for it, and a 1g.5gb job after it must not take the counters they
    # free towards it: the MIG profiles of a dynamic-MIG GPU share them.
    nodes = [dra_node("m0", dynamic_a100().holding({mig_resource("4g.20gb"): 1})), dra_node("m2", dynamic_a100())]
    gang = job(cls=MIG["3g.20gb"], count=2, workers=2, submitted=0)
    small = job(cls=MIG["1g.5gb"], count=1, submitted=10)
    out = decide(snap(nodes, [gang, small]))
    assert sorted(out.reserved[gang.id]) == ["m0", "m2"]
    assert small.id not in out.admit
    # The next cycle puts them back: without the gang, the small job is placed.
    assert small.id in decide(snap(nodes, [small])).admit


def test_quota_is_held_across_a_dra_class():
    quotas = {(A, MIG["1g.5gb"].id): QuotaView(guaranteed=2, limit=4)}
    active = [job(cls=MIG["1g.5gb"], count=3, node="a100")]
    devices = dynamic_a100(2).holding({mig_resource("1g.5gb"): 3})
    firm = job(cls=MIG["1g.5gb"], count=1, submitted=1)
    flexible = job(cls=MIG["1g.5gb"], count=1, submitted=2, preemptible=True)
    beyond = job(cls=MIG["1g.5gb"], count=1, submitted=3, preemptible=True)
    out = decide(snap([dra_node("a100", devices)], [firm, flexible, beyond], active, quotas))
    assert out.wait[firm.id].reason == "quota" and "only for preemptible jobs" in out.wait[firm.id].message
    assert out.admit[flexible.id] == ("a100", True)
    assert out.wait[beyond.id].reason == "quota"
    assert out.wait[beyond.id].detail == {"requested": 1, "in_use": 4, "guaranteed": 2, "limit": 4}


def test_a_cluster_cap_on_a_dra_class_sends_the_job_to_another_cluster():
    quotas = {(A, MIG["3g.20gb"].id): QuotaView(8, 8, caps={"lab": 1})}
    held = dynamic_a100().holding({mig_resource("3g.20gb"): 1})
    nodes = [dra_node("lab-a100", held, cluster="lab"), dra_node("other-a100", dynamic_a100(), cluster="other")]
    running = job(cls=MIG["3g.20gb"], node="lab-a100", cluster="lab")
    wanted = job(cls=MIG["3g.20gb"], submitted=1)
    # The lab node is the tighter fit, but the team's cap there is reached.
    out = decide(snap(nodes, [wanted], [running], quotas))
    assert out.admit[wanted.id] == ("other-a100", False)


def test_reclaim_stops_a_borrower_of_dra_devices_for_a_guaranteed_job():
    quotas = {(A, H100_WHOLE.id): QuotaView(8, 8), (B, H100_WHOLE.id): QuotaView(0, 8)}
    devices = DraDevices.of(H100, [DraGpuRow()] * 8).holding({WHOLE_GPU: 8})
    borrower = job(team=B, cls=H100_WHOLE, count=8, node="h0", borrowed=True, preemptible=True)
    guaranteed = job(team=A, cls=H100_WHOLE, count=4)
    out = decide(snap([dra_node("h0", devices)], [guaranteed], [borrower], quotas))
    assert out.preempt == {borrower.id: guaranteed.id}
    assert out.wait[guaranteed.id].reason == "reclaiming"


def _fits(geometry, instances: list[str], gpus: int) -> bool:
    """Whether ``instances`` (profiles, "" a whole GPU) can be spread over ``gpus`` GPUs, each holding a layout the
    MIG placement tables allow (vocab.mig.place): the oracle, by search."""
    if instances.count("") > gpus:
        return False
    mig = sorted((p for p in instances if p), key=lambda p: -geometry.profile(p).size)
    layouts = [dict() for _ in range(gpus - instances.count(""))]

    def search(i: int) -> bool:
        if i == len(mig):
            return True
        tried = set()
        for layout in layouts:
            key = tuple(sorted(layout.items()))
            if key in tried:
                continue
            tried.add(key)
            layout[mig[i]] = layout.get(mig[i], 0) + 1
            if place(geometry, layout) is not None and search(i + 1):
                return True
            layout[mig[i]] -= 1
            if not layout[mig[i]]:
                del layout[mig[i]]
        return False

    return search(0)


@settings(max_examples=150, deadline=None)
@given(
    gpus=st.lists(st.integers(1, 2), min_size=1, max_size=3),
    queue=st.lists(
        st.tuples(st.sampled_from(("", *PROFILES)), st.integers(1, 3), st.sampled_from((1, 1, 2)), st.booleans()),
        max_size=14,
    ),
)
def test_admitted_mig_instances_always_fit_their_gpus(gpus, queue):
    """Over random queues of whole-GPU and MIG jobs (gangs too) on dynamic-MIG nodes, what is admitted on each node
    fits its GPUs by the MIG placement tables, and no gang is admitted in part."""
    nodes = [dra_node(f"m{i}", dynamic_a100(n)) for i, n in enumerate(gpus)]
    jobs = [
        job(cls=MIG[p] if p else A100_WHOLE, count=count, workers=workers, submitted=float(i), preemptible=borrow)
        for i, (p, count, workers, borrow) in enumerate(queue)
    ]
    out = decide(snap(nodes, jobs))
    on_node: dict[str, list[str]] = {n.name: [] for n in nodes}
    for j in jobs:
        if j.id in out.admit:
            placed = out.ranks.get(j.id, (out.admit[j.id][0],))
            assert len(set(placed)) == j.workers
            profile = "" if j.class_id == A100_WHOLE.id else CLASSES[j.class_id].resource_name.rsplit("/", 1)[1]
            for name in placed:
                on_node[name] += [profile] * j.count
    geometry = product_geometry(A100)
    for n, count in zip(nodes, gpus, strict=True):
        assert _fits(geometry, on_node[n.name], count), (n.name, on_node[n.name])
    # Every job is either admitted or told why it waits.
    assert set(out.admit) | set(out.wait) == {j.id for j in jobs}


def test_the_snapshot_stays_what_was_observed():
    node = dra_node("a100", dynamic_a100())
    before = (dict(node.free), node.dra)
    decide(snap([node], [job(cls=MIG["3g.20gb"]), job(cls=MIG["1g.5gb"], count=2)]))
    assert (node.free, node.dra) == before


def test_every_pair_of_profiles_on_one_gpu_is_admitted_only_where_the_allocator_could_place_it():
    """The first instance takes the lowest start its profile may use (the device the allocator meets first); the
    second is admitted only when its profile still has a start free beside it, which the placement tables allow."""
    geometry = product_geometry(A100)
    for first, second in itertools.product(PROFILES, repeat=2):
        a, b = job(cls=MIG[first], submitted=1), job(cls=MIG[second], submitted=2)
        out = decide(snap([dra_node("a100", dynamic_a100())], [a, b]))
        assert a.id in out.admit
        if b.id in out.admit:
            assert place(geometry, {first: 1} | {second: (2 if first == second else 1)}) is not None, (first, second)
    # A 1g.10gb at slots 0-1 leaves no room for a 4g.20gb, which may start at 0 only (placed the other way round
    # they would fit, but the allocator does not move a running instance).
    small, four = job(cls=MIG["1g.10gb"], submitted=1), job(cls=MIG["4g.20gb"], submitted=2)
    out = decide(snap([dra_node("a100", dynamic_a100())], [small, four]))
    assert small.id in out.admit and out.wait[four.id].reason == "capacity"


def test_the_benchmark_runs_on_a_small_slice():
    """bench/dra_admission.py on 3 nodes and 60 jobs: both settings decide every job (figures: docs/benchmarks.md)."""
    from argparse import Namespace

    from bench import dra_admission

    args = Namespace(nodes=3, gpus=2, jobs=60, repeat=1, seed=1)
    for dra in (False, True):
        _, admitted, waiting = dra_admission.cycle(dra, args)
        assert admitted + waiting == 60 and admitted > 0
