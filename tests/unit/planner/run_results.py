"""A planner run's results document in the shape planner.engine.run_plan returns (the contract), with made-up numbers:
what the pages, the API's reads and the CSV are tested on without running the engine."""

from __future__ import annotations


def scenario(name: str, origin: str, teams: dict[int, str], *, never_ran=(), changes=(), wait=60.0, gpu_hours=100.0):
    """One scenario of a results document, in the shape planner.engine.run_plan returns (the contract)."""
    totals = {
        "jobs": 10,
        "ran": 10 - len(never_ran),
        "never_ran": len(never_ran),
        "wait_p50_s": wait,
        "wait_p95_s": wait * 4,
        "gpu_hours": gpu_hours,
        "allocation_mean": 0.5,
        "capacity_gpus": 64.0,
        "stranded_gpu_hours": 3.5,
    }
    team_rows = [
        {
            "team": pk,
            "name": team_name,
            **{k: v for k, v in totals.items() if k != "capacity_gpus"},
            "never_ran": sum(1 for n in never_ran if n["team"] == pk),
        }
        for pk, team_name in teams.items()
    ]
    return {
        "name": name,
        "origin": origin,
        "changes": list(changes),
        "totals": totals,
        "teams": team_rows,
        "classes": [{"class": 7, "name": "H100 80GB", **totals}, {"class": -1, "name": "A100 3g.40gb (new)", **totals}],
        "series": {
            "t": [1.0e9, 1.0e9 + 3600, 1.0e9 + 7200],
            "allocated_gpus": [10.0, 20.0, 15.0],
            "capacity_gpus": [64.0, 64.0, 64.0],
            "waiting_jobs": [0.0, 2.0, 1.0],
        },
        "never_ran": list(never_ran),
    }


def results_for_teams(vision: int, nlp: int) -> dict:
    teams = {vision: "Computer Vision", nlp: "=Language Models"}  # a formula-like name: the CSV must quote it
    never = [
        {"job": 11, "team": vision, "class": 7, "reason": "too_big", "message": "Asks 16 GPUs; no node has 16."},
        {"job": 12, "team": nlp, "class": 7, "reason": "no_quota", "message": "Team nlp has no quota for this class."},
    ]
    mig = {"type": "mig", "nodes": ["gpu-a100-mig-01"], "preset": "all-3g.40gb"}
    per_gpu = {"type": "mig", "nodes": ["gpu-a100-mig-01"], "per_gpu": [{"3g.40gb": 2}]}
    return {
        "window": {"start": 1.0e9, "end": 1.0e9 + 7200, "jobs": 10},
        "scenarios": [
            scenario("baseline", "baseline", teams, never_ran=never),
            scenario("3g everywhere", "proposal", teams, never_ran=never[:1], changes=[mig], wait=30.0),
            scenario("Suggested layout 1", "suggested", teams, changes=[per_gpu], wait=20.0),
        ],
        "fidelity": {
            "observed": {"wait_p50_s": 50.0, "wait_p95_s": 200.0, "allocation_mean": 0.48, "gpu_hours": 98.0},
            "baseline": {"wait_p50_s": 60.0, "wait_p95_s": 240.0, "allocation_mean": 0.5, "gpu_hours": 100.0},
            "wait_p50_diff_s": 10.0,
            "wait_p95_diff_s": 40.0,
            "allocation_mean_diff": 0.02,
            "allocation_series_mae_gpus": 1.25,
            "jobs_compared": 10,
            "sentence": "The baseline replay waits 10 s longer at the median than what happened.",
        },
        "seconds": 0.4,
    }
