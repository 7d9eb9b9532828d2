"""The bearer token's read (APIToken.find, on every API request): one statement for the token and its user, both
complete model instances (no field left to load later), and the same answers as before it was one statement: an
expired, revoked or wrong token, or a disabled account, is refused; a rotated token works through its overlap."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import APIToken


@pytest.fixture
def issued(people):
    token, raw = APIToken.issue(people["alice"], "reader")
    return token, raw


def test_the_token_and_its_user_come_in_one_statement_with_every_field(issued, people):
    token, raw = issued
    with CaptureQueriesContext(connection) as captured:
        found = APIToken.find(raw)
        # Everything a request may read of either: no field was left out to be loaded by another query.
        assert found.get_deferred_fields() == set()
        assert found.user.get_deferred_fields() == set()
        seen = (found.user.username, found.user.email, found.user.is_staff, found.user.date_joined, found.scope)
    assert len(captured) == 1
    assert found.pk == token.pk and found.user == people["alice"]
    assert seen[0] == "alice" and seen[4] == token.scope
    assert found.expires_at == token.expires_at
    for value in (found.expires_at, found.created, found.user.date_joined):
        assert timezone.is_aware(value)


@pytest.mark.parametrize(
    "change",
    [
        {"expires_at": timezone.now() - timedelta(seconds=1)},
        {"revoked_at": timezone.now() - timedelta(seconds=1)},
    ],
    ids=["expired", "revoked"],
)
def test_an_expired_or_revoked_token_is_not_found(issued, change):
    token, raw = issued
    APIToken.objects.filter(pk=token.pk).update(**change)
    assert APIToken.find(raw) is None


def test_a_token_in_its_rotation_overlap_is_found(issued):
    token, raw = issued
    APIToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now() + timedelta(hours=1))
    assert APIToken.find(raw).pk == token.pk


def test_a_wrong_secret_with_a_right_prefix_or_a_foreign_shape_is_not_found(issued):
    token, raw = issued
    assert APIToken.find(raw[:-1] + ("A" if raw[-1] != "A" else "B")) is None
    assert APIToken.find(f"gpp_{token.key_prefix}") is None
    assert APIToken.find("xyz_" + raw[4:]) is None
    assert APIToken.find("gpp_nosuch_secret") is None


def test_a_disabled_account_s_token_is_refused_by_the_api(api_client, issued, people):
    _, raw = issued
    people["alice"].is_active = False
    people["alice"].save(update_fields=["is_active"])
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    response = api_client.get("/api/v1/jobs/")
    assert response.status_code == 401
    assert "disabled" in response.json()["detail"]
