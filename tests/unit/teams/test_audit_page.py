"""The audit log page for admins (issue 18): filters by actor, team, action, object and days; pages; a CSV of
exactly the filtered rows with a header, streamed, and every cell a spreadsheet would run as a formula escaped."""

from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from accounts.choices import AuditAction
from accounts.views_audit import CSV_HEADER, PAGE_SIZE, csv_safe
from core import audit
from core.models import AuditEvent
from gpus.choices import InventoryAuditAction
from jobs.choices import JobAuditAction
from planner.choices import PlannerAuditAction


@pytest.fixture
def events(people):
    admin, vision, nlp = people["admin"], people["vision"], people["nlp"]
    made = [
        audit.record(admin, AuditAction.TEAM_CREATE, vision, after={"slug": "vision"}, team=vision),
        audit.record(people["alice"], AuditAction.MEMBER_ADD, object_type="portal.Membership", object_id="7",
                     object_repr="=HYPERLINK(\"http://evil\")", after={"user": "@carol", "role": "member"},
                     team=vision),
        audit.record(admin, JobAuditAction.QUOTA_SET, object_type="jobs.Quota", object_id="3", object_repr="+1 quota",
                     before={"guaranteed": 1}, after={"guaranteed": 2}, team=nlp),
        audit.record(None, AuditAction.TOKEN_ISSUE, object_type="portal.APIToken", object_id="9",
                     object_repr="-2 token"),
    ]  # fmt: skip
    old = made[0]
    AuditEvent.objects.filter(pk=old.pk).update(when=datetime(2026, 1, 5, 12, 0, tzinfo=old.when.tzinfo))
    return made


def rows(response) -> list[dict]:
    body = b"".join(response.streaming_content).decode()
    return list(csv.DictReader(io.StringIO(body)))


@pytest.mark.parametrize("who", ["alice", "bob", "outsider"])
def test_only_admins_see_the_audit_log_or_export_it(client, people, events, who):
    client.force_login(people[who])
    assert client.get("/audit/").status_code == 404
    assert client.get("/audit.csv").status_code == 404


def test_the_page_lists_events_with_the_verbs_in_words(client, people, events):
    client.force_login(people["admin"])
    response = client.get("/audit/")
    assert response.status_code == 200
    assert response.context["page"].paginator.count == 4
    page = response.content.decode()
    assert "Member added to a team" in page and "Quota set" in page and "API token issued" in page


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({"actor": "alice"}, {"team.member_add"}),
        ({"actor": "system"}, {"token.issue"}),
        ({"team": "nlp"}, {"quota.set"}),
        ({"action": "team.create"}, {"team.create"}),
        ({"object_type": "jobs.quota", "object_id": "3"}, {"quota.set"}),
        ({"start": "2026-01-05", "end": "2026-01-05"}, {"team.create"}),
        ({"team": "vision", "start": "2026-02-01"}, {"team.member_add"}),
    ],
)
def test_filters_narrow_the_page_and_the_csv_alike(client, people, events, query, expected):
    client.force_login(people["admin"])
    page = client.get("/audit/", query).context["page"]
    assert {e.action for e in page.object_list} == expected
    assert {r["action"] for r in rows(client.get("/audit.csv", query))} == expected


def test_a_bad_filter_says_what_to_fix(client, people, events):
    client.force_login(people["admin"])
    response = client.get("/audit/", {"start": "2026-02-10", "end": "2026-02-01", "action": "no.such"})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "swap them" in errors["end"][0] and "action" in errors
    assert client.get("/audit.csv", {"start": "yesterday"}).status_code == 400


def test_the_csv_has_a_header_and_escapes_formulas(client, people, events):
    client.force_login(people["admin"])
    response = client.get("/audit.csv")
    assert response.status_code == 200 and response.streaming
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert "attachment" in response["Content-Disposition"]
    body = b"".join(response.streaming_content).decode()
    assert body.splitlines()[0] == ",".join(CSV_HEADER)
    parsed = {r["action"]: r for r in csv.DictReader(io.StringIO(body))}
    member = parsed["team.member_add"]
    assert member["object"] == '\'=HYPERLINK("http://evil")'
    assert member["action_label"] == "Member added to a team" and member["team"] == "vision"
    assert member["after"] == '{"role": "member", "user": "@carol"}'
    assert parsed["quota.set"]["object"] == "'+1 quota"
    assert parsed["token.issue"]["object"] == "'-2 token" and parsed["token.issue"]["actor"] == "system"
    assert parsed["quota.set"]["before"] == '{"guaranteed": 1}'


@pytest.mark.parametrize(
    ("value", "cell"),
    [("=1+2", "'=1+2"), ("+A1", "'+A1"), ("-5", "'-5"), ("@SUM(A1)", "'@SUM(A1)"), ("\tx", "'\tx"), ("ok", "ok"),
     (None, ""), ("a=b", "a=b")],
)  # fmt: skip
def test_csv_safe_prefixes_formula_starts(value, cell):
    assert csv_safe(value) == cell


def test_the_page_is_paginated(client, people):
    for n in range(PAGE_SIZE + 3):
        audit.record(people["admin"], AuditAction.TEAM_UPDATE, people["vision"], object_repr=f"t{n}")
    client.force_login(people["admin"])
    first = client.get("/audit/").context["page"]
    assert len(first.object_list) == PAGE_SIZE and first.paginator.num_pages == 2
    assert len(client.get("/audit/", {"page": 2}).context["page"].object_list) == 3
    assert len(rows(client.get("/audit.csv"))) == PAGE_SIZE + 3


def _row(html: str, event) -> str:
    """The table row of ``event`` in the page's HTML."""
    start = html.index(f'data-event="{event.pk}"')
    return html[start : html.index("</tr>", start)]


def test_each_object_links_to_its_page_while_it_exists(client, people, django_assert_max_num_queries):
    """Issue 31, item 15: an audited object that has a page links to it; one deleted since, or of a kind with no
    page (an API token), is named without a link. The objects of a page are read in one query per kind."""
    from gpus.models import ResourceClass
    from jobs.models import Quota
    from planner.models import PlanRun
    from tests.factories import ResourceClassFactory

    admin = people["admin"]
    now = timezone.now()
    run = PlanRun.objects.create(created_by=admin, window_start=now - timedelta(days=1), window_end=now)
    gone = PlanRun.objects.create(created_by=admin, window_start=now - timedelta(days=1), window_end=now)
    rc = ResourceClassFactory()
    quota = Quota.objects.create(team=people["nlp"], resource_class=rc, guaranteed=1, limit=2)
    linked = [
        audit.record(admin, PlannerAuditAction.PLAN_CREATE, run, after={"proposals": []}),
        audit.record(admin, InventoryAuditAction.CLASS_UPDATE, rc, before={"hidden": False}, after={"hidden": True}),
        audit.record(admin, JobAuditAction.QUOTA_SET, quota, after={"guaranteed": 1}, team=people["nlp"]),
    ]
    unlinked = [
        audit.record(admin, PlannerAuditAction.PLAN_CREATE, gone, after={"proposals": []}),
        audit.record(None, AuditAction.TOKEN_ISSUE, object_type="portal.APIToken", object_id="9", object_repr="ci"),
        audit.record(None, AuditAction.TOKEN_ISSUE, object_type="no.SuchModel", object_id="x", object_repr="old"),
        audit.record(None, AuditAction.TOKEN_ISSUE, object_type="planner.PlanRun", object_id="abc", object_repr="?"),
    ]
    gone.delete()
    client.force_login(admin)
    with django_assert_max_num_queries(12):
        html = client.get("/audit/").content.decode()
    assert f'<a href="/planner/{run.pk}/"' in _row(html, linked[0])
    assert f'<a href="/resource-classes/#rc-{rc.pk}"' in _row(html, linked[1])
    assert '<a href="/teams/nlp/"' in _row(html, linked[2]).split('data-col="object"')[1]
    assert ResourceClass.objects.filter(pk=rc.pk).exists()
    for event in unlinked:
        row = _row(html, event)
        assert event.object_repr in row and "<a " not in row.split('data-col="object"')[1].split("</td>")[0]


def test_the_change_shows_each_changed_field_before_and_after_in_words_not_json(client, people):
    """Issue 31, item 15: the change column was raw JSON. A change lists the fields that changed, each as
    before → after; one that only sets or only removes values lists them; nested objects are named by their path."""
    admin = people["admin"]
    changed = audit.record(
        admin, AuditAction.TEAM_UPDATE, people["vision"],
        before={"name": "Vision", "replicas": 4, "metric": "cpu", "hidden": False, "note": None},
        after={"name": "Vision", "replicas": 8, "metric": "cpu", "hidden": True, "note": "busy"},
    )  # fmt: skip
    created = audit.record(
        admin, AuditAction.TEAM_UPDATE, people["nlp"],
        after={"config_map": "gpu-operator/ts", "labels": {"nvidia.com/device-plugin.config": "ts8"}},
    )  # fmt: skip
    removed = audit.record(admin, AuditAction.TEAM_UPDATE, people["nlp"], before={"guaranteed": 2, "limit": 4})
    client.force_login(admin)
    response = client.get("/audit/")
    html = response.content.decode()
    row = _row(html, changed)
    change = row.split('data-col="change"')[1]
    assert '{"' not in change and '"}' not in change, "no raw JSON"
    assert re.search(r"replicas</dt>\s*<dd[^>]*><del>4</del>\s*→\s*<ins>8</ins>", change), change
    assert re.search(r"hidden</dt>\s*<dd[^>]*><del>no</del>\s*→\s*<ins>yes</ins>", change), change
    assert re.search(r"note</dt>\s*<dd[^>]*><del>—</del>\s*→\s*<ins>busy</ins>", change), change
    assert "metric" not in change and ">name<" not in change, "unchanged fields are left out"
    made = _row(html, created).split('data-col="change"')[1]
    assert re.search(r"labels › nvidia.com/device-plugin.config</dt>\s*<dd[^>]*><ins>ts8</ins>", made), made
    assert '{"' not in made
    dropped = _row(html, removed).split('data-col="change"')[1]
    assert re.search(r"guaranteed</dt>\s*<dd[^>]*><del>2</del>", dropped), dropped


def test_a_change_of_many_fields_shows_the_first_few_and_folds_the_rest(client, people):
    before = {f"field_{n:02d}": n for n in range(12)}
    after = {f"field_{n:02d}": n + 1 for n in range(12)}
    event = audit.record(people["admin"], AuditAction.TEAM_UPDATE, people["vision"], before=before, after=after)
    client.force_login(people["admin"])
    change = _row(client.get("/audit/").content.decode(), event).split('data-col="change"')[1]
    shown, folded = change.split("<details")
    assert shown.count("<dt") == 4 and folded.count("<dt") == 8
    assert "8 more fields" in folded
