"""Issue 31, item 15 (ux-walk 2, "Admin usage for all teams" and "No per-user GPU-hours"): the usage API answers an
admin's ``team=all`` with every team, refuses it to anyone else in words that say why, and breaks GPU-hours down per
member, in the API and on the team page: a lead (and an admin) sees every member, a researcher their own."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from gpus.models import ResourceClass
from jobs.choices import JobState
from jobs.models import Job
from telemetry import samples
from tests.factories import member

DAY = datetime(2026, 11, 2, tzinfo=UTC)
RANGE = {"start": "2026-11-01", "end": "2026-11-03"}


def ran(team, owner, hours: float, count: int = 1, start: datetime = DAY, node: str = "gpu-h100-01") -> Job:
    rc = ResourceClass.objects.filter(kind="gpu").order_by("key").first()
    return Job.objects.create(
        team=team, owner=owner, name="j", image="x/y:1", resource_class=rc, count=count, state=JobState.SUCCEEDED,
        node_name=node, started_at=start, finished_at=start + timedelta(hours=hours),
    )  # fmt: skip


@pytest.fixture
def history(inventory, people):
    """vision: alice (lead) held 2 GPUs for 3 h, carol (member) 1 GPU for 5 h; nlp: bob 4 GPUs for 1 h."""
    carol = member(people["vision"])
    ran(people["vision"], people["alice"], 3, count=2)
    ran(people["vision"], carol, 5)
    ran(people["nlp"], people["bob"], 1, count=4)
    return {**people, "carol": carol}


def usage(api_client, user, **query):
    api_client.force_authenticate(user)
    return api_client.get("/api/v1/usage/", {**RANGE, **query})


def by_member(body) -> dict[tuple[str, str], float]:
    return {(m["team"], m["user"]): m["allocated_gpu_hours"] for m in body["members"]}


def test_an_admin_reads_every_team_with_team_all(api_client, history):
    response = usage(api_client, history["admin"], team="all")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["team"] == "all"
    teams = {t["team"]: t["allocated_gpu_hours"] for t in body["teams"]}
    assert teams == {"vision": pytest.approx(11.0), "nlp": pytest.approx(4.0)}
    assert sum(d["allocated_gpu_hours"] for d in body["days"]) == pytest.approx(15.0)
    assert by_member(body) == {
        ("vision", "alice"): pytest.approx(6.0),
        ("vision", "carol"): pytest.approx(5.0),
        ("nlp", "bob"): pytest.approx(4.0),
    }
    as_csv = usage(api_client, history["admin"], team="all", output="csv")
    rows = list(csv.reader(io.StringIO(as_csv.content.decode())))
    assert {(r[0], r[1]) for r in rows[1:]} == {(d, t) for d in ("2026-11-01", "2026-11-02", "2026-11-03")
                                                for t in ("nlp", "vision")}  # fmt: skip


@pytest.mark.parametrize("who", ["alice", "carol", "bob", "outsider"])
def test_team_all_is_refused_to_anyone_but_an_admin_saying_why(api_client, history, who):
    response = usage(api_client, history[who], team="all")
    assert response.status_code == 403, response.json()
    detail = response.json()["detail"]
    assert "that you belong to" not in detail
    assert detail.startswith("Only admins read every team's usage (team=all)"), detail


def test_an_admin_asking_for_a_team_that_does_not_exist_is_not_told_about_belonging(api_client, history):
    response = usage(api_client, history["admin"], team="vizion")
    assert response.status_code == 404
    assert response.json()["detail"] == "No team 'vizion'. Give a team's slug, or team=all for every team."


def test_a_lead_sees_every_member_and_a_researcher_their_own(api_client, history):
    lead = usage(api_client, history["alice"], team="vision").json()
    assert by_member(lead) == {("vision", "alice"): pytest.approx(6.0), ("vision", "carol"): pytest.approx(5.0)}
    own = usage(api_client, history["carol"], team="vision").json()
    assert by_member(own) == {("vision", "carol"): pytest.approx(5.0)}
    assert own["teams"] == [
        {"team": "vision", "allocated_gpu_hours": 11.0, "used_gpu_hours": 0.0, "efficiency_percent": 0.0,
         "preemption_lost_gpu_hours": 0.0, "energy_kwh": None, "joules_per_gpu_hour": None}
    ]  # fmt: skip


def test_members_used_hours_come_from_the_telemetry_of_their_own_jobs(api_client, history, settings):
    settings.PORTAL_TELEMETRY_ROLLUP_LAG = 0
    job = Job.objects.get(owner=history["carol"])
    readings = [
        samples.Reading(ts=job.started_at + timedelta(seconds=30 * i), node_name="gpu-h100-01",
                        gpu_uuid="GPU-00000000-aaaa", util_pct=50.0)
        for i in range(120)
    ]  # fmt: skip
    Job.objects.filter(pk=job.pk).update(finished_at=None, state=JobState.RUNNING)
    samples.store(readings, "agent")
    samples.rollup(now=job.started_at + timedelta(hours=1, minutes=5))
    members = {m["user"]: m for m in usage(api_client, history["alice"], team="vision").json()["members"]}
    assert members["carol"]["used_gpu_hours"] == pytest.approx(0.5)  # one hour at 50 % of one GPU
    assert members["alice"]["used_gpu_hours"] == 0.0


def test_the_team_page_breaks_gpu_hours_down_by_member(client, history):
    query = "?start=2026-11-01&end=2026-11-03"
    client.force_login(history["alice"])
    page = client.get("/teams/vision/" + query).content.decode()
    assert 'data-testid="usage-members"' in page
    assert 'data-member="alice"' in page and 'data-member="carol"' in page
    client.force_login(history["carol"])
    page = client.get("/teams/vision/" + query).content.decode()
    assert 'data-member="carol"' in page and 'data-member="alice"' not in page
