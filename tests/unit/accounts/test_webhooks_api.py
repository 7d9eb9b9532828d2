"""/api/v1/webhooks/: leads and admins only, the secret shown once, every problem listed at once, audited."""

from __future__ import annotations

import pytest

from accounts.choices import MembershipRole
from core.models import AuditEvent, Delivery, Webhook
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db

NEW = {"team": "vision", "name": "ci", "url": "https://hooks.example.org/portal/abcdef123", "events": ["job.*"]}


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    from core import webhooks

    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)


def test_a_lead_creates_a_webhook_and_sees_its_secret_once(api_client, people):
    api_client.force_login(people["alice"])
    response = api_client.post("/api/v1/webhooks/", NEW, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    webhook = Webhook.objects.get(pk=body["id"])
    assert body["secret"] == webhook.secret and body["team"] == "vision"
    assert "url" not in body and body["masked_url"] == "https://hooks.example.org/portal…"
    listing = api_client.get("/api/v1/webhooks/").json()["results"]
    assert [w["id"] for w in listing] == [webhook.pk]
    assert "secret" not in listing[0] and "url" not in listing[0]
    event = AuditEvent.objects.get(action="webhook.create")
    assert event.actor == people["alice"] and event.team == people["vision"]
    assert "abcdef123" not in str(event.after), "the audit log keeps the URL masked"


def test_members_and_outsiders_see_and_touch_nothing(api_client, people):
    webhook = Webhook.objects.create(team=people["vision"], name="ci", url=NEW["url"], events=["job.*"])
    member = UserFactory(username="carol")
    MembershipFactory(user=member, team=people["vision"], role=MembershipRole.MEMBER)
    for user in (member, people["bob"], people["outsider"]):
        api_client.force_login(user)
        assert api_client.get("/api/v1/webhooks/").json()["results"] == []
        assert api_client.get(f"/api/v1/webhooks/{webhook.pk}/").status_code == 404
        assert api_client.post(f"/api/v1/webhooks/{webhook.pk}/ping/").status_code == 404
        assert api_client.delete(f"/api/v1/webhooks/{webhook.pk}/").status_code == 404
        response = api_client.post("/api/v1/webhooks/", NEW, format="json")
        assert response.status_code == 400 and "team" in response.json()
    assert Webhook.objects.count() == 1 and Delivery.objects.count() == 0
    api_client.force_login(people["admin"])
    assert [w["id"] for w in api_client.get("/api/v1/webhooks/").json()["results"]] == [webhook.pk]
    api_client.logout()
    assert api_client.get("/api/v1/webhooks/").status_code in (401, 403)


def test_every_problem_is_listed_at_once(api_client, people, settings):
    settings.DEBUG, settings.PORTAL_WEBHOOK_ALLOW_LOCAL = False, False
    api_client.force_login(people["alice"])
    bad = {"team": "vision", "name": " ", "url": "http://hooks.example.org/x", "events": ["job.exploded", "gpu.*"]}
    response = api_client.post("/api/v1/webhooks/", bad, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert set(errors) == {"name", "url", "events"}
    assert len(errors["events"]) == 2 and "Use https://" in errors["url"][0]


def test_change_rotate_ping_deliveries_redeliver_delete(api_client, people):
    api_client.force_login(people["alice"])
    created = api_client.post("/api/v1/webhooks/", NEW, format="json").json()
    url = f"/api/v1/webhooks/{created['id']}/"
    changed = api_client.patch(url, {"events": ["job.failed", "service.*"], "format": "slack"}, format="json")
    assert changed.status_code == 200 and changed.json()["format"] == "slack"
    assert api_client.patch(url, {"events": ["nope"]}, format="json").status_code == 400
    rotated = api_client.post(f"{url}rotate-secret/").json()["secret"]
    assert rotated != created["secret"] and rotated == Webhook.objects.get(pk=created["id"]).secret
    ping = api_client.post(f"{url}ping/")
    assert ping.status_code == 202 and ping.json()["event_type"] == "ping"
    assert ping.json()["payload"]["text"].startswith("[vision] ping"), "a Slack webhook gets Slack's format"
    log = api_client.get(f"{url}deliveries/").json()["results"]
    assert [d["id"] for d in log] == [ping.json()["id"]]
    again = api_client.post(f"{url}deliveries/{ping.json()['id']}/redeliver/")
    assert again.status_code == 202
    assert again.json()["redelivery_of"] == ping.json()["id"] and again.json()["payload"] == ping.json()["payload"]
    other = Webhook.objects.create(team=people["nlp"], name="x", url=NEW["url"], events=["job.*"])
    theirs = Delivery.objects.create(webhook=other, event_id=again.json()["event_id"], event_type="ping", payload={})
    assert api_client.post(f"{url}deliveries/{theirs.pk}/redeliver/").status_code == 404
    assert api_client.delete(url).status_code == 204
    audited = AuditEvent.objects.filter(action__startswith="webhook.").order_by("id")
    verbs = list(audited.values_list("action", flat=True))
    assert verbs == ["webhook.create", "webhook.update", "webhook.rotate", "webhook.ping", "webhook.redeliver",
                     "webhook.delete"]  # fmt: skip


def test_schema_lists_the_webhook_endpoints(openapi_schema):
    paths = openapi_schema["paths"]
    for path in ["/api/v1/webhooks/", "/api/v1/webhooks/{id}/", "/api/v1/webhooks/{id}/ping/",
                 "/api/v1/webhooks/{id}/deliveries/", "/api/v1/webhooks/{id}/rotate-secret/",
                 "/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver/"]:  # fmt: skip
        assert path in paths, path
