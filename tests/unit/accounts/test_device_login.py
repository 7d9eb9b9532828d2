"""The command line's sign-in (device-code style): code, approval in the browser, one token, audited; denial and
expiry; the secret and the device code never stored in clear."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from accounts.models import APIToken, DeviceAuthorization
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


def start(api_client, **body):
    response = api_client.post("/api/v1/auth/device/", {"scope": "submit", "name": "laptop", **body}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def poll(api_client, code):
    return api_client.post("/api/v1/auth/device/token/", {"device_code": code}, format="json")


def test_approved_sign_in_gives_the_cli_one_token_of_the_approver(api_client, client, people):
    started = start(api_client, days=7)
    assert started["verification_uri_complete"].endswith(f"/account/device/?code={started['user_code']}")
    row = DeviceAuthorization.objects.get()
    assert started["device_code"] not in row.device_code_hash
    pending = poll(api_client, started["device_code"])
    assert pending.status_code == 400 and pending.json()["error"] == "authorization_pending"

    page = reverse("device-approve")
    assert client.get(f"{page}?code={started['user_code']}").status_code == 302, "signed-in people only"
    client.force_login(people["alice"])
    shown = client.get(f"{page}?code={started['user_code'].lower().replace('-', '')}")
    assert started["user_code"] in shown.content.decode() and "submit" in shown.content.decode()
    client.post(page, {"code": started["user_code"], "decision": "approve"})

    row.refresh_from_db()
    row.last_polled_at = None
    row.save()
    issued = poll(api_client, started["device_code"])
    assert issued.status_code == 200, issued.content
    body = issued.json()
    token = APIToken.objects.get()
    assert body["token"].startswith(f"gpp_{token.key_prefix}_") and body["scope"] == "submit"
    assert token.user == people["alice"] and token.name == "laptop"
    assert timedelta(days=6) < token.expires_at - timezone.now() <= timedelta(days=7)
    assert api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {body['token']}").json()["username"] == "alice"
    assert poll(api_client, started["device_code"]).json()["error"] == "expired_token", "one token per code"
    assert AuditEvent.objects.filter(action="token.device_approve", actor=people["alice"]).exists()
    assert AuditEvent.objects.filter(action="token.issue", object_id=str(token.pk)).exists()


def test_denied_and_expired_sign_ins_give_nothing(api_client, client, people):
    denied = start(api_client)
    client.force_login(people["bob"])
    client.post(reverse("device-approve"), {"code": denied["user_code"], "decision": "deny"})
    assert poll(api_client, denied["device_code"]).json()["error"] == "access_denied"
    expired = start(api_client)
    DeviceAuthorization.objects.filter(user_code=expired["user_code"]).update(expires_at=timezone.now())
    assert poll(api_client, expired["device_code"]).json()["error"] == "expired_token"
    late = client.post(reverse("device-approve"), {"code": expired["user_code"], "decision": "approve"})
    assert "No pending sign-in has this code" in late.content.decode()
    assert poll(api_client, "made-up").json()["error"] == "expired_token"
    assert APIToken.objects.count() == 0


def test_polling_faster_than_the_interval_is_told_to_slow_down(api_client):
    started = start(api_client)
    assert poll(api_client, started["device_code"]).json()["error"] == "authorization_pending"
    assert poll(api_client, started["device_code"]).json()["error"] == "slow_down"


def test_a_sign_in_may_not_ask_for_more_than_the_longest_lifetime(api_client, settings):
    response = api_client.post("/api/v1/auth/device/", {"days": settings.PORTAL_TOKEN_MAX_DAYS + 1}, format="json")
    assert response.status_code == 400 and "at most" in response.json()["days"][0]


def test_an_approved_code_the_cli_never_collects_expires_too(api_client, client, people):
    """Issue 31, item 8: approval used to make a code good for ever; a code leaked after approval gave a token."""
    started = start(api_client)
    client.force_login(people["alice"])
    client.post(reverse("device-approve"), {"code": started["user_code"], "decision": "approve"})
    DeviceAuthorization.objects.filter(user_code=started["user_code"]).update(expires_at=timezone.now())
    late = poll(api_client, started["device_code"])
    assert late.status_code == 400 and late.json()["error"] == "expired_token", late.json()
    assert "run the login again" in late.json()["detail"]
    assert APIToken.objects.count() == 0
