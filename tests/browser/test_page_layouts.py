"""Issue 31, item 15, measured in a real Chromium at the UX walk's 1440 × 900: the audit log's rows are compact
(the walk measured 8,404 px for 50 events), and the planner's result tables fit the page (the per-team and
per-class tables ran past it, with four columns per scenario and whole scenario names as headers). Screenshots go
to test-artifacts/."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core import audit
from gpus.choices import InventoryAuditAction
from jobs.choices import JobAuditAction
from planner.choices import PlanState
from planner.models import PlanRun
from tests.unit.planner.run_results import results_for_teams

from .conftest import login

pytestmark = pytest.mark.browser

#: The walk's 50 events took 8,404 px (168 px a row); a row of two or three changed fields is about 60 px now.
MAX_AUDIT_TABLE_PX = 50 * 80
SUGGESTED = "Suggested {n}: A100-80GB: 1 node(s) 5 GPU(s) 2×1g.10gb + 1×2g.20gb + 1×3g.40gb, 2 GPU(s) 2×3g.40gb"


def _walk_events(people):
    """Fifty events like the walk's: a carve's four steps, a service stopped, a job cancelled."""
    admin, vision = people["admin"], people["vision"]
    service = {
        "granted_replicas": 4,
        "max_replicas": 4,
        "metric": "cpu",
        "metric_name": "",
        "metric_target": 70.0,
        "min_replicas": 2,
        "name": "ux-llm",
        "port": 8000,
        "revision": 1,
        "state": "active",
    }
    for n in range(9):
        op = {"object_type": "gpus.NodeConfigOperation", "object_id": str(n + 1), "object_repr": f"MIG #{n} on gpu-a1"}
        audit.record(
            admin,
            InventoryAuditAction.NODE_CONFIG_REQUEST,
            **op,
            before={"config": "nvidia-a10", "rename": False, "replicas": 4, "strategy": "none"},
            after={"config": "portal-ts8-none", "rename": False, "replicas": 8, "strategy": "none"},
        )
        audit.record(None, InventoryAuditAction.NODE_CONFIG_DRAIN, **op, after={"node": "gpu-a10-01"})
        audit.record(
            None,
            InventoryAuditAction.NODE_CONFIG_APPLY,
            **op,
            after={
                "config_map": "ConfigMap gpu-operator/time-slicing-config",
                "labels": {"nvidia.com/device-plugin.config": "portal-ts8-none"},
            },
        )
        audit.record(None, InventoryAuditAction.NODE_CONFIG_DONE, **op, after={"advertised": {"nvidia.com/gpu": 32}})
        audit.record(
            admin,
            JobAuditAction.SERVICE_STOP,
            object_type="jobs.InferenceService",
            object_id="2",
            object_repr="service ux-llm (1)",
            before=service,
            after=service | {"granted_replicas": 0, "state": "stopped"},
            team=vision,
        )
    for n in range(5):
        audit.record(
            admin,
            JobAuditAction.JOB_CANCEL,
            object_type="jobs.Job",
            object_id=str(n + 1),
            object_repr=f"#{n + 1} train",
            before={"state": "running"},
            after={"state": "cancelled", "reason": "make room for the eval"},
            team=vision,
        )


def test_fifty_audit_events_fit_in_compact_rows(page, people, artifacts):
    _walk_events(people)
    page.set_viewport_size({"width": 1440, "height": 900})
    login(page, "admin")
    page.goto("/audit/")
    table = page.get_by_test_id("audit-table")
    assert table.locator("tbody tr").count() == 50
    height = table.bounding_box()["height"]
    page.screenshot(path=str(artifacts / "audit-50-events.png"), full_page=True)
    print(f"audit table: 50 events, {height:.0f} px tall ({height / 50:.0f} px a row)")
    assert height < MAX_AUDIT_TABLE_PX
    assert "{&quot;" not in table.inner_html() and '{"' not in table.inner_text()


def test_the_planner_result_tables_fit_the_page_with_eleven_scenarios(new_page, people, artifacts):
    """The most a run has: the baseline, five proposals and five suggested layouts."""
    results = results_for_teams(people["vision"].pk, people["nlp"].pk)
    baseline, proposal, suggested = results["scenarios"]
    results["scenarios"] = [
        baseline,
        *[dict(proposal, name=f"proposal number {n}") for n in range(5)],
        *[dict(suggested, name=SUGGESTED.format(n=n + 1)) for n in range(5)],
    ]
    now = timezone.now()
    run = PlanRun.objects.create(
        created_by=people["admin"],
        window_start=now - timedelta(days=7),
        window_end=now,
        state=PlanState.SUCCEEDED,
        options={"preemption": True, "borrowing": True, "suggest": 5},
        results=results,
    )
    width = 1440
    page = new_page(width=width, height=900)
    login(page, "admin")
    page.goto(f"/planner/{run.pk}/")
    page.screenshot(path=str(artifacts / f"planner-11-scenarios-{width}.png"), full_page=True)
    for testid in ("scenarios", "team-table", "class-table"):
        table = page.get_by_test_id(testid)
        wide, room = table.evaluate("t => [t.scrollWidth, t.parentElement.clientWidth]")
        print(f"{testid} at {width} px: {wide} px wide in {room} px")
        assert wide <= room, f"{testid} is cut off: {wide} px in {room} px"
    legend = page.get_by_test_id("scenario-legend")
    assert SUGGESTED.format(n=5) in legend.inner_text()
