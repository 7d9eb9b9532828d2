"""The capacity planner in a real Chromium: an admin fills the new-run form with one proposal (no JSON: lists and
fields), is told about a mistake next to its field with nothing lost, starts the run, watches its progress, and
sees the results appear on their own (the page polls the API) once the worker's task has run; a team lead sees the
run with only their own team's rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from planner import tasks
from planner.choices import PlanState
from planner.models import PlanRun
from tests.factories import finished_job

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def history(sim_cluster, people):
    sync_inventory(sim_cluster)
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 8, 16)
    now = timezone.now()
    for i in range(6):
        team = "vision" if i % 2 == 0 else "nlp"
        submitted = now - timedelta(hours=5) + timedelta(minutes=40 * i)
        owner = people["alice" if team == "vision" else "bob"]
        finished_job(
            people[team], owner, rc, submitted, timedelta(minutes=1), timedelta(minutes=44), name=f"b{i}", count=2
        )


def test_admin_makes_a_run_from_the_form_and_sees_progress_then_results(page, new_page, people, history, artifacts):
    login(page, "admin")
    page.goto("/")
    page.get_by_role("link", name="Planner").click()
    page.get_by_test_id("new-plan").click()
    page.get_by_label("Last 7 days").check()
    proposal = page.get_by_test_id("proposal-1")
    proposal.get_by_label("Proposal name").fill("Share the first H100 node")
    change = page.get_by_test_id("change-1-1")
    change.get_by_label("Change", exact=True).select_option("time_slicing")
    expect(change.get_by_label("Replicas per GPU")).to_be_visible()
    expect(change.get_by_label("MIG preset")).to_be_hidden()  # only the fields of the type picked
    change.get_by_label("Nodes", exact=True).select_option("gpu-h100-01")
    change.get_by_label("Replicas per GPU").fill("99")  # too many: refused next to the field
    page.get_by_test_id("start-plan").click()
    expect(page.get_by_test_id("plan-errors")).to_be_visible()
    expect(change.locator('[data-field="replicas"] .errorlist')).to_contain_text("64")
    expect(proposal.get_by_label("Proposal name")).to_have_value("Share the first H100 node")  # nothing lost
    expect(change.get_by_label("Change", exact=True)).to_have_value("time_slicing")
    assert not PlanRun.objects.exists()

    change.get_by_label("Replicas per GPU").fill("2")
    page.get_by_test_id("start-plan").click()
    expect(page.get_by_test_id("run-state")).to_have_text("Queued")
    expect(page.get_by_test_id("progress-bar")).to_be_visible()
    run = PlanRun.objects.get()
    assert run.proposals[0]["changes"][0] == {"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": 2}
    page.screenshot(path=str(artifacts / "planner-progress.png"), full_page=True)

    # The worker's task runs (here, in the test's thread); the page notices by itself and shows the results.
    assert tasks.run_plan(run.pk) == PlanState.SUCCEEDED
    expect(page.get_by_test_id("run-state")).to_have_text("Succeeded", timeout=15_000)
    expect(page.get_by_test_id("fidelity-sentence")).not_to_be_empty()
    scenarios = page.get_by_test_id("scenarios")
    expect(scenarios.get_by_test_id("scenario-0")).to_contain_text("baseline")
    expect(scenarios.get_by_test_id("scenario-1")).to_contain_text("Share the first H100 node")
    expect(page.locator("svg.chart")).to_have_count(2)
    expect(page.get_by_test_id("csv-link")).to_be_visible()
    page.screenshot(path=str(artifacts / "planner-results.png"), full_page=True)

    # A lead of vision reads the same run: vision's row, not nlp's; and no way to start or cancel runs.
    lead = new_page()
    login(lead, "alice")
    lead.goto(f"/planner/{run.pk}/")
    teams = lead.get_by_test_id("team-table")
    expect(teams.locator(f'tr[data-team="{people["vision"].pk}"]')).to_have_count(1)
    expect(teams.locator(f'tr[data-team="{people["nlp"].pk}"]')).to_have_count(0)
    lead.goto("/planner/")
    expect(lead.get_by_test_id("new-plan")).to_have_count(0)
