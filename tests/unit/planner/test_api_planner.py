"""The planner's API: who may do what (admins everything, team leads read with their teams' rows only, members and
outsiders 403), runs made and cancelled with their audit rows, the CSV export, and the OpenAPI schema."""

from __future__ import annotations

import csv
import io

import pytest

from core.models import AuditEvent
from planner.choices import PlannerAuditAction, PlanState
from planner.models import PlanRun

LIST = "/api/v1/planner/runs/"


def as_user(api_client, people, who):
    if who != "anonymous":
        api_client.force_authenticate(people[who])
    return api_client


@pytest.mark.parametrize(
    ("who", "read", "write"),
    [
        ("admin", 200, True),
        ("alice", 200, False),
        ("bob", 403, False),
        ("outsider", 403, False),
        ("anonymous", 401, False),
    ],
)
def test_permission_matrix(api_client, people, make_run, who, read, write):
    run = make_run(state=PlanState.RUNNING, results=None)
    client = as_user(api_client, people, who)
    assert client.get(LIST).status_code == read
    assert client.get(f"{LIST}{run.pk}/").status_code == read
    assert client.get(f"{LIST}{run.pk}/results.csv").status_code in ((409,) if read == 200 else (read,))
    cancel = client.post(f"{LIST}{run.pk}/cancel/")
    refused = 401 if who == "anonymous" else 403
    assert cancel.status_code == (200 if write else refused)
    create = client.post(LIST, {"days": 7, "proposals": []}, format="json")
    if write:
        assert create.status_code == 202
    else:
        assert create.status_code == refused
        assert PlanRun.objects.count() == 1  # nothing made


def test_a_lead_reads_totals_and_classes_but_only_their_teams_rows(api_client, people, make_run):
    run = make_run()
    vision, nlp = people["vision"].pk, people["nlp"].pk
    lead = as_user(api_client, people, "alice").get(f"{LIST}{run.pk}/").json()
    for s in lead["results"]["scenarios"]:
        assert {row["team"] for row in s["teams"]} == {vision}
        assert all(row["team"] == vision for row in s["never_ran"])
        assert len(s["classes"]) == 2  # cluster-wide aggregates stay
        assert s["totals"]["never_ran"] == len(
            run.results["scenarios"][lead["results"]["scenarios"].index(s)]["never_ran"]
        )
    assert lead["results"]["fidelity"]["sentence"]
    admin = as_user(api_client, people, "admin").get(f"{LIST}{run.pk}/").json()
    assert {row["team"] for row in admin["results"]["scenarios"][0]["teams"]} == {vision, nlp}
    assert len(admin["results"]["scenarios"][0]["never_ran"]) == 2
    run.refresh_from_db()  # the stored results were not cut down by the lead's read
    assert len(run.results["scenarios"][0]["teams"]) == 2


def test_the_list_leaves_results_out(api_client, people, make_run):
    make_run()
    rows = as_user(api_client, people, "admin").get(LIST).json()["results"]
    assert len(rows) == 1 and "results" not in rows[0] and rows[0]["state"] == "succeeded"


def test_create_answers_202_with_the_queued_run_and_audits_it(
    api_client, people, inventory, django_capture_on_commit_callbacks, monkeypatch
):
    sent = []
    monkeypatch.setattr("planner.runs.current_app.send_task", lambda name, args: sent.append((name, args)))
    body = {
        "days": 14,
        "proposals": [
            {
                "name": "H100s time-sliced",
                "changes": [{"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": 2}],
            }
        ],
        "options": {"preemption": False, "suggest": 2},
    }
    with django_capture_on_commit_callbacks(execute=True):
        response = as_user(api_client, people, "admin").post(LIST, body, format="json")
    assert response.status_code == 202, response.json()
    data = response.json()
    assert data["state"] == "queued" and data["results"] is None
    assert data["options"] == {"preemption": False, "borrowing": True, "suggest": 2}
    assert data["proposals"][0]["name"] == "H100s time-sliced"
    assert data["proposals"][0]["changes"][0]["type"] == "time_slicing"
    assert sent == [("planner.tasks.run_plan", [data["id"]])]
    event = AuditEvent.objects.get(action=PlannerAuditAction.PLAN_CREATE)
    assert event.actor == people["admin"] and event.object_id == str(data["id"])
    assert event.after["proposals"] == ["H100s time-sliced"]


def test_create_names_every_problem_at_once(api_client, people, inventory):
    body = {
        "days": 120,
        "proposals": [
            {"name": "a", "changes": [{"type": "mig", "nodes": []}, {"type": "teleport"}]},
            {"name": "A", "changes": [{"type": "time_slicing", "nodes": ["gpu-h100-01"], "replicas": 0}]},
            {"name": "ghost", "changes": [{"type": "remove_nodes", "nodes": ["no-such-node"]}]},
        ],
        "options": {"suggest": 9, "turbo": True},
    }
    response = as_user(api_client, people, "admin").post(LIST, body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert "days" in errors
    assert "proposals[0].changes[0].nodes" in errors and "proposals[0].changes[0].preset" in errors
    assert "proposals[0].changes[1].type" in errors
    assert "proposals[1].name" in errors and "proposals[1].changes[0].replicas" in errors
    assert any("no-such-node" in m for m in errors["proposals[2]"])  # planner.proposals' check, against the cluster
    assert "options.suggest" in errors and "options.turbo" in errors
    assert not PlanRun.objects.exists() and not AuditEvent.objects.filter(action="plan.create").exists()


def test_cancel_a_queued_run_ends_it_and_an_ended_one_is_409(api_client, people, make_run):
    queued = make_run(state=PlanState.QUEUED, results=None)
    client = as_user(api_client, people, "admin")
    answer = client.post(f"{LIST}{queued.pk}/cancel/")
    assert answer.status_code == 200 and answer.json()["state"] == "cancelled"
    event = AuditEvent.objects.get(action=PlannerAuditAction.PLAN_CANCEL)
    assert event.object_id == str(queued.pk) and event.before == {"state": "queued"}
    again = client.post(f"{LIST}{queued.pk}/cancel/")
    assert again.status_code == 409 and "already cancelled" in again.json()["detail"]
    assert AuditEvent.objects.filter(action=PlannerAuditAction.PLAN_CANCEL).count() == 1


def test_cancel_a_running_run_asks_the_worker(api_client, people, make_run):
    running = make_run(state=PlanState.RUNNING, results=None)
    answer = as_user(api_client, people, "admin").post(f"{LIST}{running.pk}/cancel/").json()
    assert answer["state"] == "running" and answer["cancel_requested"] is True


def read_csv(response) -> list[dict]:
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_csv_has_a_row_per_scenario_and_scope(api_client, people, make_run):
    run = make_run()
    rows = read_csv(as_user(api_client, people, "admin").get(f"{LIST}{run.pk}/results.csv", HTTP_ACCEPT="text/csv"))
    assert [(r["scenario"], r["scope"]) for r in rows[:5]] == [
        ("baseline", "total"),
        ("baseline", "team"),
        ("baseline", "team"),
        ("baseline", "class"),
        ("baseline", "class"),
    ]
    assert len(rows) == 3 * 5
    total = rows[0]
    assert total["wait_p50_s"] == "60" and total["gpu_hours"] == "100" and total["never_ran"] == "2"
    assert total["capacity_gpus"] == "64" and total["stranded_gpu_hours"] == "3.5"
    assert {r["name"] for r in rows if r["scope"] == "team"} == {"Computer Vision", "'=Language Models"}
    assert any(r["id"] == "-1" for r in rows if r["scope"] == "class")  # a class the proposal creates
    suggested = [r for r in rows if r["scenario"] == "Suggested layout 1"]
    assert suggested[0]["origin"] == "suggested" and suggested[0]["wait_p50_s"] == "20"


def test_csv_errors_answer_json(api_client, people, make_run):
    client = as_user(api_client, people, "admin")
    missing = client.get(f"{LIST}999/results.csv?format=csv")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/json"
    running = make_run(state=PlanState.RUNNING, results=None)
    early = client.get(f"{LIST}{running.pk}/results.csv", HTTP_ACCEPT="text/csv")
    assert early.status_code == 409 and "has no results" in early.json()["detail"]


def test_a_leads_csv_has_only_their_teams_rows(api_client, people, make_run):
    run = make_run()
    rows = read_csv(as_user(api_client, people, "alice").get(f"{LIST}{run.pk}/results.csv"))
    assert {r["id"] for r in rows if r["scope"] == "team"} == {str(people["vision"].pk)}
    assert sum(1 for r in rows if r["scope"] == "total") == 3


def test_the_schema_has_the_planner(openapi_schema):
    schema = openapi_schema
    paths = schema["paths"]
    assert set(paths["/api/v1/planner/runs/"]) >= {"get", "post"}
    assert "post" in paths["/api/v1/planner/runs/{id}/cancel/"]
    assert "text/csv" in paths["/api/v1/planner/runs/{id}/results.csv"]["get"]["responses"]["200"]["content"]
    assert "202" in paths["/api/v1/planner/runs/"]["post"]["responses"]
