"""The client's webhook calls and ``gpuportal webhooks …`` against a live portal: list, delivery log, ping,
redeliver; and gpuportal.webhooks.verify agrees with the portal's signing."""

from __future__ import annotations

import pytest

from accounts import webhook_ops
from core import webhooks as portal_webhooks
from core.models import Delivery
from gpuportal import Client
from gpuportal.webhooks import verify


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(portal_webhooks, "kick", lambda webhook_id: None)


def test_list_ping_deliveries_redeliver_and_the_cli(portal, people, gp):
    fields = {"name": "ci", "url": "https://hooks.example.org/p/secret-part", "events": ["job.*"]}
    webhook, _ = webhook_ops.create(people["alice"], people["vision"], fields)
    client = Client(portal.url, portal.token)
    [listed] = client.list_webhooks()
    assert listed["id"] == webhook.pk and listed["masked_url"] == "https://hooks.example.org/p/secr…"
    ping = client.ping_webhook(webhook.pk)
    assert ping["event_type"] == "ping"
    again = client.redeliver(webhook.pk, ping["id"])
    assert again["redelivery_of"] == ping["id"]
    assert [d["id"] for d in client.webhook_deliveries(webhook.pk)] == [again["id"], ping["id"]]
    Delivery.objects.filter(pk=ping["id"]).update(status="failed", attempt=1, attempts_log=[{"at": "t", "code": 503}])
    out = gp("webhooks", "deliveries", str(webhook.pk)).output
    assert "ping" in out and "503" in out and "failed" in out
    assert "hooks.example.org" in gp("webhooks", "list").output
    assert f"as #{again['id'] + 1}" in gp("webhooks", "redeliver", str(webhook.pk), str(ping["id"])).output


def test_the_client_verifies_what_the_portal_signs():
    body = b'{"type":"job.failed"}'
    header = portal_webhooks.sign("whsec_x", 1700000000, body)
    assert verify("whsec_x", header, body, now=1700000001)
    assert not verify("whsec_y", header, body, now=1700000001)
    assert not verify("whsec_x", header, body, now=1700009999)
    assert not verify("whsec_x", "garbage", body)
