"""API tokens: hashed at rest, expiry, revocation, read-only scope, last-used, audit."""

from datetime import timedelta

import pytest
from django.utils import timezone

from accounts.models import APIToken
from core.models import AuditEvent

pytestmark = pytest.mark.django_db


def bearer(raw):
    return {"HTTP_AUTHORIZATION": f"Bearer {raw}"}


def test_token_is_stored_hashed_and_shown_once(api_client, people):
    api_client.force_login(people["alice"])
    response = api_client.post("/api/v1/tokens/", {"name": "nightly pipeline", "days": 30}, format="json")
    assert response.status_code == 201
    raw = response.json()["token"]
    token = APIToken.objects.get(pk=response.json()["id"])
    assert raw.startswith(f"gpp_{token.key_prefix}_")
    assert raw not in token.key_hash and len(token.key_hash) == 64
    assert (token.expires_at - timezone.now()).days in (29, 30)
    listing = api_client.get("/api/v1/tokens/").json()["results"]
    assert "token" not in listing[0], "the secret is never listed again"
    event = AuditEvent.objects.get(action="token.issue")
    assert event.actor == people["alice"] and event.object_id == str(token.pk)


def test_token_authenticates_and_records_last_use(api_client, people):
    token, raw = APIToken.issue(people["bob"], "ci")
    response = api_client.get("/api/v1/me/", **bearer(raw))
    assert response.status_code == 200
    assert response.json()["username"] == "bob"
    assert response.json()["teams"] == [{"team": "nlp", "namespace": "team-nlp", "role": "member"}]
    token.refresh_from_db()
    assert token.last_used_at is not None


@pytest.mark.parametrize(
    "mutate",
    [
        lambda t: setattr(t, "expires_at", timezone.now() - timedelta(seconds=1)),
        lambda t: setattr(t, "revoked_at", timezone.now()),
    ],
    ids=["expired", "revoked"],
)
def test_expired_or_revoked_token_is_refused(api_client, people, mutate):
    token, raw = APIToken.issue(people["bob"], "ci")
    mutate(token)
    token.save()
    response = api_client.get("/api/v1/nodes/", **bearer(raw))
    assert response.status_code == 401
    assert "unknown, expired or revoked" in response.json()["detail"]


def test_tampered_token_is_refused(api_client, people):
    _, raw = APIToken.issue(people["bob"], "ci")
    assert api_client.get("/api/v1/nodes/", **bearer(raw[:-1] + ("A" if raw[-1] != "A" else "B"))).status_code == 401
    assert api_client.get("/api/v1/nodes/", **bearer("not-a-token")).status_code == 401


def test_read_only_token_cannot_write(api_client, people):
    _, raw = APIToken.issue(people["bob"], "reader", read_only=True)
    assert api_client.get("/api/v1/tokens/", **bearer(raw)).status_code == 200
    response = api_client.post("/api/v1/tokens/", {"name": "x"}, format="json", **bearer(raw))
    assert response.status_code == 403
    assert "read-only" in response.json()["detail"]


def test_users_see_and_revoke_only_their_own_tokens(api_client, people):
    token, raw = APIToken.issue(people["alice"], "mine")
    api_client.force_login(people["bob"])
    assert api_client.get("/api/v1/tokens/").json()["count"] == 0
    assert api_client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 404
    api_client.force_login(people["alice"])
    assert api_client.delete(f"/api/v1/tokens/{token.pk}/").status_code == 204
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoke", object_id=str(token.pk)).count() == 1
    assert api_client.get("/api/v1/me/", **bearer(raw)).status_code == 401


@pytest.mark.parametrize(
    "payload,field", [({"name": " "}, "name"), ({"name": "x", "days": 9999}, "days"), ({}, "name")]
)
def test_token_validation_errors_say_what_to_fix(api_client, people, payload, field):
    api_client.force_login(people["alice"])
    response = api_client.post("/api/v1/tokens/", payload, format="json")
    assert response.status_code == 400
    assert field in response.json()
    assert APIToken.objects.count() == 0


def test_anonymous_requests_are_refused(api_client, db):
    response = api_client.get("/api/v1/nodes/")
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == "Bearer"
