"""`gpuportal plan …` and the Client's planner calls against a live portal over HTTP: an admin starts a run from
a proposal file and waits for its results (the run is replayed by the real task while the client waits), shows,
lists, exports and cancels runs; a bad proposal is refused with every problem; a lead may read but not start."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import APIToken
from gpuportal import Client, Forbidden, WaitTimeout
from gpus.models import ResourceClass
from planner import tasks
from planner.choices import PlanState
from planner.models import PlanRun
from tests.factories import finished_job

from .conftest import H100

SHARE = {"name": "Share H100", "changes": [{"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": 2}]}


@pytest.fixture
def admin_token(portal, people) -> str:
    return APIToken.issue(people["admin"], "planner client tests")[1]


@pytest.fixture
def history(portal, people):
    """Four finished H100 jobs in the last three hours."""
    rc = ResourceClass.objects.get(key=H100)
    now = timezone.now()
    for i in range(4):
        submitted = now - timedelta(hours=3) + timedelta(minutes=20 * i)
        finished_job(
            people["vision"], people["alice"], rc, submitted, timedelta(minutes=1), timedelta(minutes=39),
            name=f"t{i}", count=2,
        )  # fmt: skip


@pytest.fixture
def worker_while_waiting(monkeypatch):
    """The client's pauses run the queued plan runs (the worker's task, in the test thread) instead of sleeping."""
    seen = {"t": 0.0}

    def pause(seconds: float) -> None:
        seen["t"] += seconds
        for pk in PlanRun.objects.filter(state=PlanState.QUEUED).values_list("pk", flat=True):
            tasks.run_plan(pk)

    monkeypatch.setattr("gpuportal.waiting.sleep", pause)
    monkeypatch.setattr("gpuportal.waiting.monotonic", lambda: seen["t"])


def run_gp(portal, token: str, *args: str):
    from click.testing import CliRunner

    from gpuportal.cli import cli

    return CliRunner().invoke(cli, ["--url", portal.url, "--token", token, *args], catch_exceptions=False)


def test_create_wait_show_list_and_csv(portal, admin_token, history, worker_while_waiting, tmp_path):
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps(SHARE))
    made = run_gp(portal, admin_token, "plan", "create", "--days", "1", "--proposal", str(proposal), "--wait")
    assert made.exit_code == 0, made.output
    run = PlanRun.objects.get()
    assert f"Plan run #{run.pk}: queued" in made.output and f"Plan run #{run.pk}: succeeded" in made.output
    assert "Fidelity: " in made.output
    lines = made.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("SCENARIO"))
    assert lines[header + 1].startswith("baseline") and lines[header + 2].startswith("Share H100")

    shown = run_gp(portal, admin_token, "plan", "show", str(run.pk))
    assert shown.exit_code == 0 and "succeeded" in shown.output and "Share H100" in shown.output
    as_json = json.loads(run_gp(portal, admin_token, "plan", "show", str(run.pk), "--output", "json").output)
    assert [s["name"] for s in as_json["results"]["scenarios"]] == ["baseline", "Share H100"]

    listed = run_gp(portal, admin_token, "plan", "list")
    assert listed.output.splitlines()[1].split()[:2] == [str(run.pk), "succeeded"]

    exported = run_gp(portal, admin_token, "plan", "csv", str(run.pk))
    rows = list(csv.DictReader(io.StringIO(exported.output)))
    assert {(r["scenario"], r["scope"]) for r in rows} >= {("baseline", "total"), ("Share H100", "total")}
    assert rows[0]["jobs"] == str(run.results["scenarios"][0]["totals"]["jobs"])


def test_a_bad_proposal_is_refused_with_every_problem(portal, admin_token, tmp_path):
    bad = {
        "proposals": [
            {
                "name": "x",
                "changes": [
                    {"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": 0},
                    {"type": "add_nodes", "like": "nowhere", "count": 0},
                ],
            }
        ]
    }
    path = tmp_path / "bad.yaml"
    path.write_text(json.dumps(bad))
    result = run_gp(portal, admin_token, "plan", "create", "--days", "7", "--proposal", str(path))
    assert result.exit_code == 4
    assert "HTTP 400" in result.output
    assert "proposals[0].changes[0].replicas" in result.output and "proposals[0].changes[1].count" in result.output
    assert not PlanRun.objects.exists()


def test_a_run_of_one_cluster_and_an_unknown_cluster(portal, admin_token, history, worker_while_waiting, tmp_path):
    proposal = tmp_path / "proposal.json"
    proposal.write_text(json.dumps(SHARE))  # no cluster: the run's
    made = run_gp(
        portal, admin_token, "plan", "create", "--days", "1", "--cluster", "default", "--proposal", str(proposal),
        "--wait",
    )  # fmt: skip
    assert made.exit_code == 0, made.output
    run = PlanRun.objects.get()
    assert run.cluster == "default" and run.proposals[0]["cluster"] == "default"
    assert run.results["cluster"] == "default"
    shown = run_gp(portal, admin_token, "plan", "show", str(run.pk))
    assert "over cluster default" in shown.output
    listed = run_gp(portal, admin_token, "plan", "list").output.splitlines()
    assert "CLUSTER" in listed[0] and "default" in listed[1]
    unknown = run_gp(portal, admin_token, "plan", "create", "--days", "1", "--cluster", "mars")
    assert unknown.exit_code == 4 and "HTTP 400" in unknown.output
    assert "No cluster named 'mars': name one of default." in unknown.output
    assert PlanRun.objects.count() == 1


def test_cancel_a_queued_run(portal, admin_token):
    created = Client(portal.url, admin_token).create_plan({"days": 2})
    result = run_gp(portal, admin_token, "plan", "cancel", str(created["id"]))
    assert result.exit_code == 0 and f"Plan run #{created['id']}: cancelled" in result.output
    again = run_gp(portal, admin_token, "plan", "cancel", str(created["id"]))
    assert again.exit_code == 4 and "HTTP 409" in again.output


def test_a_lead_reads_but_cannot_start(portal, admin_token):
    run = Client(portal.url, admin_token).create_plan({"days": 2})
    lead = Client(portal.url, portal.token)  # alice, lead of vision
    assert lead.get_plan(run["id"])["state"] == "queued"
    assert [r["id"] for r in lead.list_plans()] == [run["id"]]
    with pytest.raises(Forbidden):
        lead.create_plan({"days": 2})


def test_wait_plan_gives_up_after_its_timeout(portal, admin_token, monkeypatch):
    run = Client(portal.url, admin_token).create_plan({"days": 2})
    seen = {"t": 0.0}
    monkeypatch.setattr("gpuportal.waiting.sleep", lambda s: seen.__setitem__("t", seen["t"] + s))
    monkeypatch.setattr("gpuportal.waiting.monotonic", lambda: seen["t"])
    with pytest.raises(WaitTimeout, match=f"Plan run #{run['id']} is still queued after 5 s"):
        Client(portal.url, admin_token).wait_plan(run["id"], timeout=5)
