"""The planner on a node whose device plugin runs MIG's single strategy (as the demo's A100 40GB does), and what it
offers of its own: a MIG change is advertised the way the portal's carving would advertise it, a suggestion that
leaves work unable to run is not offered, and work that could never run is not counted among the waits."""

from __future__ import annotations

from jobs.scheduling.snapshot import ClassView, QuotaView
from planner import engine, layouts, model, proposals
from vocab.names import GPU_RESOURCE, mig_resource_name

from .engine_cases import HOUR, T0, cluster, history, job, node
from .run_results import results_for_teams

A100_40 = "NVIDIA-A100-SXM4-40GB"
SINGLE_1G = A100_40 + "-MIG-1g.5gb"


def single_strategy_cluster() -> model.Cluster:
    """One A100 40GB node, 4 GPUs all-1g.5gb under the single strategy: 28 × nvidia.com/gpu labelled
    ...-MIG-1g.5gb (class 1, 1/7 of a GPU)."""
    cls = ClassView(1, GPU_RESOURCE, SINGLE_1G, 1 / 7, "A100 SXM4 40GB · MIG 1g.5gb")
    view = node("s0", SINGLE_1G, {GPU_RESOURCE: 28})
    made = cluster([(view, A100_40, 4, True)], [cls], {(1, 1): QuotaView(28, 28)})
    made.shapes["s0"] = model.NodeShape("s0", A100_40, 4, True, "single")
    return made


def test_a_mig_change_on_a_single_strategy_node_is_advertised_as_the_single_strategy_does():
    base = single_strategy_cluster()
    after = proposals.apply(base, model.Proposal("3g", [model.MigChange(("s0",), preset="all-3g.20gb")]))
    # Every MIG device an nvidia.com/gpu, the product renamed after the one profile: not a mixed-strategy resource.
    assert after.nodes["s0"].allocatable == {GPU_RESOURCE: 8}
    assert after.nodes["s0"].product_label == A100_40 + "-MIG-3g.20gb"
    made = [c for c in after.classes.values() if c.product_label == A100_40 + "-MIG-3g.20gb"]
    assert len(made) == 1 and made[0].id < 0 and abs(made[0].gpu_fraction - 3 / 7) < 1e-9
    # The same profile as today keeps today's class: its work still runs.
    same = proposals.apply(base, model.Proposal("same", [model.MigChange(("s0",), preset="all-1g.5gb")]))
    assert same.nodes["s0"].allocatable == {GPU_RESOURCE: 28} and set(same.classes) == {1}
    # Two profiles on one node are what GFD's single strategy cannot advertise: refused, with the reason.
    mixed = model.Proposal("mixed", [model.MigChange(("s0",), per_gpu=({"1g.5gb": 2, "2g.10gb": 1},))])
    problems = proposals.validate(base, mixed)
    assert problems and all("s0" in p for p in problems)


def test_demand_on_a_single_strategy_node_is_demand_for_its_profile():
    base = single_strategy_cluster()
    past = history([job(i + 1, T0 + i * 60, 4 * HOUR) for i in range(20)])
    demand = layouts.demand_levels(past, base, A100_40)
    assert set(demand) == {"1g.5gb"}  # not the whole GPU ("")


def test_a_suggestion_that_leaves_work_unable_to_run_is_not_offered():
    base = single_strategy_cluster()
    past = history([job(i + 1, T0 + i * 600, 2 * HOUR) for i in range(60)])
    result = engine.run_plan(past, base, [], engine.Options(suggest=3))
    baseline, *suggested = result["scenarios"]
    assert baseline["totals"]["never_ran"] == 0
    for scenario in suggested:
        assert scenario["origin"] == "suggested"
        assert scenario["totals"]["never_ran"] <= baseline["totals"]["never_ran"]
    assert [s["name"].split(":")[0] for s in suggested] == [f"Suggested {i + 1}" for i in range(len(suggested))]
    # Any other carving of the node drops 1g.5gb, which every job asks for: nothing is worth offering, and the
    # results say what was searched and left out.
    assert suggested == []
    assert result["suggestions"]["asked"] == 3 and result["suggestions"]["offered"] == 0
    assert result["suggestions"]["not_offered"] and all(
        n["never_ran"] > 0 for n in result["suggestions"]["not_offered"]
    )


def test_work_that_could_never_run_is_not_counted_among_the_waits():
    base = single_strategy_cluster()
    base.classes[2] = ClassView(2, mig_resource_name("7g.40gb"), A100_40, 1.0, "A100 SXM4 40GB · MIG 7g.40gb")
    base.quotas[(1, 2)] = QuotaView(4, 4)
    runs = [job(i + 1, T0 + i * 60, HOUR) for i in range(10)]  # start at once
    never = [job(100 + i, T0, HOUR, class_id=2) for i in range(10)]  # no node offers 7g.40gb
    result = engine.run_plan(history(runs + never), base, [])
    totals = result["scenarios"][0]["totals"]
    assert totals["never_ran"] == 10 and totals["ran"] == 10
    assert totals["wait_p95_s"] < 60  # the never-run jobs' day-long "waits" are not in the percentile


def test_the_run_page_says_which_suggestions_were_left_out_and_why(client, people, make_run):
    results = results_for_teams(people["vision"].pk, people["nlp"].pk)
    results["suggestions"] = {
        "asked": 2, "offered": 0, "not_offered": [{"name": "A100-40GB: 1 node(s) 4×1g.10gb", "never_ran": 612}]
    }  # fmt: skip
    run = make_run(results=results)
    client.force_login(people["admin"])
    html = client.get(f"/planner/{run.pk}/").content.decode()
    note = html[html.index('data-testid="suggestions-note"') :][:800]
    assert "0 of the 2 MIG layouts asked for" in note
    assert "A100-40GB: 1 node(s) 4×1g.10gb (612 jobs never run)" in note
    assert "No other carving fits the window" in note
