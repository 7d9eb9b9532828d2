"""What one team's webhooks may cost the portal: at most PORTAL_WEBHOOK_MAX_PER_TEAM webhooks, at most
PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES deliveries waiting per webhook (an event past that is recorded as not sent, with
the reason, where the lead sees it), short timeouts on each POST, a time budget per delivery pass, and a receiver
that failed a delivery's every attempt is not sent the next one straight away.

Where these tasks run (a queue and a worker apart from the control loop's) is tests/unit/test_worker_queues.py; a
flood against real workers is tests/integration/test_webhooks_flood.py."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from accounts import webhook_ops
from core import webhooks
from core.choices import DeliveryStatus
from core.models import Delivery, Webhook

pytestmark = pytest.mark.django_db

URL = "https://hooks.example.org/portal/x"


@pytest.fixture
def kicked(monkeypatch):
    sent = []
    monkeypatch.setattr(webhooks, "kick", sent.append)
    return sent


def hook(team, name="ci") -> Webhook:
    return Webhook.objects.create(team=team, name=name, url=URL, events=["job.*"])


def deliveries_of(webhook: Webhook, count: int, status=DeliveryStatus.PENDING) -> list[Delivery]:
    fields = {"event_type": "job.failed", "status": status}
    return [
        Delivery.objects.create(
            webhook=webhook, event_id=f"00000000-0000-0000-0000-{n:012d}", payload={"n": n}, **fields
        )
        for n in range(count)
    ]


# -- webhooks per team ----------------------------------------------------------------------------------------


def test_a_team_has_at_most_the_cap_of_webhooks(people, settings, api_client, client):
    settings.PORTAL_WEBHOOK_MAX_PER_TEAM = 2
    fields = {"name": "ci", "url": URL, "events": ["job.*"]}
    for name in ("one", "two"):
        webhook_ops.create(people["alice"], people["vision"], fields | {"name": name})
    with pytest.raises(ValidationError) as refused:
        webhook_ops.create(people["alice"], people["vision"], fields | {"name": "three"})
    (sentence,) = refused.value.message_dict["detail"]
    assert "Team Computer Vision already has 2 webhooks" in sentence and "PORTAL_WEBHOOK_MAX_PER_TEAM" in sentence
    assert "Delete one" in sentence and "ask an admin to raise the limit" in sentence
    assert Webhook.objects.filter(team=people["vision"]).count() == 2
    webhook_ops.create(people["admin"], people["nlp"], fields)  # the cap is per team

    api_client.force_login(people["alice"])
    response = api_client.post("/api/v1/webhooks/", fields | {"team": "vision", "name": "four"}, format="json")
    assert response.status_code == 400 and "PORTAL_WEBHOOK_MAX_PER_TEAM" in response.json()["detail"][0]
    client.force_login(people["alice"])
    page = client.post("/teams/vision/webhooks/", fields | {"name": "five", "format": "json"}).content.decode()
    assert "already has 2 webhooks" in page
    assert Webhook.objects.filter(team=people["vision"]).count() == 2


# -- deliveries waiting per webhook ---------------------------------------------------------------------------


def test_events_past_the_cap_are_recorded_as_not_sent_with_the_reason(
    people, settings, kicked, django_capture_on_commit_callbacks
):
    settings.PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES = 3
    webhook, other = hook(people["vision"]), hook(people["vision"], name="other")
    deliveries_of(webhook, 2, status=DeliveryStatus.RETRYING)  # a receiver that is down: two already wait
    with django_capture_on_commit_callbacks(execute=True):
        for n in range(3):
            webhooks.emit(people["vision"], "job.failed", {"n": n})
        webhooks.emit_many([(people["vision"].pk, "job.running", {"n": 9})])
    mine = list(Delivery.objects.filter(webhook=webhook).order_by("id"))
    assert [d.status for d in mine] == ["retrying", "retrying", "pending", "dropped", "dropped", "dropped"]
    assert [d.payload["data"]["n"] for d in mine[2:]] == [0, 1, 2, 9], "the earlier events keep their places"
    for dropped in mine[3:]:
        assert "Not sent: 3 deliveries to this webhook were already waiting" in dropped.error
        assert "PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES" in dropped.error and "redeliver" in dropped.error
        assert dropped.finished_at is not None and dropped.attempt == 0
    assert Delivery.objects.filter(webhook=other, status=DeliveryStatus.PENDING).count() == 3, "per webhook"
    assert webhook.pk in kicked and other.pk in kicked
    assert webhooks.due_webhooks() == sorted([webhook.pk, other.pk])  # the dropped ones are nobody's work


def test_the_lead_sees_why_and_can_redeliver_once_there_is_room(people, settings, client, kicked):
    settings.PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES = 1
    webhook = hook(people["vision"])
    (waiting,) = deliveries_of(webhook, 1)
    dropped = Delivery.objects.create(webhook=webhook, event_id="00000000-0000-0000-0000-000000000009",
                                      event_type="job.failed", payload={}, status=DeliveryStatus.DROPPED,
                                      error=webhooks.NOT_SENT.format(cap=1), finished_at=timezone.now())  # fmt: skip
    client.force_login(people["alice"])
    page = client.get(f"/teams/vision/webhooks/{webhook.pk}/").content.decode()
    assert "not sent" in page and "PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES" in page
    assert f"Redeliver delivery {dropped.pk}" in page

    full = client.post(f"/teams/vision/webhooks/{webhook.pk}/deliveries/{dropped.pk}/redeliver/", follow=True)
    assert "already has 1 deliveries waiting" in full.content.decode()
    assert client.post(f"/teams/vision/webhooks/{webhook.pk}/ping/", follow=True).status_code == 200
    assert Delivery.objects.filter(webhook=webhook).count() == 2, "neither a ping nor a redelivery past the cap"
    with pytest.raises(ValidationError, match="PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES"):
        webhook_ops.ping(people["alice"], webhook)

    Delivery.objects.filter(pk=waiting.pk).update(status=DeliveryStatus.SUCCEEDED)
    again = webhook_ops.redeliver(people["alice"], dropped)
    assert again.status == DeliveryStatus.PENDING and again.payload == dropped.payload


# -- time spent on one receiver -------------------------------------------------------------------------------


def test_each_post_has_a_short_connect_and_read_timeout(people, settings, monkeypatch):
    settings.PORTAL_WEBHOOK_CONNECT_TIMEOUT_SECONDS, settings.PORTAL_WEBHOOK_TIMEOUT_SECONDS = 2.5, 7.0
    import requests

    seen = {}

    def refuse(self, request, **kwargs):
        seen.update(kwargs)
        raise requests.ConnectionError("no")

    monkeypatch.setattr(requests.adapters.HTTPAdapter, "send", refuse)
    webhook = hook(people["vision"])
    (delivery,) = deliveries_of(webhook, 1)
    assert not webhooks.post(webhook, delivery).ok
    assert seen["timeout"] == (2.5, 7.0)


def test_a_pass_stops_starting_attempts_when_its_time_is_up(people, settings, monkeypatch):
    """However many deliveries wait, one task spends about PORTAL_WEBHOOK_PASS_SECONDS on one webhook, then queues
    itself again (0: at once, behind the other webhooks' tasks)."""
    settings.PORTAL_WEBHOOK_PASS_SECONDS = 0.25
    posted = []

    def slow_answer(webhook, delivery):
        posted.append(delivery.pk)
        time.sleep(0.1)
        return webhooks.Outcome(200, "ok", "")

    monkeypatch.setattr(webhooks, "post", slow_answer)
    webhook = hook(people["vision"])
    deliveries_of(webhook, 10)
    assert webhooks.send_due(webhook.pk) == 0.0, "more is due: come back"
    assert 2 <= len(posted) <= 4, posted
    assert Webhook.objects.get(pk=webhook.pk).lease_until is None
    while webhooks.send_due(webhook.pk) is not None:
        pass
    assert len(posted) == 10 and not Delivery.objects.exclude(status=DeliveryStatus.SUCCEEDED).exists()


def test_a_receiver_that_failed_every_attempt_is_not_sent_the_next_event_at_once(people, settings, monkeypatch):
    settings.PORTAL_WEBHOOK_MAX_ATTEMPTS, settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS = 2, 60
    posted = []

    def dead(webhook, delivery):
        posted.append(delivery.pk)
        return webhooks.Outcome(None, "", "no answer")

    monkeypatch.setattr(webhooks, "post", dead)
    webhook = hook(people["vision"])
    first, second, third = deliveries_of(webhook, 3)
    Delivery.objects.filter(pk=first.pk).update(attempt=1, status=DeliveryStatus.RETRYING)  # its last attempt is due
    assert webhooks.send_due(webhook.pk) == pytest.approx(120, abs=2), "the last attempt's backoff: 60 × 2"
    assert posted == [first.pk], "the next delivery waits for the dead receiver's backoff too"
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == DeliveryStatus.FAILED
    assert second.next_attempt_at >= timezone.now() + timedelta(seconds=110)
    assert webhooks.due_webhooks() == [], "nor does the minute's sweep send it early"
    assert webhooks.send_due(webhook.pk) == pytest.approx(120, abs=2) and posted == [first.pk]
