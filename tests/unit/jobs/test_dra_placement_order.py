"""Dynamic MIG: what admission places in one cycle fits whatever order the allocator meets the claims in (issue 33,
item 3). kube-scheduler allocates each pod's claims on its own, in no order the portal chooses, and a claim cannot
name the placement admission picked (the driver's placement devices carry no attribute telling their start), so a
GPU's instances not yet allocated count as fitting only if they fit in every order; allocated ones (the portal's
and other claims') stay where the inventory saw them."""

from __future__ import annotations

import itertools

from jobs.scheduling.decide import decide
from jobs.scheduling.dra import MIXED_PENDING, WHOLE, WHOLE_GPU, DraDevices, DraGpuRow, mig_resource
from tests.snapshots import job
from tests.unit.jobs.test_dra_admission import A100, MIG, PROFILES, dra_node, dynamic_a100, snap
from vocab.mig import product_geometry


def first_fit(order: list[str], gpus: int = 1) -> bool:
    """Whether instances of the profiles of ``order``, allocated one after another at the lowest GPU and start
    each fits (the simulator's allocator, kube-scheduler's walk of a slice's devices), all fit."""
    devices = dynamic_a100(gpus)
    for profile in order:
        after = devices._carve(profile, checked=False)
        if after is None:
            return False
        devices = after
    return True


def test_a_4g_and_a_3g_are_not_admitted_together_onto_one_gpu_the_3g_could_take_first():
    # 4g.20gb at slice 0 and 3g.20gb at slice 4 fit; allocated 3g first (at slice 0, its lowest start), the 4g has
    # nowhere to go and its pod stays Pending. One waits for the next cycle.
    four, three = job(cls=MIG["4g.20gb"], submitted=1), job(cls=MIG["3g.20gb"], submitted=2)
    out = decide(snap([dra_node("a100", dynamic_a100())], [four, three]))
    assert four.id in out.admit and out.wait[three.id].reason == "capacity"
    assert not first_fit(["3g.20gb", "4g.20gb"])


def test_once_the_4g_is_allocated_the_3g_fits_beside_it():
    # The inventory saw the portal's 4g.20gb allocated at slice 0: it is pinned, and the 3g.20gb can only go to 4.
    devices = DraDevices.of(A100, [DraGpuRow(partitionable=True, profiles=PROFILES, placed=(("4g.20gb", 0),))])
    held = devices.holding({mig_resource("4g.20gb"): 1})
    assert held.free()[mig_resource("3g.20gb")] == 1
    three = job(cls=MIG["3g.20gb"])
    out = decide(snap([dra_node("a100", held)], [three], [job(cls=MIG["4g.20gb"], node="a100")]))
    assert three.id in out.admit


def test_what_is_admitted_together_fits_in_every_order():
    """Any two or three queued instances on one or two GPUs: those admitted in one cycle fit whichever the
    allocator meets first."""
    for gpus, n in ((1, 2), (1, 3), (2, 3)):
        for profiles in itertools.combinations_with_replacement(PROFILES, n):
            jobs = [job(cls=MIG[p], submitted=i) for i, p in enumerate(profiles)]
            out = decide(snap([dra_node("a100", dynamic_a100(gpus))], jobs))
            admitted = [p for j, p in zip(jobs, profiles, strict=True) if j.id in out.admit]
            assert admitted, profiles
            for order in set(itertools.permutations(admitted)):
                assert first_fit(list(order), gpus), (gpus, profiles, order)


def test_seven_small_instances_still_share_a_gpu():
    # Instances that fit in any order are admitted together: the rule costs nothing where order cannot matter.
    jobs = [job(cls=MIG["1g.5gb"], submitted=i) for i in range(7)]
    out = decide(snap([dra_node("a100", dynamic_a100())], jobs))
    assert all(j.id in out.admit for j in jobs)
    assert product_geometry(A100).profile("1g.5gb").size == 1


def test_a_whole_gpu_and_instances_pending_together_fit_either_way():
    devices = dynamic_a100(2).taking(WHOLE_GPU, 1)
    assert devices.free()[mig_resource("7g.40gb")] == 1 and devices.free()[WHOLE_GPU] == 1
    assert devices.gpus[0].taken == ((WHOLE, 0),)


def test_instances_of_one_profile_pend_in_any_number_of_several_profiles_a_few():
    # Alike instances cannot be met in a wrong order: all 56 1g.5gb of eight GPUs are counted. Of several profiles
    # every order is checked, so only MIXED_PENDING of them pend at once; the rest wait for the inventory to see
    # them allocated.
    eight = dynamic_a100(8)
    assert eight.free()[mig_resource("1g.5gb")] == 56
    ones = eight.taking(mig_resource("1g.5gb"), 20)
    assert ones.over == () and ones.free()[mig_resource("1g.5gb")] == 36
    assert ones.free()[mig_resource("3g.20gb")] == 0
    mixed = eight.taking(mig_resource("1g.5gb"), 2).taking(mig_resource("2g.10gb"), 1)
    assert mixed.free()[mig_resource("3g.20gb")] == MIXED_PENDING - 3
    allocated = [DraGpuRow(partitionable=True, profiles=PROFILES, placed=(("1g.5gb", 0), ("1g.5gb", 1)))] * 8
    seen = DraDevices.of(A100, allocated).holding({mig_resource("1g.5gb"): 16})
    assert seen.free()[mig_resource("3g.20gb")] == 8
