"""Limits on the ways in: the sign-in form locks a username+address out after repeated wrong passwords
(django-axes), and DRF throttles cap wrong tokens, token creation and sign-in codes. Each test fails without its
limit. The address they all count by is the client's as PORTAL_TRUSTED_PROXIES tells it (core/client_address.py):
a client that writes X-Forwarded-For neither escapes a limit nor puts another address under one."""

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


# The client's address (core/client_address.py, PORTAL_TRUSTED_PROXIES) ----------------------------------------------
WRONG = "Bearer gpp_0000_guess"


def forged(n: int) -> str:
    """An X-Forwarded-For value a client made up, a new one each time."""
    return f"203.0.113.{n}"


def test_rotating_x_forwarded_for_does_not_escape_the_wrong_token_throttle(api_client, settings):
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "token-failure": "3/min"}
    codes = [
        api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=WRONG, HTTP_X_FORWARDED_FOR=forged(n)).status_code
        for n in range(5)
    ]
    assert codes == [401, 401, 401, 429, 429]


def test_rotating_x_forwarded_for_does_not_escape_the_sign_in_code_throttles(api_client, settings):
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "device-start": "2/min", "device-poll": "2/min"}
    codes = [
        api_client.post("/api/v1/auth/device/", {}, format="json", HTTP_X_FORWARDED_FOR=forged(n)).status_code
        for n in range(3)
    ]
    assert codes == [201, 201, 429]
    polls = [
        api_client.post("/api/v1/auth/device/token/", {"device_code": "x"}, HTTP_X_FORWARDED_FOR=forged(n)).status_code
        for n in range(3)
    ]
    assert polls == [400, 400, 429]


def test_rotating_x_forwarded_for_does_not_escape_the_sign_in_lockout(client, people, settings):
    settings.AXES_FAILURE_LIMIT = 3
    login = reverse("login")
    for n in range(3):
        client.post(login, {"username": "alice", "password": "wrong"}, HTTP_X_FORWARDED_FOR=forged(n))
    locked = client.post(login, {"username": "alice", "password": PASSWORD}, HTTP_X_FORWARDED_FOR=forged(9))
    assert locked.status_code == 429 and "_auth_user_id" not in client.session


def test_a_forged_x_forwarded_for_cannot_throttle_another_address(api_client, people, settings):
    settings.PORTAL_THROTTLE_RATES = {
        **settings.PORTAL_THROTTLE_RATES,
        "token-failure": "3/min",
        "device-start": "2/min",
    }
    _, good = APIToken.issue(people["alice"], "good")
    victim, attacker = "198.51.100.7", "198.51.100.66"
    for _ in range(4):
        api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=WRONG, HTTP_X_FORWARDED_FOR=victim, REMOTE_ADDR=attacker)
        api_client.post("/api/v1/auth/device/", {}, format="json", HTTP_X_FORWARDED_FOR=victim, REMOTE_ADDR=attacker)
    assert api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {good}", REMOTE_ADDR=victim).status_code == 200
    assert api_client.post("/api/v1/auth/device/", {}, format="json", REMOTE_ADDR=victim).status_code == 201
    assert api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=WRONG, REMOTE_ADDR=attacker).status_code == 429


def test_a_forged_x_forwarded_for_cannot_lock_another_address_out(client, people, settings):
    settings.AXES_FAILURE_LIMIT = 3
    login = reverse("login")
    victim, attacker = "198.51.100.7", "198.51.100.66"
    for _ in range(4):
        client.post(
            login, {"username": "alice", "password": "wrong"}, HTTP_X_FORWARDED_FOR=victim, REMOTE_ADDR=attacker
        )
    signed_in = client.post(login, {"username": "alice", "password": PASSWORD}, REMOTE_ADDR=victim)
    assert signed_in.status_code == 302 and client.session["_auth_user_id"] == str(people["alice"].pk)


PROXY, FIRST, SECOND = "10.0.0.1", "198.51.100.7", "198.51.100.8"


def through_proxy(client_address: str, n: int) -> dict[str, str]:
    """A request from ``client_address`` through the proxy, which appended it to what the client wrote."""
    return {"REMOTE_ADDR": PROXY, "HTTP_X_FORWARDED_FOR": f"{forged(n)}, {client_address}"}


def test_behind_one_trusted_proxy_wrong_tokens_count_by_the_address_it_appended(api_client, people, settings):
    from django.core.cache import cache

    settings.PORTAL_TRUSTED_PROXIES = 1
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "token-failure": "3/min"}
    _, good = APIToken.issue(people["alice"], "good")
    codes = [
        api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=WRONG, **through_proxy(FIRST, n)).status_code for n in range(4)
    ]
    assert codes == [401, 401, 401, 429]
    assert len(cache.get(f"throttle_token-failure_{FIRST}")) == 3
    me = api_client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {good}", **through_proxy(SECOND, 0))
    assert me.status_code == 200, "another client behind the same proxy has a count of its own"


def test_behind_one_trusted_proxy_sign_in_codes_count_by_the_address_it_appended(api_client, settings):
    settings.PORTAL_TRUSTED_PROXIES = 1
    settings.PORTAL_THROTTLE_RATES = {**settings.PORTAL_THROTTLE_RATES, "device-start": "2/min"}
    start = "/api/v1/auth/device/"
    codes = [api_client.post(start, {}, format="json", **through_proxy(FIRST, n)).status_code for n in range(3)]
    assert codes == [201, 201, 429]
    assert api_client.post(start, {}, format="json", **through_proxy(SECOND, 0)).status_code == 201


def test_behind_one_trusted_proxy_the_lockout_counts_by_the_address_it_appended(client, people, settings):
    settings.PORTAL_TRUSTED_PROXIES = 1
    settings.AXES_FAILURE_LIMIT = 3
    login = reverse("login")
    for n in range(3):
        client.post(login, {"username": "alice", "password": "wrong"}, **through_proxy(FIRST, n))
    assert client.post(login, {"username": "alice", "password": PASSWORD}, **through_proxy(FIRST, 9)).status_code == 429
    signed_in = client.post(login, {"username": "alice", "password": PASSWORD}, **through_proxy(SECOND, 0))
    assert signed_in.status_code == 302, "alice behind the same proxy at another address is not locked out"
    assert client.session["_auth_user_id"] == str(people["alice"].pk)
