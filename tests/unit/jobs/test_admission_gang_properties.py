"""Gang admission over random queues and cluster states (hypothesis): replaying every admission against the
snapshot never takes a node below zero in units, CPU or memory; every admitted gang has exactly W distinct
nodes it may use (schedulable, its team's or shared) and rank 0 in ``admit``; no team passes its limit;
require-topology gangs are within one domain; no gang is partly admitted. Pure Python."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from jobs.scheduling.decide import decide
from jobs.scheduling.snapshot import QuotaView
from tests.snapshots import H100, A, B, job, node, snapshot
from vocab.names import ZONE_LABEL

RESOURCE = H100.resource_name
TEAMS = (A, B, 3)

nodes_strategy = st.lists(
    st.tuples(
        st.integers(0, 8),  # free units of 8
        st.sampled_from(["", "z1", "z2", "z3"]),  # zone ("" = unlabelled)
        st.booleans(),  # schedulable (cordoned when False)
        st.sampled_from([None, None, None, A, B]),  # dedicated to a team
        st.sampled_from([16_000, 64_000, 128_000]),  # CPU free (millicores)
    ),
    min_size=1,
    max_size=14,
)
jobs_strategy = st.lists(
    st.tuples(
        st.sampled_from(TEAMS),
        st.sampled_from([1, 1, 1, 2, 3, 4, 5, 6, 7, 8]),  # workers (1 = a single job)
        st.integers(1, 8),  # count per worker
        st.booleans(),  # preemptible
        st.sampled_from([0, 50, 100]),  # priority
        st.sampled_from(["", "prefer", "require"]),
        st.sampled_from([4000, 16_000, 40_000]),  # CPU per worker
    ),
    max_size=25,
)


@settings(max_examples=500, deadline=None)
@given(
    nodes_spec=nodes_strategy,
    jobs_spec=jobs_strategy,
    limits=st.tuples(st.integers(0, 64), st.integers(0, 64), st.integers(0, 64)),
    now=st.sampled_from([100.0, 5000.0]),  # before and after the patience: reservations happen too
)
def test_gangs_are_admitted_whole_on_distinct_nodes_that_hold_them(nodes_spec, jobs_spec, limits, now):
    nodes = []
    for i, (free, zone, schedulable, team, cpu) in enumerate(nodes_spec):
        n = node(f"n{i:02d}", free=free, schedulable=schedulable, team=team, cpu=cpu, memory=256_000)
        if zone:
            n.topology = {ZONE_LABEL: zone}
        nodes.append(n)
    queued = []
    for i, (team, workers, count, preemptible, priority, mode, cpu) in enumerate(jobs_spec):
        queued.append(
            job(team=team, count=count, workers=workers, preemptible=preemptible, priority=priority,
                submitted=float(i), cpu_m=cpu, memory_mb=64_000,
                topology_key=ZONE_LABEL if mode else "", topology_mode=mode if workers > 1 else "")
        )  # fmt: skip
    quotas = {(team, 1): QuotaView(limit // 2, limit) for team, limit in zip(TEAMS, limits, strict=True)}
    snap = snapshot(nodes, queued, quotas=quotas, now=now)
    by_name = {n.name: n for n in nodes}
    before = {n.name: (n.free[RESOURCE], n.cpu_free_m, n.memory_free_mb) for n in nodes}

    out = decide(snap)

    # The snapshot is what was observed: decide works on copies.
    assert {n.name: (n.free[RESOURCE], n.cpu_free_m, n.memory_free_mb) for n in nodes} == before
    by_id = {j.id: j for j in queued}
    assert set(out.admit) | set(out.wait) == set(by_id) and not set(out.admit) & set(out.wait)
    assert set(out.ranks) == {i for i in out.admit if by_id[i].workers > 1}
    left = {name: list(values) for name, values in before.items()}
    per_team = defaultdict(int)
    for job_id, (rank0, borrowed) in out.admit.items():
        j = by_id[job_id]
        placed = out.ranks.get(job_id, (rank0,))
        assert placed[0] == rank0
        assert len(placed) == j.workers and len(set(placed)) == j.workers
        for name in placed:
            n = by_name[name]
            assert n.schedulable and n.team in (None, j.team)
            left[name][0] -= j.count
            left[name][1] -= j.cpu_m
            left[name][2] -= j.memory_mb
        if j.topology_mode == "require":
            zones = {by_name[name].topology.get(ZONE_LABEL) for name in placed}
            assert len(zones) == 1 and None not in zones
        per_team[j.team] += j.count * j.workers
        assert not borrowed or j.preemptible
    for name, (units, cpu, memory) in left.items():
        assert units >= 0 and cpu >= 0 and memory >= 0, name
    for team, units in per_team.items():
        assert units <= quotas[(team, 1)].limit
    # Nodes held for starving gangs are usable by them and taken by nobody after them.
    for job_id, held in out.reserved.items():
        j = by_id[job_id]
        assert job_id in out.wait and len(set(held)) == len(held) <= j.workers
        for other in out.admit:
            o = by_id[other]
            if not (o.priority < j.priority or (o.priority == j.priority and o.team == j.team and o.id > j.id)):
                continue
            assert not set(out.ranks.get(other, (out.admit[other][0],))) & set(held)
