"""Showback: allocated vs used GPU-hours per team and day, the CSV export, the charts on the pages, and the
utilisation API's scopes and permissions."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime, timedelta

import pytest

from gpus.models import ResourceClass
from jobs.choices import JobState
from jobs.models import Job
from jobs.usage import allocated_gpu_hours_by_day, team_usage_rows
from telemetry import samples

NOW = datetime(2026, 11, 3, 12, 0, tzinfo=UTC)


def make_job(people, team="vision", started=None, finished=None, count=2, key=None, state=JobState.SUCCEEDED):
    rc = ResourceClass.objects.get(key=key) if key else ResourceClass.objects.filter(kind="gpu").first()
    owner = people["alice"] if team == "vision" else people["bob"]
    return Job.objects.create(
        team=people[team], owner=owner, name="j", image="x/y:1", resource_class=rc, count=count, state=state,
        node_name="gpu-h100-01", started_at=started, finished_at=finished,
    )  # fmt: skip


def test_allocated_hours_split_at_midnight_and_weighted_by_class(inventory, people):
    make_job(people, started=datetime(2026, 11, 1, 22, 0, tzinfo=UTC), finished=datetime(2026, 11, 2, 1, 0, tzinfo=UTC))
    mig = ResourceClass.objects.filter(kind="mig", profile="3g.40gb").first()
    day2 = datetime(2026, 11, 2, tzinfo=UTC)
    make_job(people, started=day2 + timedelta(hours=10), finished=day2 + timedelta(hours=17), count=1, key=mig.key)
    hours = allocated_gpu_hours_by_day(
        [people["vision"].pk], datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 4, tzinfo=UTC), NOW
    )
    vision = people["vision"].pk
    assert hours[(vision, "2026-11-01")] == pytest.approx(4.0)  # 2 h × 2 GPUs
    assert hours[(vision, "2026-11-02")] == pytest.approx(2.0 + 7 * mig.gpu_fraction)


def test_used_hours_come_from_rollups_and_rows_cover_every_day(inventory, people, settings):
    settings.PORTAL_TELEMETRY_ROLLUP_LAG = 0
    job = make_job(people, started=datetime(2026, 11, 2, 10, 0, tzinfo=UTC), finished=None, state=JobState.RUNNING)
    readings = [
        samples.Reading(ts=job.started_at + timedelta(seconds=30 * i), node_name="gpu-h100-01",
                          gpu_uuid=f"GPU-0000000{g}-aaaa", util_pct=50.0)
        for i in range(120) for g in range(2)
    ]  # fmt: skip
    samples.store(readings, "agent")
    samples.rollup(now=datetime(2026, 11, 2, 11, 5, tzinfo=UTC))
    rows = team_usage_rows(people["vision"], date(2026, 11, 1), date(2026, 11, 2), NOW)
    assert [r["day"] for r in rows] == ["2026-11-01", "2026-11-02"]
    assert rows[0] == {
        "day": "2026-11-01", "team": "vision", "allocated": 0.0, "used": 0.0, "efficiency": None, "lost": 0.0,
        "joules": None, "energy_kwh": None, "joules_per_gpu_hour": None,
    }  # fmt: skip
    # One hour at 50% on two GPUs is one GPU-hour used; allocated runs from 10:00 to the end of the day.
    assert rows[1]["used"] == pytest.approx(1.0)
    assert rows[1]["allocated"] == pytest.approx(28.0)
    assert job.team == people["vision"]


def test_csv_export_has_a_row_per_day_and_refuses_bad_ranges(inventory, people, client):
    make_job(people, started=datetime(2026, 11, 1, 22, 0, tzinfo=UTC), finished=datetime(2026, 11, 2, 1, 0, tzinfo=UTC))
    client.force_login(people["alice"])
    response = client.get("/teams/vision/usage.csv", {"start": "2026-11-01", "end": "2026-11-03"})
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert 'filename="gpu-usage-vision-2026-11-01-2026-11-03.csv"' in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == [
        "date", "team", "allocated_gpu_hours", "used_gpu_hours", "efficiency_percent", "preemption_lost_gpu_hours",
        "energy_kwh", "joules_per_gpu_hour",
    ]  # fmt: skip
    assert [r[0] for r in rows[1:]] == ["2026-11-01", "2026-11-02", "2026-11-03"]
    assert rows[1][2] == "4.000" and rows[2][2] == "2.000"
    swapped = client.get("/teams/vision/usage.csv", {"start": "2026-11-03", "end": "2026-11-01"})
    assert swapped.status_code == 400 and "swap" in swapped.content.decode()
    garbage = client.get("/teams/vision/usage.csv", {"start": "soon"})
    assert garbage.status_code == 400 and "start" in garbage.content.decode()
    huge = client.get("/teams/vision/usage.csv", {"start": "2024-01-01", "end": "2026-01-01"})
    assert huge.status_code == 400 and "366" in huge.content.decode()
    # Another team's usage is not yours to see.
    assert client.get("/teams/nlp/usage.csv", {"start": "2026-11-01", "end": "2026-11-03"}).status_code == 404


def test_team_page_shows_the_usage_chart_and_node_pages_sparklines(inventory, people, client):
    samples.store(
        [samples.Reading(ts=datetime.now(UTC) - timedelta(minutes=m), node_name="gpu-h100-01",
                           gpu_uuid="GPU-00000001-aaaa", gpu_index=0, util_pct=70.0) for m in range(1, 30)],
        "agent",
    )  # fmt: skip
    client.force_login(people["alice"])
    team = client.get("/teams/vision/").content.decode()
    assert 'data-testid="team-usage"' in team and "GPU-hours allocated" in team
    nodes = client.get("/nodes/").content.decode()
    assert 'aria-label="Mean GPU utilisation, last hour: now 70%' in nodes
    node = client.get("/nodes/gpu-h100-01/", {"range": "1h"}).content.decode()
    assert 'class="chart"' in node and "mean 70%" in node
    assert 'aria-label="GPU utilisation, last hour: now 70%' in node  # the GPU row learned its UUID


def test_utilisation_api_scopes_and_visibility(inventory, people, api_client):
    now = datetime.now(UTC)
    job = make_job(people, started=now - timedelta(hours=1), state=JobState.RUNNING, count=1)
    samples.store(
        [samples.Reading(ts=now - timedelta(minutes=m), node_name="gpu-h100-01", gpu_uuid="GPU-00000001-aaaa",
                           gpu_index=0, util_pct=40.0) for m in range(1, 20)],
        "agent",
    )  # fmt: skip
    api_client.force_authenticate(people["alice"])
    body = api_client.get("/api/v1/utilisation/", {"scope": "job", "job": job.pk, "range": "1h"}).json()
    assert body["scope"] == "job" and body["step"] == 60 and body["points"]
    assert {p["util"] for p in body["points"]} == {40.0}
    node = api_client.get("/api/v1/utilisation/", {"scope": "node", "node": "gpu-h100-01"}).json()
    assert node["points"][-1]["util"] == 40.0
    gpu = api_client.get("/api/v1/utilisation/", {"scope": "gpu", "gpu": "GPU-00000001-aaaa", "range": "1h"})
    assert gpu.status_code == 200 and gpu.json()["points"]
    team = api_client.get("/api/v1/utilisation/", {"scope": "team", "team": "vision"}).json()
    assert team["points"][-1]["util"] == 40.0
    assert api_client.get("/api/v1/utilisation/", {"scope": "team", "team": "nlp"}).status_code == 404
    bad = api_client.get("/api/v1/utilisation/", {"scope": "galaxy"})
    assert bad.status_code == 400 and "scope" in bad.json()
    assert api_client.get("/api/v1/utilisation/", {"scope": "job"}).json() == {"job": ["Required with scope=job."]}
    assert api_client.get("/api/v1/utilisation/", {"range": "2y"}).status_code == 400
    api_client.force_authenticate(people["bob"])
    assert api_client.get("/api/v1/utilisation/", {"scope": "job", "job": job.pk}).status_code == 404
    api_client.force_authenticate(None)
    assert api_client.get("/api/v1/utilisation/").status_code in (401, 403)


def test_notifications_api_lists_only_your_own_and_marks_read(people, api_client):
    from core.notify import notify

    mine = notify(people["alice"], "job.idle", "Yours")
    notify(people["bob"], "job.idle", "Not yours")
    api_client.force_authenticate(people["alice"])
    listed = api_client.get("/api/v1/notifications/", {"unread": "true"}).json()
    titles = [n["title"] for n in listed["results"]] if isinstance(listed, dict) else [n["title"] for n in listed]
    assert titles == ["Yours"]
    assert api_client.post(f"/api/v1/notifications/{mine.pk}/read/").json()["read_at"] is not None
    listed = api_client.get("/api/v1/notifications/", {"unread": "true"}).json()
    assert (listed["count"] if isinstance(listed, dict) else len(listed)) == 0
    others = people["bob"].notifications.get()
    assert api_client.post(f"/api/v1/notifications/{others.pk}/read/").status_code == 404


def test_usage_api_for_pipelines_json_csv_and_refusals(inventory, people, api_client):
    from accounts.models import APIToken

    make_job(people, started=datetime(2026, 11, 1, 22, 0, tzinfo=UTC), finished=datetime(2026, 11, 2, 1, 0, tzinfo=UTC))
    _, raw = APIToken.issue(people["alice"], "showback", read_only=True)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    body = api_client.get("/api/v1/usage/", {"team": "vision", "start": "2026-11-01", "end": "2026-11-02"}, **auth)
    assert body.status_code == 200
    assert body.json()["days"] == [
        {"date": "2026-11-01", "allocated_gpu_hours": 4.0, "used_gpu_hours": 0.0, "efficiency_percent": 0.0,
         "energy_kwh": None, "joules_per_gpu_hour": None},
        {"date": "2026-11-02", "allocated_gpu_hours": 2.0, "used_gpu_hours": 0.0, "efficiency_percent": 0.0,
         "energy_kwh": None, "joules_per_gpu_hour": None},
    ]  # fmt: skip
    as_csv = api_client.get(
        "/api/v1/usage/", {"team": "vision", "start": "2026-11-01", "end": "2026-11-02", "output": "csv"}, **auth
    )
    assert as_csv["Content-Type"].startswith("text/csv") and as_csv.content.decode().count("\n") == 3
    backwards = api_client.get("/api/v1/usage/", {"team": "vision", "start": "2026-11-05", "end": "2026-11-01"}, **auth)
    assert backwards.status_code == 400 and "swap" in backwards.json()["range"][0]
    assert api_client.get("/api/v1/usage/", {"start": "2026-11-01", "end": "2026-11-02"}, **auth).status_code == 400
    other = api_client.get("/api/v1/usage/", {"team": "nlp", "start": "2026-11-01", "end": "2026-11-02"}, **auth)
    assert other.status_code == 404
