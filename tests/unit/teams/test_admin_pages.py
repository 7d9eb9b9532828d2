"""The admins' pages of issue 18 besides teams and members: a team's notebook policy in hours, the resource
classes (alias, description, hidden) and the admin area's front page. Admins only; everything audited."""

from __future__ import annotations

import pytest
from django.test import override_settings

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs.models import NotebookPolicy
from jobs.teams.admin_forms import parse_duration
from tests.pages import current_sections
from tests.sim_objects import H100

POLICY = "/teams/vision/notebook-policy/"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("8 hours", 28800), ("8h", 28800), ("1.5 hours", 5400), ("90 minutes", 5400), ("2 days", 172800), ("4", 14400)],
)
def test_durations_are_read_in_words(text, seconds):
    assert parse_duration(text) == seconds


@override_settings(
    PORTAL_NOTEBOOK_TTL_SECONDS=8 * 3600,
    PORTAL_NOTEBOOK_MAX_TTL_SECONDS=24 * 3600,
    PORTAL_NOTEBOOK_IDLE_TIMEOUT_SECONDS=3600,
    PORTAL_NOTEBOOK_MAX_IDLE_TIMEOUT_SECONDS=4 * 3600,
)
def test_without_a_row_the_policy_page_shows_the_portal_defaults_in_hours(client, people):
    client.force_login(people["admin"])
    response = client.get(POLICY)
    assert response.status_code == 200
    page = response.content.decode()
    assert "The portal&#x27;s defaults apply" in page or "The portal's defaults apply" in page
    assert 'value="8 hours"' in page and 'value="24 hours"' in page and 'value="1 hour"' in page
    assert "<dd>4 hours</dd>" in page


def test_an_admin_sets_a_policy_in_hours_and_it_is_audited(client, people):
    client.force_login(people["admin"])
    values = {
        "ttl_seconds": "6 hours",
        "max_ttl_seconds": "12 hours",
        "idle_timeout_seconds": "45 minutes",
        "max_idle_timeout_seconds": "2h",
    }
    assert client.post(POLICY, values).status_code == 302
    policy = NotebookPolicy.objects.get(team=people["vision"])
    stored = [getattr(policy, field) for field in ("ttl_seconds", "max_ttl_seconds", "idle_timeout_seconds")]
    assert stored + [policy.max_idle_timeout_seconds] == [21600, 43200, 2700, 7200]
    event = AuditEvent.objects.get(action="notebook.policy")
    assert event.before is None and event.after["ttl_seconds"] == 21600 and event.team == people["vision"]
    assert 'value="6 hours"' in client.get(POLICY).content.decode()
    assert client.post(POLICY + "reset/").status_code == 302
    assert not NotebookPolicy.objects.filter(team=people["vision"]).exists()
    reset = AuditEvent.objects.filter(action="notebook.policy").order_by("-id").first()
    assert reset.before["ttl_seconds"] == 21600 and reset.after is None


def test_a_policy_lists_every_problem_at_once(client, people):
    client.force_login(people["admin"])
    values = {
        "ttl_seconds": "10 hours",
        "max_ttl_seconds": "8 hours",
        "idle_timeout_seconds": "soon",
        "max_idle_timeout_seconds": "90 days",
    }
    response = client.post(POLICY, values)
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "must be at least the session length (10 hours)" in errors["max_ttl_seconds"][0]
    assert 'e.g. "8 hours"' in errors["idle_timeout_seconds"][0]
    assert "between 10 minutes and 30 days" in errors["max_idle_timeout_seconds"][0]
    assert not NotebookPolicy.objects.exists() and not AuditEvent.objects.filter(action="notebook.policy").exists()


@pytest.mark.parametrize("who", ["alice", "bob"])
def test_only_admins_see_the_policy_and_class_pages(client, people, inventory, who):
    client.force_login(people[who])
    assert client.get(POLICY).status_code == 404
    assert client.post(POLICY, {"ttl_seconds": "1 hour"}).status_code == 404
    assert client.get("/resource-classes/manage/").status_code == 404
    rc = ResourceClass.objects.get(key=H100)
    assert client.post(f"/resource-classes/{rc.pk}/manage/", {f"rc-{rc.pk}-hidden": "on"}).status_code == 404
    assert not ResourceClass.objects.get(pk=rc.pk).hidden


def test_an_admin_aliases_and_hides_a_class_in_plain_words_and_it_is_audited(client, people, inventory):
    rc = ResourceClass.objects.get(key=H100)
    client.force_login(people["admin"])
    page = client.get("/resource-classes/manage/").content.decode()
    assert "Hidden: researchers do not see or request it" in page
    response = client.post(
        f"/resource-classes/{rc.pk}/manage/",
        {f"rc-{rc.pk}-alias": "H100 (training)", f"rc-{rc.pk}-description": "Big runs", f"rc-{rc.pk}-hidden": "on"},
    )
    assert response.status_code == 302
    rc.refresh_from_db()
    assert (rc.alias, rc.description, rc.hidden) == ("H100 (training)", "Big runs", True)
    event = AuditEvent.objects.get(action="resource_class.update")
    assert event.before == {"alias": "", "description": "", "hidden": False}
    assert event.after == {"alias": "H100 (training)", "description": "Big runs", "hidden": True}
    client.force_login(people["alice"])
    assert rc.key not in client.get("/resource-classes/").content.decode()


def test_the_admin_area_is_in_the_navigation_for_admins_only(client, people):
    client.force_login(people["admin"])
    page = client.get("/manage/").content.decode()
    assert '<a href="/manage/" aria-current="page">Admin</a>' in page
    assert "/audit/" in page and "/resource-classes/manage/" in page
    client.force_login(people["alice"])
    assert 'href="/manage/"' not in client.get("/teams/").content.decode()


@pytest.mark.parametrize("url", ["/manage/", "/teams/new/", "/teams/vision/edit/", "/audit/", POLICY])
def test_the_admin_pages_mark_admin_in_the_navigation(client, people, url):
    client.force_login(people["admin"])
    response = client.get(url)
    assert response.status_code == 200
    assert current_sections(response.content.decode()) == ["Admin"]
