"""The planner's replay engine on hand-built histories whose right answer is known: more nodes cut waits, a MIG
layout without a profile leaves its work never running (with admission's reason), time-slicing ×2 against ×4,
a quota that lets a team run, preemption and requeueing, gangs all-or-nothing, the fidelity of a history the
engine itself produced, cancelling and progress. Results are asserted, never timings."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.planner import observe, synthetic_cluster, synthetic_history
from jobs.scheduling.snapshot import QuotaView
from planner import engine, model
from planner.engine_replay import Replay, Settings
from planner.proposals import Invalid

from .engine_cases import HOUR, T0, a10_cluster, a100_mig_cluster, h100_cluster, history, job

TOTAL_KEYS = {"jobs", "ran", "never_ran", "wait_p50_s", "wait_p95_s", "gpu_hours", "allocation_mean", "capacity_gpus",
              "stranded_gpu_hours"}  # fmt: skip


def by_name(result: dict) -> dict[str, dict]:
    return {s["name"]: s for s in result["scenarios"]}


def test_more_nodes_cut_the_waits_and_the_result_has_the_contracts_shape():
    cluster = h100_cluster(2, {(1, 1): QuotaView(64, 64)})
    jobs = [job(i + 1, T0 + i * 600, 2 * HOUR, count=8) for i in range(40)]
    proposal = model.Proposal("two more", [model.AddNodes("h0", 2)])
    result = engine.run_plan(history(jobs), cluster, [proposal])
    assert set(result) == {"window", "cluster", "clusters", "scenarios", "fidelity", "suggestions", "seconds"}
    assert (result["cluster"], result["clusters"]) == ("", [""])  # the whole fleet: here one cluster, unnamed
    assert [s["cluster"] for s in result["scenarios"]] == ["", ""]
    assert result["suggestions"] == {"asked": 0, "offered": 0, "not_offered": []}
    assert result["window"] == {"start": T0, "end": T0 + 24 * HOUR, "jobs": 40}
    base, more = result["scenarios"]
    assert (base["name"], base["origin"], more["origin"]) == ("baseline", "baseline", "proposal")
    assert more["changes"] == [{"type": "add_nodes", "like": "h0", "count": 2}]
    for scenario in (base, more):
        assert set(scenario["totals"]) == TOTAL_KEYS
        assert set(scenario["teams"][0]) == (TOTAL_KEYS - {"capacity_gpus"}) | {"team", "name"}
        assert set(scenario["classes"][0]) == TOTAL_KEYS | {"class", "name"}
        assert set(scenario["series"]) == {"t", "allocated_gpus", "capacity_gpus", "waiting_jobs"}
        assert len(scenario["series"]["t"]) == 24
        assert [row["cluster"] for row in scenario["clusters"]] == [""]
        assert scenario["clusters"][0]["gpu_hours"] == scenario["totals"]["gpu_hours"]
    assert base["totals"]["capacity_gpus"] == 16 and more["totals"]["capacity_gpus"] == 32
    # 8-GPU jobs of 2 h every 10 min: two nodes run 2 at a time, four run 4; the queue is far shorter.
    assert more["totals"]["wait_p50_s"] < base["totals"]["wait_p50_s"] / 2
    assert more["totals"]["wait_p95_s"] < base["totals"]["wait_p95_s"]
    assert more["totals"]["ran"] > base["totals"]["ran"]
    assert base["totals"]["allocation_mean"] > 0.9  # the two nodes are busy nearly all day
    assert base["teams"][0]["name"] == "vision"
    assert max(base["series"]["allocated_gpus"]) <= 16 and max(more["series"]["allocated_gpus"]) > 16


def test_a_mig_layout_without_a_profile_leaves_its_work_never_running_with_admissions_reason():
    cluster = a100_mig_cluster()
    jobs = [job(1, T0 + 60, HOUR, class_id=1), job(2, T0 + 120, HOUR, class_id=2), job(3, T0 + 180, HOUR, class_id=2)]
    balanced = model.Proposal("a0 balanced", [model.MigChange(("a0",), preset="all-balanced")])
    small = model.Proposal("all 1g", [model.MigChange(("a0", "a1"), preset="all-1g.10gb")])
    result = by_name(engine.run_plan(history(jobs), cluster, [balanced, small]))
    base = result["baseline"]
    # Nobody offers 1g.10gb today: both such jobs never run, with decide's own explanation.
    assert base["totals"]["never_ran"] == 2 and base["totals"]["ran"] == 1
    assert [(j["job"], j["reason"]) for j in base["never_ran"]] == [(2, "never_fits"), (3, "never_fits")]
    assert base["never_ran"][0]["message"].startswith(
        "No schedulable node that team vision may use can hold 1 × A100 SXM4 80GB · MIG 1g.10gb"
    )
    # all-balanced on a0 offers 2 × 1g.10gb per GPU: everything runs; the 2g.20gb it adds is a new class.
    assert result["a0 balanced"]["totals"]["never_ran"] == 0 and result["a0 balanced"]["totals"]["ran"] == 3
    new = [c for c in result["a0 balanced"]["classes"] if c["class"] < 0]
    assert [c["name"] for c in new] == ["A100 SXM4 80GB · MIG 2g.20gb"]
    assert new[0]["capacity_gpus"] == pytest.approx(8 * 2 / 7, abs=1e-3)
    # Carving everything into 1g.10gb strands the 3g.40gb job instead.
    assert [j["job"] for j in result["all 1g"]["never_ran"]] == [1]


def test_time_slicing_by_two_against_by_four():
    jobs = [job(i + 1, T0 + 5, HOUR) for i in range(16)]
    by_two = model.Proposal("×2", [model.TimeSlicingChange(("t0",), 2)])
    result = by_name(engine.run_plan(history(jobs, hours=6), a10_cluster(4), [by_two]))
    four, two = result["baseline"]["totals"], result["×2"]["totals"]
    # ×4 gives 16 shares: all start in the first cycle. ×2 gives 8: half wait for the first half to end.
    assert four["wait_p95_s"] <= 10 and four["ran"] == 16
    assert two["wait_p95_s"] >= HOUR - 10 and two["ran"] == 16
    assert two["wait_p50_s"] == pytest.approx((5 + HOUR + 5) / 2, abs=10)  # halfway between 8 at ~0 and 8 at ~1 h
    # The same four GPUs either way, but a share is a quarter of one against a half.
    assert four["capacity_gpus"] == two["capacity_gpus"] == 4
    assert four["gpu_hours"] == pytest.approx(16 * 0.25) and two["gpu_hours"] == pytest.approx(16 * 0.5)
    assert [c["name"] for c in result["×2"]["classes"]] == ["A10 · 1/2 time-sliced"]


def test_a_quota_change_lets_a_team_run():
    cluster = h100_cluster(1, {(1, 1): QuotaView(8, 8)})
    jobs = [job(1, T0 + 60, HOUR, team=2), job(2, T0 + 60, HOUR, team=1)]
    grant = model.Proposal("grant nlp", [model.QuotaChange(team=2, class_id=1, guaranteed=4, limit=8)])
    result = by_name(engine.run_plan(history(jobs), cluster, [grant]))
    base = result["baseline"]
    assert [(j["job"], j["reason"]) for j in base["never_ran"]] == [(1, "quota")]
    assert base["never_ran"][0]["message"] == "Team nlp has no quota for H100 80GB HBM3; an admin must grant one."
    assert result["grant nlp"]["totals"]["never_ran"] == 0 and result["grant nlp"]["totals"]["ran"] == 2
    teams = {t["team"]: t for t in result["grant nlp"]["teams"]}
    assert teams[2]["ran"] == 1 and teams[2]["gpu_hours"] == pytest.approx(1.0)


def preemption_case():
    # Team 1 has no guarantee and borrows the whole node; team 2 is guaranteed all of it.
    cluster = h100_cluster(1, {(1, 1): QuotaView(0, 8), (2, 1): QuotaView(8, 8)})
    jobs = [
        job(1, T0, 10 * HOUR, count=8, team=1, preemptible=True),
        job(2, T0 + HOUR, HOUR, count=8, team=2),
    ]
    return cluster, history(jobs)


def test_preemption_stops_borrowed_work_after_the_grace_and_requeues_it():
    cluster, past = preemption_case()
    run = engine.replay(past, cluster, engine.Options())
    borrower, owner = run.records[1], run.records[2]
    # The owner's cycle preempts the borrower; 60 s of grace later it stops, and the next cycle admits the owner.
    assert borrower.preemptions == 1
    assert borrower.runs[0] == [T0, T0 + HOUR + 60, ("h0",)]
    assert T0 + HOUR + 60 <= owner.first_start <= T0 + HOUR + 70
    # Requeued, the borrower starts again (from the beginning) when the owner's hour is over.
    assert owner.first_start + HOUR <= borrower.runs[1][0] <= owner.first_start + HOUR + 10
    assert borrower.runs[1][1] == borrower.runs[1][0] + 10 * HOUR and borrower.first_start == T0
    # Without preemption the owner waits for the borrower to finish; without borrowing the borrower never runs.
    calm = engine.replay(past, cluster, engine.Options(preemption=False))
    assert calm.records[2].first_start == pytest.approx(T0 + 10 * HOUR, abs=10) and calm.records[1].preemptions == 0
    strict = engine.run_plan(past, cluster, [], engine.Options(borrowing=False))["scenarios"][0]
    assert [(j["job"], j["reason"]) for j in strict["never_ran"]] == [(1, "quota")]


def test_a_gang_starts_all_its_ranks_together_on_distinct_nodes():
    cluster = h100_cluster(2, {(1, 1): QuotaView(16, 16)})
    jobs = [job(1, T0, HOUR, count=1), job(2, T0 + 60, HOUR, count=8, workers=2)]
    run = engine.replay(history(jobs), cluster, engine.Options())
    single, gang = run.records[1], run.records[2]
    # One GPU taken on one node: the gang of 2 × 8 waits for it, then takes both nodes at once.
    assert single.first_start == T0
    assert T0 + HOUR <= gang.first_start <= T0 + HOUR + 10
    assert len(gang.runs) == 1 and sorted(gang.runs[0][2]) == ["h0", "h1"]
    result = engine.run_plan(history(jobs), cluster, [])["scenarios"][0]
    assert result["totals"]["gpu_hours"] == pytest.approx(1 + 16, abs=0.01)


def test_a_history_the_engine_produced_itself_has_no_fidelity_gap():
    cluster = synthetic_cluster(40)
    past = synthetic_history(cluster, seed=5, days=3, jobs=1500)
    # Without preemptible work nothing restarts, so a job's observed run is exactly its replayed one.
    past = model.History(past.start, past.end, [replace(j, preemptible=False) for j in past.jobs])
    observed = observe(past, cluster, engine.Options())
    assert sum(j.started is not None for j in observed.jobs) > 1000
    fidelity = engine.run_plan(observed, cluster, [])["fidelity"]
    assert fidelity["jobs_compared"] == 1500
    assert fidelity["observed"] == fidelity["baseline"]
    assert fidelity["wait_p50_diff_s"] == fidelity["wait_p95_diff_s"] == fidelity["allocation_mean_diff"] == 0
    assert fidelity["allocation_series_mae_gpus"] == pytest.approx(0, abs=1e-3)
    assert "median wait is the same as observed" in fidelity["sentence"]


def test_the_fidelity_sentence_says_how_far_the_baseline_is_from_what_was_observed():
    cluster = h100_cluster(1, {(1, 1): QuotaView(8, 8)})
    # Observed: both started at once (on more capacity than the cluster now has); replayed, the second waits.
    jobs = [job(1, T0, HOUR, count=8, started=T0), job(2, T0, HOUR, count=8, started=T0)]
    fidelity = engine.run_plan(history(jobs), cluster, [])["fidelity"]
    assert fidelity["observed"]["wait_p95_s"] == 0 and fidelity["baseline"]["wait_p95_s"] > 3000
    assert fidelity["wait_p95_diff_s"] > 3000
    assert "95th-percentile wait 57 min longer than observed" in fidelity["sentence"]


def test_cancelling_raises_and_progress_is_reported():
    cluster = h100_cluster(2)
    past = history([job(i + 1, T0 + i * 60, HOUR) for i in range(50)])
    seen: list[tuple[float, str]] = []
    engine.run_plan(past, cluster, [model.Proposal("more", [model.AddNodes("h0", 1)])],
                    progress=lambda f, m: seen.append((f, m)))  # fmt: skip
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and len(seen) >= 3
    assert any(m.startswith("Replaying more (2 of 2)") for _, m in seen)
    asked = []

    def cancelled() -> bool:
        asked.append(1)
        return len(asked) > 1

    with pytest.raises(engine.Cancelled):
        engine.run_plan(past, cluster, [], cancelled=cancelled)


def test_invalid_proposals_are_refused_with_every_problem_before_anything_runs():
    cluster = h100_cluster(2)
    bad = [
        model.Proposal("a", [model.RemoveNodes(("nope",)), model.AddNodes("h0", 0)]),
        model.Proposal("b", [model.TimeSlicingChange(("h1",), 99)]),
    ]
    with pytest.raises(Invalid) as raised:
        engine.run_plan(history([]), cluster, bad)
    assert raised.value.problems == [
        "a: Change 1 (remove_nodes): no node named nope in the cluster.",
        "a: Change 2 (add_nodes): count must be between 1 and 1000; got 0.",
        "b: Change 1 (time_slicing): replicas must be between 1 (no sharing) and 64 per GPU; got 99.",
    ]


def test_the_fast_path_answers_as_asking_every_queued_job_every_cycle():
    # One class, so "ask only the classes something happened to" is exact here; what remains to check is that
    # the kept engines and tallies and the quota and array waits left out change no decision. Preemption, gangs
    # and arrays' caps included.
    cluster = h100_cluster(3, {(t, 1): QuotaView(4, 16) for t in (1, 2, 3)})
    cluster.team_names[3] = "speech"
    import random

    rng = random.Random(11)
    jobs = [
        job(i + 1, T0 + rng.uniform(0, 20 * HOUR), rng.uniform(600, 4 * HOUR), count=rng.choice([1, 2, 4, 8]),
            team=rng.choice([1, 2, 3]), preemptible=rng.random() < 0.5, workers=rng.choice([1, 1, 1, 2]),
            group=rng.choice([None, None, None, 7, 8]))
        for i in range(400)
    ]  # fmt: skip
    runs = []
    for reference in (False, True):
        run = Replay(cluster, history(jobs, group_caps={7: 2, 8: 3}), Settings(), reference=reference)
        run.run()
        runs.append({i: (r.first_start, r.preemptions, r.view.nodes, r.runs) for i, r in run.records.items()})
    fast, slow = runs
    assert sum(p for _, p, _, _ in fast.values()) > 0
    assert fast == slow
    # The arrays' caps held, and bound: an array had its cap's worth running at some moment.
    reached = []
    for group, cap in ((7, 2), (8, 3)):
        edges = sorted(
            (t, step)
            for r in run.records.values()
            if r.view.group == group
            for a, b, _ in r.runs
            for t, step in ((a, 1), (b, -1))
        )
        level, most = 0, 0
        for _, step in edges:
            level += step
            most = max(most, level)
        assert most <= cap
        reached.append(most == cap)
    assert any(reached)
