"""The placement engine (jobs.scheduling.placement): per-GPU milli accounting, the fragmentation measure, the policies'
choices on small hand-built clusters, and accounting invariants on random workloads. Pure Python."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduling.placement import (
    POLICIES,
    POLICY_FGD,
    POLICY_PORTAL,
    WHOLE,
    Demand,
    Node,
    Placer,
    Workload,
    after,
    fits,
    fragment,
)


def gpu_node(name, gpus, model="V100", cpu=64_000, memory=256_000):
    return Node(name, model, list(gpus), cpu, memory)


def share(milli, cpu=1000, memory=1000, models=()):
    return Demand(1, milli, cpu, memory, frozenset(models))


def whole(count, cpu=1000, memory=1000, models=()):
    return Demand(count, WHOLE, cpu, memory, frozenset(models))


def sig(gpus, model="V100", cpu=64_000, memory=256_000):
    return (model, None, cpu, memory, tuple(sorted(gpus)))


def test_a_demand_is_whole_gpus_or_one_share():
    with pytest.raises(ValueError, match="whole GPUs, or a share of one GPU"):
        Demand(2, 500)
    with pytest.raises(ValueError):
        Demand(1, 0)
    assert Demand(1, 250).gpu_milli == 250 and Demand(4).gpu_milli == 4000 and Demand().gpu_milli == 0


def test_fragment_is_the_free_milli_a_task_cannot_use():
    state = sig([300, 1000])
    assert fragment(state, share(500)) == 300  # the 300 left on the first GPU is too small for a 0.5 share
    assert fragment(state, share(200)) == 0  # both GPUs can take a 0.2 share
    assert fragment(state, whole(1)) == 300
    assert fragment(state, whole(2)) == 1300  # does not fit at all: everything free is stranded for it
    assert fragment(state, Demand(0, WHOLE, 1000, 1000)) == 0
    assert fragment(state, share(200, cpu=128_000)) == 1300  # CPU short: the GPUs are stranded too
    assert fragment(state, share(200, models={"T4"})) == 1300  # wrong model
    assert not fits(state, whole(2)) and fits(state, whole(1)) and not fits(state, share(100, memory=10**9))


def test_after_lists_one_state_per_distinct_gpu_choice():
    left = {"cpu": 63_000, "memory": 255_000}  # the demands below take 1 core and 1000 MiB
    assert after(sig([300, 1000, 1000]), share(200)) == [sig([100, 1000, 1000], **left), sig([300, 800, 1000], **left)]
    assert after(sig([300, 1000, 1000]), whole(2)) == [sig([0, 0, 300], **left)]
    assert after(sig([300, 1000]), Demand(0, WHOLE, 4000, 8000)) == [sig([300, 1000], cpu=60_000, memory=248_000)]


def test_shares_pack_onto_one_gpu_and_leave_whole_gpus_whole():
    placer = Placer([gpu_node("n1", [WHOLE, WHOLE])], Workload.from_demands([share(500), whole(1)]))
    first = placer.place(share(500))
    second = placer.place(share(500))
    assert first.gpu_indices == second.gpu_indices
    assert sorted(placer.nodes["n1"].gpu_free) == [0, WHOLE]
    assert placer.place(whole(1)).gpu_indices != first.gpu_indices
    assert placer.nodes["n1"].gpu_free == [0, 0]
    assert placer.place(share(1)) is None


def test_multi_gpu_tasks_take_whole_gpus_on_one_node():
    nodes = [gpu_node("a", [900, WHOLE, WHOLE, WHOLE]), gpu_node("b", [WHOLE] * 4)]
    placer = Placer(nodes, Workload.from_demands([whole(4)]))
    choice = placer.place(whole(4))
    assert choice.node == "b" and sorted(choice.gpu_indices) == [0, 1, 2, 3]
    assert placer.place(whole(4)) is None  # 3.9 GPUs free on "a", but not 4 whole ones
    choice = placer.place(whole(3))
    assert choice.node == "a" and sorted(choice.gpu_indices) == [1, 2, 3]
    assert placer.nodes["a"].gpu_free == [900, 0, 0, 0]


def test_model_constraints_cpu_and_memory_are_honoured():
    nodes = [gpu_node("v100", [WHOLE] * 2), gpu_node("t4", [WHOLE] * 2, model="T4", cpu=8000, memory=32_000)]
    placer = Placer(nodes, Workload.from_demands([whole(1)]))
    assert placer.place(whole(1, models={"T4"})).node == "t4"
    assert placer.place(whole(1, cpu=16_000, models={"T4"})) is None  # only 7 cores left there
    assert placer.place(whole(1, memory=40_000)).node == "v100"
    assert placer.place(whole(1, models={"T4", "A10"})).node == "t4"
    assert placer.place(whole(1, models={"T4"})) is None
    assert placer.nodes["t4"].cpu_free_m == 6000 and placer.nodes["t4"].memory_free_mb == 30_000


@pytest.mark.parametrize("policy", [POLICY_FGD, POLICY_PORTAL])
def test_fragmentation_aware_policies_keep_a_whole_gpu_for_whole_gpu_tasks(policy):
    # Half the tasks want a whole GPU, half a 0.5 share. A new share goes next to the other half-used GPU
    # (which then fills up), not onto a whole GPU that a 1-GPU task could have used.
    workload = Workload.from_demands([whole(1), share(500)])
    nodes = [gpu_node("busy", [500]), gpu_node("empty", [WHOLE])]
    placer = Placer(nodes, workload, policy=policy)
    assert placer.place(share(500)).node == "busy"
    assert placer.place(whole(1)).node == "empty"


def test_fgd_avoids_the_node_a_share_would_strand():
    # 0.6 shares are the common task. On "a" (0.7 free) a 0.3 share leaves 0.4: too small for a 0.6 share.
    # On "b" (0.9 free) it leaves 0.6, exactly one more 0.6 share. Best fit would pick "a"; FGD picks "b".
    workload = Workload([(share(600), 0.9), (share(300), 0.1)])
    nodes = [gpu_node("a", [700]), gpu_node("b", [900])]
    assert Placer(nodes, workload, policy=POLICY_FGD).choose(share(300)).node == "b"
    assert Placer(nodes, workload, policy="bestfit").choose(share(300)).node == "a"


def test_scarce_models_weigh_more_in_the_workload():
    tasks = [whole(1), whole(1, models={"T4"})]
    plain = dict(Workload.from_demands(tasks).types)
    scarce = dict(Workload.from_demands(tasks, pools={"T4": 2, "V100": 6}).types)
    assert plain[whole(1)] == pytest.approx(0.5)
    assert scarce[whole(1, models={"T4"})] == pytest.approx(0.8)  # weight 8/2 = 4 against 1
    assert sum(scarce.values()) == pytest.approx(1.0)
    top = Workload.from_demands([whole(1)] * 9 + [share(100)], coverage=0.9).types
    assert [d for d, _ in top] == [whole(1)]


def test_nodes_in_the_same_state_are_one_group_and_regroup_when_changed():
    nodes = [gpu_node(f"n{i}", [WHOLE] * 8) for i in range(100)]
    placer = Placer(nodes, Workload.from_demands([whole(1)]))
    assert len(placer.groups) == 1
    placer.place(whole(1))
    assert sorted(len(g) for g in placer.groups.values()) == [1, 99]
    node = placer.nodes["n5"]
    node.cpu_free_m = 0
    placer.update(node)
    assert len(placer.groups) == 3
    assert placer.place(Demand(0, WHOLE, 1000, 0)).node != "n5"


def test_unknown_policy_is_refused():
    with pytest.raises(ValueError, match="Unknown placement policy"):
        Placer([], Workload([]), policy="magic")


demands = st.one_of(
    st.builds(share, st.integers(1, 999), st.integers(0, 8000), st.integers(0, 16_000)),
    st.builds(whole, st.sampled_from([1, 2, 4, 8]), st.integers(0, 8000), st.integers(0, 16_000)),
    st.builds(lambda c: Demand(0, WHOLE, c, 1000), st.integers(0, 8000)),
)


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(st.sampled_from([1, 2, 4, 8]), min_size=1, max_size=6),
    tasks=st.lists(demands, max_size=60),
    policy=st.sampled_from(POLICIES),
)
def test_accounting_never_overcommits_and_matches_the_placements(shapes, tasks, policy):
    nodes = [gpu_node(f"n{i}", [WHOLE] * g, cpu=32_000, memory=64_000) for i, g in enumerate(shapes)]
    placer = Placer(nodes, Workload.from_demands(tasks), policy=policy, seed=1)
    used: dict[str, list[int]] = {n.name: [0] * len(n.gpu_free) for n in nodes}
    cpu: dict[str, int] = dict.fromkeys(used, 0)
    for task in tasks:
        before = {n.name: list(n.gpu_free) for n in placer.nodes.values()}
        choice = placer.place(task)
        if choice is None:
            # Nothing could take it: no node had the CPU, memory and GPUs.
            assert not any(
                n.cpu_free_m >= task.cpu_m
                and n.memory_free_mb >= task.memory_mb
                and sum(1 for f in before[n.name] if f >= task.milli) >= task.gpus
                for n in placer.nodes.values()
            )
            continue
        assert len(choice.gpu_indices) == task.gpus == len(set(choice.gpu_indices))
        for i in choice.gpu_indices:
            assert before[choice.node][i] >= task.milli
            if task.milli == WHOLE:
                assert before[choice.node][i] == WHOLE
            used[choice.node][i] += task.milli
        cpu[choice.node] += task.cpu_m
    for node in placer.nodes.values():
        assert all(0 <= free <= WHOLE for free in node.gpu_free)
        assert [WHOLE - f for f in node.gpu_free] == used[node.name]
        assert node.cpu_free_m == 32_000 - cpu[node.name] >= 0
        assert placer.signature(node.name) == node.signature
    assert sum(len(g) for g in placer.groups.values()) == len(nodes)
