"""Issue 35 item 5: usage per person, like ``sreport``. Each person sees their own GPU-hours by resource class and
month, with the jobs that ran, the GPU-hours kept busy, idle and lost to preemption, and the energy drawn; a lead
sees every member of the team, an admin every team at once (``team=all``); anyone else asking for every team is
refused with 403, and for a team not theirs with 404 — in the API, its CSV and on the page alike."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpus.models import ResourceClass
from jobs.choices import EventKind, JobState
from jobs.models import Job, JobEvent
from telemetry import samples
from telemetry.choices import TelemetrySource
from tests.factories import member

CAROL_RUN = datetime(2025, 11, 5, 10, 0, tzinfo=UTC)
QUERY = {"month": "2025-11", "months": 2}


def ran(team, owner, start: datetime, hours: float, count: int = 1, state=JobState.SUCCEEDED) -> Job:
    rc = ResourceClass.objects.filter(kind="gpu").order_by("key").first()
    return Job.objects.create(
        team=team, owner=owner, name="j", image="x/y:1", resource_class=rc, count=count, state=state,
        node_name="gpu-h100-01", started_at=start, finished_at=None if state == JobState.RUNNING else
        start + timedelta(hours=hours),
    )  # fmt: skip


@pytest.fixture
def history(inventory, people, settings):
    """vision: alice (lead) held 2 GPUs from 31 Oct 22:00 to 1 Nov 02:00; carol (member) 1 GPU for an hour on 5 Nov,
    idle (5 %) at 300 W, and a quarter GPU-hour lost to a preemption; nlp: bob held 4 GPUs for an hour on 10 Nov."""
    settings.PORTAL_TELEMETRY_ROLLUP_LAG = 0
    carol = member(people["vision"])
    ran(people["vision"], people["alice"], datetime(2025, 10, 31, 22, 0, tzinfo=UTC), 4, count=2)
    job = ran(people["vision"], carol, CAROL_RUN, 1, state=JobState.RUNNING)
    readings = [
        samples.Reading(ts=CAROL_RUN + timedelta(seconds=30 * i), node_name="gpu-h100-01",
                        gpu_uuid="GPU-00000000-aaaa", util_pct=5.0, energy_mj=50_000_000 + 9_000_000 * i)
        for i in range(120)
    ]  # fmt: skip
    samples.store(readings, TelemetrySource.AGENT)
    samples.rollup(now=CAROL_RUN + timedelta(hours=1, minutes=5))
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=CAROL_RUN + timedelta(hours=1))
    JobEvent.objects.create(
        job=job, kind=EventKind.REQUEUED, at=CAROL_RUN + timedelta(minutes=30), data={"lost_gpu_hours": 0.25}
    )
    ran(people["nlp"], people["bob"], datetime(2025, 11, 10, 9, 0, tzinfo=UTC), 1, count=4)
    return {**people, "carol": carol}


def report(api_client, user, **query):
    api_client.force_authenticate(user)
    return api_client.get("/api/v1/usage/people/", {**QUERY, **query})


def hours(body) -> dict[tuple[str, str, str], float]:
    return {(r["month"], r["team"], r["user"]): r["gpu_hours"] for r in body["rows"]}


def test_a_person_sees_their_own_hours_jobs_idle_preempted_and_energy_by_class_and_month(api_client, history):
    response = report(api_client, history["carol"])
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["scope"] == "me" and body["months"] == ["2025-10", "2025-11"]
    [row] = body["rows"]
    key = ResourceClass.objects.filter(kind="gpu").order_by("key").first().key
    assert (row["month"], row["team"], row["user"], row["class"]) == ("2025-11", "vision", "carol", key)
    assert row["gpu_hours"] == pytest.approx(1.0) and row["jobs"] == 1
    assert row["used_gpu_hours"] == pytest.approx(0.05)  # an hour at 5 %
    assert row["idle_gpu_hours"] == pytest.approx(1.0)  # every 5 minutes under the 10 % idle threshold
    assert row["preempted_gpu_hours"] == pytest.approx(0.25)
    # 119 intervals of 30 s at 300 W (9 kJ each) between the 120 readings.
    assert row["energy_kwh"] == pytest.approx(119 * 9_000 / 3.6e6, abs=1e-3)
    assert row["joules_per_gpu_hour"] == 119 * 9_000
    assert "co2e_kg" not in row and body["carbon_g_per_kwh"] is None
    assert body["total"]["gpu_hours"] == pytest.approx(1.0)


def test_a_lead_sees_every_member_by_month_and_a_member_their_own(api_client, history):
    lead = report(api_client, history["alice"], team="vision").json()
    assert hours(lead) == {
        ("2025-10", "vision", "alice"): pytest.approx(4.0),  # split at the month's end
        ("2025-11", "vision", "alice"): pytest.approx(4.0),
        ("2025-11", "vision", "carol"): pytest.approx(1.0),
    }
    assert [(p["user"], p["gpu_hours"], p["jobs"]) for p in lead["people"]] == [("alice", 8.0, 1), ("carol", 1.0, 1)]
    own = report(api_client, history["carol"], team="vision").json()
    assert hours(own) == {("2025-11", "vision", "carol"): pytest.approx(1.0)}


def test_an_admin_sees_every_team_at_once(api_client, history):
    body = report(api_client, history["admin"], team="all").json()
    assert body["scope"] == "all"
    people = {(p["team"], p["user"]) for p in body["people"]}
    assert people == {("vision", "alice"), ("vision", "carol"), ("nlp", "bob")}
    assert body["total"]["gpu_hours"] == pytest.approx(13.0)
    # Joules per GPU-hour count the hours that have energy readings only (carol's), not those of jobs without.
    assert body["total"]["joules_per_gpu_hour"] == 119 * 9_000
    assert {p["user"]: p["energy_kwh"] for p in body["people"]}["alice"] is None


@pytest.mark.parametrize(
    ("who", "team", "status"),
    [("alice", "all", 403), ("carol", "all", 403), ("bob", "all", 403), ("outsider", "all", 403),
     ("bob", "vision", 404), ("outsider", "vision", 404), ("carol", "nlp", 404)],
)  # fmt: skip
def test_no_one_but_an_admin_reads_every_team_and_no_one_another_team(api_client, client, history, who, team, status):
    response = report(api_client, history[who], team=team)
    assert response.status_code == status, response.json()
    if status == 403:
        assert response.json()["detail"].startswith("Only admins read every team's usage (team=all)")
    assert report(api_client, history[who], team=team, output="csv").status_code == status
    client.force_login(history[who])
    page = client.get("/usage/", {"team": team})
    assert page.status_code == status
    assert b"alice" not in page.content or who == "alice"


def test_the_query_count_does_not_grow_with_jobs_people_or_months(api_client, history):
    def count(**query) -> int:
        api_client.force_authenticate(history["admin"])
        with CaptureQueriesContext(connection) as queries:
            assert api_client.get("/api/v1/usage/people/", {**QUERY, "team": "all", **query}).status_code == 200
        return len(queries)

    before = count()
    for n in range(6):
        ran(history["nlp"], member(history["nlp"], f"user{n}"), datetime(2025, 10, 3 + n, tzinfo=UTC), 2)
    assert count() == before
    assert count(months=12) == before


def test_csv_has_a_row_per_month_class_and_person_and_emissions_where_a_carbon_factor_is_set(
    api_client, history, settings
):
    settings.PORTAL_CARBON_G_PER_KWH = 400
    response = report(api_client, history["carol"], output="csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert 'filename="gpu-usage-me-2025-10-2025-11.csv"' in response["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == 1 and rows[0]["user"] == "carol" and rows[0]["month"] == "2025-11"
    assert float(rows[0]["co2e_kg"]) == pytest.approx(119 * 9_000 / 3.6e6 * 0.4, abs=1e-3)
    assert float(rows[0]["idle_gpu_hours"]) == pytest.approx(1.0)


def test_a_bad_query_is_refused_listing_every_problem(api_client, history):
    response = report(api_client, history["carol"], month="2025-13", months=20, output="xml")
    assert response.status_code == 400
    assert set(response.json()) >= {"month", "months", "output"}


def test_the_usage_page_shows_people_to_a_lead_and_their_own_rows_to_a_member(client, history):
    client.force_login(history["alice"])
    page = client.get("/usage/", {**QUERY, "team": "vision"}).content.decode()
    assert 'data-person="vision/alice"' in page and 'data-person="vision/carol"' in page
    assert 'data-row="2025-10/vision/alice/' in page
    client.force_login(history["carol"])
    page = client.get("/usage/", QUERY).content.decode()
    assert 'data-testid="usage-people"' not in page  # one's own usage has no per-person table
    assert 'data-row="2025-11/vision/carol/' in page and "/vision/alice/" not in page
    assert 'data-testid="people-usage-energy"' in page
    page = client.get("/usage/", {**QUERY, "team": "vision"}).content.decode()
    assert "/vision/alice/" not in page


def test_a_job_s_page_shows_the_energy_its_gpus_drew(client, history, settings):
    settings.PORTAL_CARBON_G_PER_KWH = 250
    job = Job.objects.get(owner=history["carol"])
    client.force_login(history["carol"])
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    energy = page.split('data-role="energy">', 1)[1].split("</dd>", 1)[0]
    kwh = 119 * 9_000 / 3.6e6
    assert f"{kwh:.3f} kWh" in energy and f"{119 * 9_000:,} J per GPU-hour" in energy
    assert f"{kwh * 0.25:.3f} kg CO₂e" in energy
