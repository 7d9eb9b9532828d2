"""Limits on the ways in: the sign-in form locks a username+address out after repeated wrong passwords
(django-axes), and DRF throttles cap wrong tokens, token creation and sign-in codes. Each test fails without its
limit."""

import pytest
from django.urls import reverse

from accounts.models import APIToken

PASSWORD = "correct-horse-battery"  # tests.factories.UserFactory's

pytestmark = pytest.mark.django_db


def test_sign_in_form_locks_out_after_repeated_failures_and_says_when_to_retry(client, people, settings):
    settings.AXES_FAILURE_LIMIT = 3
    login = reverse("login")
    for _ in range(3):
        client.post(login, {"username": "alice", "password": "wrong"})
    locked = client.post(login, {"username": "alice", "password": PASSWORD})
    assert locked.status_code == 429
    text = locked.content.decode()
    assert "Too many failed sign-ins" in text and "Try again after" in text and "15 minutes" in text
    assert "_auth_user_id" not in client.session, "the right password does not get through while locked out"
    # Another username from the same address is not locked out.
    other = client.post(login, {"username": "bob", "password": PASSWORD})
    assert other.status_code == 302 and client.session["_auth_user_id"] == str(people["bob"].pk)


def test_wrong_tokens_are_throttled_per_address(api_client, people, settings):
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "token-failure": "3/min"}
    _, good = APIToken.issue(people["alice"], "good")
    for _ in range(3):
        assert api_client.get("/api/v1/me/", HTTP_AUTHORIZATION="Bearer gpp_0000_guess").status_code == 401
    throttled = api_client.get("/api/v1/me/", HTTP_AUTHORIZATION="Bearer gpp_0000_guess")
    assert throttled.status_code == 429 and "wrong, expired or revoked API token" in throttled.json()["detail"]
    assert "Retry-After" in throttled
    assert api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {good}").status_code == 429, "until it passes"


def test_token_creation_is_throttled_per_user(api_client, client, people, settings):
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "token-create": "2/hour"}
    api_client.force_login(people["alice"])
    codes = [api_client.post("/api/v1/tokens/", {"name": f"t{i}"}, format="json").status_code for i in range(3)]
    assert codes == [201, 201, 429]
    client.force_login(people["alice"])
    page = client.post(reverse("token-list"), {"name": "web", "scope": "read", "days": 1})
    assert "try again in" in page.content.decode() and APIToken.objects.count() == 2
    api_client.force_login(people["bob"])
    assert api_client.post("/api/v1/tokens/", {"name": "b"}, format="json").status_code == 201


def test_sign_in_codes_and_polls_are_throttled(api_client, settings):
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "device-start": "2/min", "device-poll": "2/min"}
    codes = [api_client.post("/api/v1/auth/device/", {}, format="json").status_code for _ in range(3)]
    assert codes == [201, 201, 429]
    polls = [api_client.post("/api/v1/auth/device/token/", {"device_code": "x"}).status_code for _ in range(3)]
    assert polls == [400, 400, 429]
