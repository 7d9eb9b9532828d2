"""Issue 31, item 9: rotating DJANGO_SECRET_KEY without breaking webhook receivers.

A webhook's signing secret derives from the portal's secret key. With the old key kept in
DJANGO_SECRET_KEY_FALLBACKS (Django's SECRET_KEY_FALLBACKS) each webhook goes on signing with the key its secret was
made under, so its receiver keeps verifying; rotating the webhook's secret moves it to the current key; and
``manage.py webhook_signing_keys`` tells the operator which webhooks still hold the old key before it is removed.
"""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from core import secret_keys, webhooks
from core.models import Delivery, Webhook

pytestmark = pytest.mark.django_db

OLD_KEY = "old-key-" + "o" * 56
NEW_KEY = "new-key-" + "n" * 56
BODY = {"type": "ping", "data": {}}


def hook(team, name: str = "ci") -> Webhook:
    return Webhook.objects.create(team=team, name=name, url="https://hooks.example.org/x", events=["job.*"])


def sent_signature(monkeypatch, webhook: Webhook) -> tuple[str, bytes]:
    """What the sender puts on the wire for one delivery to ``webhook``: the signature header and the body."""
    seen = {}

    def record(url, body, headers, timeout, keep):
        seen.update(header=headers["X-Portal-Signature"], body=body)
        return 200, "ok"

    monkeypatch.setattr(webhooks.egress, "post", record)
    delivery = Delivery.objects.create(webhook=webhook, event_id="00000000-0000-0000-0000-000000000001",
                                       event_type="ping", payload=BODY)  # fmt: skip
    assert webhooks.post(Webhook.objects.get(pk=webhook.pk), delivery).ok
    return seen["header"], seen["body"]


def rotate_key(settings, fallbacks: list[str]) -> None:
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = NEW_KEY, fallbacks


def test_a_receiver_keeps_verifying_while_the_old_key_is_a_fallback(people, settings, monkeypatch):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = OLD_KEY, []
    receivers_secret = hook(people["vision"]).secret
    rotate_key(settings, [OLD_KEY])
    webhook = Webhook.objects.get()
    assert webhook.secret == receivers_secret
    header, body = sent_signature(monkeypatch, webhook)
    assert webhooks.verify(receivers_secret, header, body)


def test_without_the_old_key_every_receiver_rejects_what_is_sent(people, settings, monkeypatch):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = OLD_KEY, []
    receivers_secret = hook(people["vision"]).secret
    rotate_key(settings, [])
    header, body = sent_signature(monkeypatch, Webhook.objects.get())
    assert not webhooks.verify(receivers_secret, header, body)


def test_rotating_a_webhook_s_secret_moves_it_to_the_current_key(people, settings, monkeypatch):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = OLD_KEY, []
    webhook = hook(people["vision"])
    rotate_key(settings, [OLD_KEY])
    new_secret = Webhook.objects.get().rotate_secret()
    assert Webhook.objects.get().secret_key_id == secret_keys.current_key_id()
    settings.SECRET_KEY_FALLBACKS = []  # the old key removed: the rotated webhook no longer needs it
    assert Webhook.objects.get(pk=webhook.pk).secret == new_secret
    header, body = sent_signature(monkeypatch, webhook)
    assert webhooks.verify(new_secret, header, body)


def test_a_new_webhook_is_made_under_the_current_key_during_a_rotation(people, settings):
    rotate_key(settings, [OLD_KEY])
    secret = hook(people["vision"]).secret
    settings.SECRET_KEY_FALLBACKS = []
    assert Webhook.objects.get().secret == secret


def test_the_key_id_tells_nothing_of_the_key(settings):
    settings.SECRET_KEY = NEW_KEY
    key_id = secret_keys.current_key_id()
    assert len(key_id) == 16 and NEW_KEY[:8] not in key_id
    assert secret_keys.key_id(OLD_KEY) != key_id
    assert secret_keys.key_for(key_id) == NEW_KEY and secret_keys.key_for("0" * 16) is None


def test_the_command_lists_the_webhooks_still_on_an_old_key(people, settings):
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = OLD_KEY, []
    hook(people["vision"], "on-old")
    gone = hook(people["nlp"], "on-removed")
    settings.SECRET_KEY = "removed-key-" + "r" * 52
    gone.rotate_secret()
    rotate_key(settings, [OLD_KEY])
    moved = hook(people["vision"], "on-new")
    out = call_and_read()
    assert "1 webhook on DJANGO_SECRET_KEY (current)" in out
    assert "1 webhook on DJANGO_SECRET_KEY_FALLBACKS item 1" in out and "vision / on-old" in out
    assert "1 webhook on a key no longer configured" in out and "nlp / on-removed" in out
    assert "on-new" not in out.split("(current)")[1], "the moved webhook is not listed as one to rotate"
    with pytest.raises(CommandError, match="2 webhooks still sign with a key other than DJANGO_SECRET_KEY"):
        call_command("webhook_signing_keys", "--check")
    for webhook in Webhook.objects.exclude(pk=moved.pk):
        webhook.rotate_secret()
    call_command("webhook_signing_keys", "--check")  # nothing left on an old key: passes


def call_and_read() -> str:
    from io import StringIO

    out = StringIO()
    call_command("webhook_signing_keys", stdout=out)
    return out.getvalue()
