"""Webhooks: signing, subscription matching, URL rules, the backoff schedule, per-webhook order, Slack format, the
secret derived (not stored), and emission after commit only, to the right team's subscribed webhooks."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from core import webhooks
from core.choices import DeliveryStatus
from core.models import Delivery, Webhook

pytestmark = pytest.mark.django_db


@pytest.fixture
def sent(monkeypatch):
    """Capture what the sender would POST; each test decides the answers (a list of codes, default 200)."""
    calls, answers = [], []

    def fake_post(webhook, delivery):
        calls.append((webhook.pk, delivery.event_type, delivery.payload))
        code = answers.pop(0) if answers else 200
        return webhooks.Outcome(code, "ok" if code < 300 else "boom", "")

    monkeypatch.setattr(webhooks, "post", fake_post)
    kicked = []
    monkeypatch.setattr(webhooks, "kick", kicked.append)
    return {"calls": calls, "answers": answers, "kicked": kicked}


def hook(team, **fields) -> Webhook:
    return Webhook.objects.create(
        team=team, **({"name": "ci", "url": "https://hooks.example.org/x", "events": ["job.*"]} | fields)
    )


# -- signing --------------------------------------------------------------------------------------------------


def test_signature_is_hmac_sha256_over_timestamp_dot_body_and_verifies():
    body = b'{"type":"job.failed"}'
    header = webhooks.sign("whsec_abc", 1700000000, body)
    t, v1 = header.split(",")
    assert t == "t=1700000000"
    import hashlib
    import hmac

    assert v1 == "v1=" + hmac.new(b"whsec_abc", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert webhooks.verify("whsec_abc", header, body, now=1700000010)
    assert not webhooks.verify("whsec_abc", header, body + b" ", now=1700000010), "a changed body fails"
    assert not webhooks.verify("whsec_other", header, body, now=1700000010), "another secret fails"
    assert not webhooks.verify("whsec_abc", header, body, now=1700000000 + 3600), "an old signature is a replay"
    assert not webhooks.verify("whsec_abc", "v1=deadbeef", body), "no timestamp, no trust"


def test_secret_is_derived_not_stored_and_rotation_changes_it(people, settings):
    webhook = hook(people["vision"])
    secret = webhook.secret
    assert secret.startswith("whsec_") and len(secret) == 6 + 64
    row = Webhook.objects.filter(pk=webhook.pk).values().get()
    assert not any(secret[6:] in str(value) for value in row.values()), "the secret is not in the row"
    assert Webhook.objects.get(pk=webhook.pk).secret == secret, "the same row derives the same secret"
    rotated = webhook.rotate_secret()
    assert rotated != secret
    assert Webhook.objects.get(pk=webhook.pk).secret == rotated, "the old secret stops working at once"
    settings.SECRET_KEY = "another-key-entirely-" + "x" * 40
    assert webhook.secret != rotated, "derived from SECRET_KEY too: a database copy alone cannot sign"
    other = hook(people["vision"], name="second")
    other.salt = webhook.salt
    assert other.secret != webhook.secret, "the id is part of the derivation"


# -- subscriptions and URLs -----------------------------------------------------------------------------------


def test_matching_takes_exact_types_and_families():
    assert webhooks.matches(["job.*"], "job.failed")
    assert webhooks.matches(["job.failed"], "job.failed")
    assert not webhooks.matches(["job.failed"], "job.succeeded")
    assert not webhooks.matches(["notebook.*"], "job.failed")
    assert not webhooks.matches(["job.*"], "jobs.failed")


def test_subscription_problems_lists_every_problem_at_once():
    problems = webhooks.subscription_problems(["job.*", "job.exploded", "gpu.*", 7])
    assert len(problems) == 3
    assert "'job.exploded' is not an event type" in problems[0] and "job.failed" in problems[0]
    assert "'gpu.*' names no event family" in problems[1] and "node_operation.*" in problems[1]
    assert webhooks.subscription_problems([]) == ["Subscribe to at least one event type, e.g. 'job.*' or 'job.failed'."]
    assert webhooks.subscription_problems(["job.*", "node_operation.applied", "service.ready"]) == []


def test_urls_need_https_to_a_public_host_unless_local_is_allowed(settings):
    settings.PORTAL_WEBHOOK_ALLOW_LOCAL, settings.PORTAL_WEBHOOK_ALLOW_NETWORKS = False, []
    assert webhooks.url_problems("https://hooks.slack.com/services/T0/B0/x") == []
    assert "Use https://" in webhooks.url_problems("http://hooks.example.org/x")[0]
    for url in ("https://127.0.0.1:8443/x", "https://10.1.2.3/x", "https://localhost/x"):
        (problem,) = webhooks.url_problems(url)
        assert "does not resolve to a public address" in problem and "PORTAL_WEBHOOK_ALLOW_NETWORKS" in problem, url
    assert "full URL" in webhooks.url_problems("hooks.example.org/x")[0]
    assert "full URL" in webhooks.url_problems("https://hooks.example.org:99999/x")[0]
    settings.PORTAL_WEBHOOK_ALLOW_NETWORKS = ["10.1.0.0/16"]
    assert webhooks.url_problems("http://10.1.2.3/x") == [], "an allowed network, plain http included"
    assert webhooks.url_problems("https://10.2.0.1/x"), "only that network"
    settings.PORTAL_WEBHOOK_ALLOW_LOCAL = True
    assert webhooks.url_problems("http://127.0.0.1:9999/x") == []
    assert webhooks.url_problems("http://localhost/x") == []
    assert "Use https://" in webhooks.url_problems("http://hooks.example.org/x")[0], "only local may be plain http"


# -- backoff and order ----------------------------------------------------------------------------------------


def test_backoff_doubles_from_the_base_and_is_capped(settings):
    settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS, settings.PORTAL_WEBHOOK_RETRY_MAX_SECONDS = 10, 60
    assert [webhooks.backoff(n) for n in range(1, 7)] == [10, 20, 40, 60, 60, 60]


def test_a_later_event_waits_while_an_earlier_one_retries(people, sent, settings):
    settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS, settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 30, 3
    webhook = hook(people["vision"])
    first, second = (Delivery.objects.create(webhook=webhook, event_id=f"00000000-0000-0000-0000-00000000000{i}",
                                             event_type="job.failed", payload={"n": i}) for i in (1, 2))  # fmt: skip
    sent["answers"].extend([500])
    again = webhooks.send_due(webhook.pk)
    assert again == pytest.approx(30, abs=1), "told to come back after the backoff"
    assert [c[2] for c in sent["calls"]] == [{"n": 1}], "the second was not sent past the retrying first"
    first.refresh_from_db()
    assert (first.status, first.attempt, first.response_code) == (DeliveryStatus.RETRYING, 1, 500)
    assert webhooks.send_due(webhook.pk) == pytest.approx(30, abs=1), "not due yet: nothing is sent"
    assert len(sent["calls"]) == 1
    Delivery.objects.filter(pk=first.pk).update(next_attempt_at=timezone.now() - timedelta(seconds=1))
    assert webhooks.send_due(webhook.pk) is None
    assert [c[2] for c in sent["calls"]] == [{"n": 1}, {"n": 1}, {"n": 2}], "retry first, then the next in order"
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == second.status == DeliveryStatus.SUCCEEDED
    assert [a["code"] for a in first.attempts_log] == [500, 200], "every attempt is recorded"
    assert Webhook.objects.get(pk=webhook.pk).lease_until is None, "the lease is let go"


def test_a_delivery_out_of_attempts_fails_and_the_queue_moves_on(people, sent, settings):
    settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS, settings.PORTAL_WEBHOOK_MAX_ATTEMPTS = 0, 2
    webhook = hook(people["vision"])
    for i in (1, 2):
        Delivery.objects.create(webhook=webhook, event_id=f"00000000-0000-0000-0000-00000000000{i}",
                                event_type="job.failed", payload={"n": i})  # fmt: skip
    sent["answers"].extend([503, 503])
    while (again := webhooks.send_due(webhook.pk)) is not None:
        assert again == 0
    statuses = list(Delivery.objects.order_by("id").values_list("status", "attempt"))
    assert statuses == [(DeliveryStatus.FAILED, 2), (DeliveryStatus.SUCCEEDED, 1)]


def test_a_held_webhook_is_left_to_its_holder(people, sent):
    webhook = hook(people["vision"])
    Delivery.objects.create(webhook=webhook, event_id="00000000-0000-0000-0000-000000000001", event_type="job.failed",
                            payload={})  # fmt: skip
    Webhook.objects.filter(pk=webhook.pk).update(lease_until=timezone.now() + timedelta(minutes=1))
    assert webhooks.send_due(webhook.pk) is None
    assert sent["calls"] == [], "another sender holds it: no second sender, no reordering"
    Webhook.objects.filter(pk=webhook.pk).update(lease_until=timezone.now() - timedelta(seconds=1))
    webhooks.send_due(webhook.pk)
    assert len(sent["calls"]) == 1, "an expired lease (a worker that died) is taken over"


# -- payloads and emission ------------------------------------------------------------------------------------


def test_slack_format_is_one_line_with_a_link(people):
    event = webhooks.event_body("e1", "job.failed", people["vision"],
                                {"name": "train", "url": "https://portal.example.org/jobs/7/"}, "alice",
                                "Over the team's limit", timezone.now())  # fmt: skip
    slack = webhooks.render(hook(people["vision"], format="slack"), event)
    assert slack == {
        "text": "[vision] job failed: train (by alice) — Over the team's limit <https://portal.example.org/jobs/7/|open>"
    }
    assert webhooks.render(hook(people["vision"]), event) is event
    assert set(event) == {"id", "type", "created", "team", "data", "actor", "reason"}


def test_emit_queues_after_commit_for_subscribed_active_webhooks_of_the_team(
    people, sent, django_capture_on_commit_callbacks
):
    jobs_hook = hook(people["vision"], events=["job.failed"])
    hook(people["vision"], name="notebooks", events=["notebook.*"])
    hook(people["vision"], name="off", active=False)
    hook(people["nlp"], name="other team")
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        webhooks.emit(people["vision"], "job.failed", lambda: {"name": "train"}, actor=people["alice"], reason="why")
    assert Delivery.objects.count() == 0, "nothing before commit"
    for callback in callbacks:
        callback()
    delivery = Delivery.objects.get()
    assert delivery.webhook == jobs_hook and delivery.status == DeliveryStatus.PENDING
    assert delivery.payload["data"] == {"name": "train"} and delivery.payload["team"] == "vision"
    assert (delivery.payload["actor"], delivery.payload["reason"]) == ("alice", "why")
    assert sent["kicked"] == [jobs_hook.pk]
    with pytest.raises(ValueError, match="not registered"):
        webhooks.emit(people["vision"], "job.exploded", {})


def test_cluster_wide_events_reach_every_team_that_subscribed(people, sent, django_capture_on_commit_callbacks):
    vision = hook(people["vision"], events=["node_operation.*"])
    nlp = hook(people["nlp"], events=["node_operation.failed"])
    hook(people["nlp"], name="jobs only")
    with django_capture_on_commit_callbacks(execute=True):
        webhooks.emit(None, "node_operation.failed", {"node": "gpu-a100-0"})
    assert sorted(Delivery.objects.values_list("webhook_id", flat=True)) == sorted([vision.pk, nlp.pk])
    assert {d.payload["team"] for d in Delivery.objects.all()} == {None}


def test_data_is_not_built_when_nobody_listens(people, sent, django_capture_on_commit_callbacks):
    def boom():
        raise AssertionError("built for nobody")

    with django_capture_on_commit_callbacks(execute=True):
        webhooks.emit(people["vision"], "job.failed", boom)
    assert Delivery.objects.count() == 0


def test_the_wire_body_is_the_stored_payload(people, monkeypatch):
    """post() sends exactly the JSON it signs, with the event and delivery headers."""
    webhook = hook(people["vision"])
    delivery = Delivery.objects.create(webhook=webhook, event_id="00000000-0000-0000-0000-000000000009",
                                       event_type="job.failed", payload={"b": 1, "a": [1, 2]})  # fmt: skip
    seen = {}

    def fake(url, body, headers, timeout, keep):
        seen.update(url=url, data=body, headers=headers)
        return 204, ""

    monkeypatch.setattr(webhooks.egress, "post", fake)
    assert webhooks.post(webhook, delivery).ok
    assert json.loads(seen["data"]) == delivery.payload and seen["url"] == webhook.url
    assert seen["headers"]["X-Portal-Event"] == "job.failed"
    assert seen["headers"]["X-Portal-Delivery"] == str(delivery.pk)
    assert webhooks.verify(webhook.secret, seen["headers"]["X-Portal-Signature"], seen["data"])


def test_the_sweep_prunes_old_finished_deliveries_and_kicks_due_ones(people, sent, settings):
    from core.tasks import sweep_webhooks

    settings.PORTAL_WEBHOOK_LOG_DAYS = 30
    webhook, off = hook(people["vision"]), hook(people["vision"], name="off", active=False)
    old = timezone.now() - timedelta(days=31)

    def delivery(target, status, finished_at=None):
        fields = {"event_id": "00000000-0000-0000-0000-000000000001", "event_type": "job.failed", "payload": {}}
        return Delivery.objects.create(webhook=target, status=status, finished_at=finished_at, **fields)

    gone = delivery(webhook, DeliveryStatus.SUCCEEDED, old)
    kept = delivery(webhook, DeliveryStatus.FAILED, timezone.now() - timedelta(days=29))
    due = delivery(webhook, DeliveryStatus.RETRYING)
    delivery(off, DeliveryStatus.PENDING)
    assert sweep_webhooks() == 1
    assert sent["kicked"] == [webhook.pk], "a disabled webhook's queue waits until it is enabled"
    assert set(Delivery.objects.values_list("pk", flat=True)) >= {kept.pk, due.pk}
    assert not Delivery.objects.filter(pk=gone.pk).exists()
