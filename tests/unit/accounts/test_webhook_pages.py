"""The team's Webhooks pages: leads and admins only (404 for others), the secret shown once, every problem at
once, the delivery log with codes, redeliver, ping, rotate, disable and delete."""

from __future__ import annotations

import pytest

from accounts.choices import MembershipRole
from core import webhooks
from core.choices import DeliveryStatus
from core.models import AuditEvent, Delivery, Webhook
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)


def test_only_leads_and_admins_find_the_page(client, people):
    member = UserFactory(username="carol")
    MembershipFactory(user=member, team=people["vision"], role=MembershipRole.MEMBER)
    client.force_login(people["alice"])
    assert 'data-testid="team-webhooks-link"' in client.get("/teams/vision/").content.decode()
    assert client.get("/teams/vision/webhooks/").status_code == 200
    assert client.get("/teams/nlp/webhooks/").status_code == 404, "alice leads vision, not nlp"
    client.force_login(member)
    assert 'data-testid="team-webhooks-link"' not in client.get("/teams/vision/").content.decode()
    assert client.get("/teams/vision/webhooks/").status_code == 404
    hook = Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/x", events=["job.*"])
    assert client.get(f"/teams/vision/webhooks/{hook.pk}/").status_code == 404
    assert client.post(f"/teams/vision/webhooks/{hook.pk}/delete/").status_code == 404
    assert Webhook.objects.filter(pk=hook.pk).exists()
    client.force_login(people["admin"])
    assert client.get("/teams/nlp/webhooks/").status_code == 200


def test_create_shows_the_secret_once_and_lists_every_problem(client, people, settings):
    settings.DEBUG, settings.PORTAL_WEBHOOK_ALLOW_LOCAL = False, False
    client.force_login(people["alice"])
    bad = client.post("/teams/vision/webhooks/", {"name": "", "url": "http://h.example.org/x", "format": "json"})
    page = bad.content.decode()
    assert bad.status_code == 200 and Webhook.objects.count() == 0
    assert "Give the webhook a name" in page and "Use https://" in page and "Subscribe to at least one" in page
    fields = {"name": "chat", "url": "https://hooks.slack.com/services/T0/B0/zz",
              "events": ["job.failed", "service.*"], "format": "slack"}  # fmt: skip
    good = client.post("/teams/vision/webhooks/", fields)
    webhook = Webhook.objects.get()
    assert webhook.events == ["job.failed", "service.*"] and webhook.format == "slack"
    assert webhook.secret in good.content.decode()
    listing = client.get("/teams/vision/webhooks/").content.decode()
    assert webhook.secret not in listing and "T0/B0/zz" not in listing, "secret and full URL are not shown again"


def test_delivery_log_redeliver_ping_rotate_disable_delete(client, people):
    client.force_login(people["alice"])
    hook = Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/x", events=["job.*"])
    attempts = [{"at": "t", "code": 500, "error": ""}, {"at": "t", "code": 502, "error": ""}]
    done = Delivery.objects.create(webhook=hook, event_id="00000000-0000-0000-0000-000000000001",
                                   event_type="job.failed", payload={"x": 1}, status=DeliveryStatus.FAILED,
                                   attempt=2, response_code=502, attempts_log=attempts)  # fmt: skip
    base = f"/teams/vision/webhooks/{hook.pk}/"
    page = client.get(base).content.decode()
    assert "job.failed" in page and "500" in page and "502" in page and "Redeliver" in page
    client.post(f"{base}deliveries/{done.pk}/redeliver/")
    again = Delivery.objects.get(redelivery_of=done)
    assert again.payload == done.payload and again.status == DeliveryStatus.PENDING
    client.post(f"{base}ping/")
    assert Delivery.objects.filter(webhook=hook, event_type="ping").exists()
    old = hook.secret
    rotated = client.post(f"{base}rotate/").content.decode()
    hook.refresh_from_db()
    assert hook.secret != old and hook.secret in rotated
    client.post(f"{base}disable/")
    hook.refresh_from_db()
    assert hook.active is False
    assert client.post(f"{base}explode/").status_code == 404
    client.post(f"{base}delete/")
    assert not Webhook.objects.filter(pk=hook.pk).exists()
    verbs = set(AuditEvent.objects.filter(action__startswith="webhook.").values_list("action", flat=True))
    assert verbs == {"webhook.redeliver", "webhook.ping", "webhook.rotate", "webhook.update", "webhook.delete"}
