"""planner.validation: a plan request's window, proposals and options, every problem at once under the path of the
field it is about; a good request becomes the engine's inputs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from planner import validation
from planner.validation import PlanInvalid, validate_request

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def problems(data, **kw) -> dict[str, list[str]]:
    with pytest.raises(PlanInvalid) as raised:
        validate_request(data, now=NOW, **kw)
    return raised.value.errors


def test_days_back_from_now():
    checked = validate_request({"days": 30}, now=NOW)
    assert checked.end == NOW and checked.start == NOW - timedelta(days=30)
    assert checked.proposals == [] and checked.proposals_json == []


def test_dates_are_utc_days_and_the_end_day_is_included():
    checked = validate_request({"start": "2026-11-01", "end": "2026-11-10"}, now=NOW)
    assert checked.start == datetime(2026, 11, 1, tzinfo=UTC)
    assert checked.end == datetime(2026, 11, 11, tzinfo=UTC)


def test_an_end_of_today_stops_at_now():
    checked = validate_request({"start": "2026-11-20", "end": "2026-11-24"}, now=NOW)
    assert checked.end == NOW


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"days": 0}, "days", "1 to 90"),
        ({"days": 91}, "days", "1 to 90"),
        ({"days": "7"}, "days", "whole number"),
        ({"days": 7, "start": "2026-11-01"}, "days", "not both"),
        ({"end": "2026-11-10"}, "start", "starts"),
        ({"start": "yesterday"}, "start", "Not a date"),
        ({"start": "2026-11-10", "end": "2026-11-01"}, "start", "before it ends"),
        ({"start": "2026-01-01", "end": "2026-11-01"}, "start", "at most 90 days"),
        ({"start": "2026-11-01", "end": "2026-12-01T00:00:00Z"}, "end", "future"),
    ],
)
def test_window_problems(data, field, words):
    errors = problems(data)
    assert any(words in message for message in errors[field]), errors


def test_every_shape_problem_at_once():
    data = {
        "days": 7,
        "colour": "blue",
        "proposals": [
            {"name": "", "changes": []},
            {
                "name": "Quota",
                "changes": [{"type": "quota", "team": "vision", "class_id": 3, "guaranteed": 8, "limit": 4}],
            },
            {
                "name": "quota",
                "extra": 1,
                "changes": [{"type": "add_nodes", "like": "gpu-h100-01", "count": 0, "nodes": []}],
            },
            {
                "name": "baseline",
                "changes": [{"type": "mig", "nodes": ["a", "a"], "preset": "all-1g.10gb", "per_gpu": [{"1g.10gb": 9}]}],
            },
            "not a proposal",
        ],
        "options": {"preemption": "yes", "suggest": -1},
    }
    errors = problems(data)
    expected = {
        "colour",
        "proposals[0].name",
        "proposals[0].changes",
        "proposals[1].changes[0].team",
        "proposals[1].changes[0].limit",
        "proposals[2].name",
        "proposals[2].extra",
        "proposals[2].changes[0].count",
        "proposals[2].changes[0].nodes",
        "proposals[3].name",
        "proposals[3].changes[0].nodes",
        "proposals[3].changes[0].preset",
        "proposals[3].changes[0].per_gpu[0]",
        "proposals[4]",
        "options.preemption",
        "options.suggest",
    }
    assert expected <= set(errors), sorted(set(expected) - set(errors))
    assert "Proposal 2 has this name already." in errors["proposals[2].name"]
    assert "The limit cannot be below the guarantee." in errors["proposals[1].changes[0].limit"]


def test_at_most_five_proposals_and_each_is_checked_against_the_cluster(inventory):
    one = {"changes": [{"type": "remove_nodes", "nodes": ["gpu-h100-01", "no-such-node"]}]}
    errors = problems({"days": 7, "proposals": [{**one, "name": f"p{i}"} for i in range(6)]})
    assert "At most 5 proposals" in errors["proposals"][0]
    for index in range(5):  # the first five are still checked (planner.proposals.validate, on the cluster today)
        assert any("no-such-node" in m for m in errors[f"proposals[{index}]"]), errors


def test_a_good_proposal_becomes_the_engines(inventory):
    change = {"type": "time_slicing", "nodes": ["gpu-h100-01", "gpu-h100-02"], "replicas": 2}
    checked = validate_request({"days": 3, "proposals": [{"name": " Share H100s ", "changes": [change]}]}, now=NOW)
    (proposal,) = checked.proposals
    assert proposal.name == "Share H100s"
    assert proposal.changes[0].nodes == ("gpu-h100-01", "gpu-h100-02") and proposal.changes[0].replicas == 2
    assert checked.proposals_json[0]["changes"][0]["type"] == "time_slicing"


def test_options_default_to_the_cycles_own_settings(settings):
    settings.PORTAL_JOB_CYCLE_INTERVAL = 7.5
    settings.PORTAL_PREEMPTION_GRACE = 30
    checked = validate_request({"days": 1, "options": {"borrowing": False, "suggest": 3}}, now=NOW)
    assert checked.options_json == {"preemption": True, "borrowing": False, "suggest": 3}
    options = checked.options
    assert (options.preemption, options.borrowing, options.suggest) == (True, False, 3)
    assert options.cycle_s == 7.5 and options.grace_s == 30.0
    assert validation.options_from_json(checked.options_json) == options
