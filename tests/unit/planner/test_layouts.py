"""MIG layouts from demand: the candidates are exactly the full layouts the geometry allows, the search covers the
profiles the window asked for, never proposes today's carving, and its picks replay as "suggested" scenarios."""

from __future__ import annotations

from planner import engine, layouts, proposals
from vocab import mig
from vocab.names import mig_resource_name

from .engine_cases import HOUR, T0, a100_mig_cluster, history, job


def test_candidates_are_the_full_layouts_the_geometry_allows_and_mig_off():
    geometry = mig.product_geometry("NVIDIA-A100-SXM4-80GB")
    found = layouts.candidate_layouts(geometry)
    assert found[0] is None
    assert {
        (("3g.40gb", 2),),
        (("1g.10gb", 7),),
        (("7g.80gb", 1),),
        (("1g.10gb", 2), ("2g.20gb", 1), ("3g.40gb", 1)),
    } <= set(found)
    for layout in found[1:]:
        counts = dict(layout)
        assert mig.layout_problems(geometry, counts) == []
        # Full: no other instance of any profile fits beside them.
        for profile in geometry.profiles:
            if not profile.name.endswith("+me"):
                more = {**counts, profile.name: counts.get(profile.name, 0) + 1}
                assert mig.place(geometry, more) is None
    assert (("1g.10gb", 1),) not in found  # room left for six more: not full


def test_demand_levels_are_the_share_of_the_window_at_each_level():
    cluster = a100_mig_cluster()
    past = history([job(1, T0, 6 * HOUR, count=2, class_id=2), job(2, T0 + 3 * HOUR, 6 * HOUR, class_id=2),
                    job(3, T0, 12 * HOUR, class_id=1)])  # fmt: skip
    levels = layouts.demand_levels(past, cluster, "NVIDIA-A100-SXM4-80GB")
    assert levels["1g.10gb"].shares == {2: 0.125, 3: 0.125, 1: 0.125, 0: 0.625}
    assert levels["3g.40gb"].shares == {1: 0.5, 0: 0.5}
    assert levels["1g.10gb"].short(2) == 0.125 and levels["1g.10gb"].idle(2) == 0.125 + 2 * 0.625
    assert "" not in levels  # nobody asked for the whole A100


def test_suggestions_cover_the_profiles_asked_for_and_replay_as_suggested_scenarios():
    cluster = a100_mig_cluster()  # both nodes all-3g.40gb; nobody offers 1g.10gb
    jobs = [job(i + 1, T0 + i * 300, 2 * HOUR, class_id=2, count=2) for i in range(100)]
    jobs += [job(1000 + i, T0 + i * 900, 2 * HOUR, class_id=1) for i in range(30)]
    past = history(jobs)
    suggested = layouts.suggest(past, cluster, 3)
    assert 1 <= len(suggested) <= 3
    for proposal in suggested:
        assert proposal.name.startswith("Suggested ")
        assert proposals.validate(cluster, proposal) == []
        after = proposals.apply(cluster, proposal)
        offered = {r for n in after.nodes.values() for r, k in n.allocatable.items() if k}
        assert {mig_resource_name("1g.10gb"), mig_resource_name("3g.40gb")} <= offered
    result = engine.run_plan(past, cluster, [], engine.Options(suggest=2))
    scenarios = result["scenarios"]
    assert [s["origin"] for s in scenarios] == ["baseline", "suggested", "suggested"]
    assert scenarios[0]["totals"]["never_ran"] == 100
    assert all(s["totals"]["never_ran"] == 0 for s in scenarios[1:])
    assert scenarios[1]["changes"][0]["type"] == "mig"


def test_todays_carving_is_not_suggested():
    cluster = a100_mig_cluster()
    # Demand for exactly what the nodes offer (32 × 3g.40gb, all day): today's carving fits best.
    past = history([job(i + 1, T0, 24 * HOUR, class_id=1) for i in range(32)])
    for proposal in layouts.suggest(past, cluster, 5):
        after = proposals.apply(cluster, proposal)
        assert any(after.nodes[n].allocatable != cluster.nodes[n].allocatable for n in cluster.nodes)
