"""Migration 0008 keeps what every existing token could do: read_only=True becomes scope "read", every other token
"manage"; and back."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.migration_steps import migrate_to as migrate

BEFORE = [("portal", "0007_webhooks")]
AFTER = [("portal", "0008_service_accounts_token_scopes")]


@pytest.mark.django_db(transaction=True)
def test_read_only_tokens_become_read_and_the_others_manage(restores_schema):
    old = migrate(BEFORE)
    user = old.get_model("auth", "User").objects.create(username="pipeline-owner")
    APIToken = old.get_model("portal", "APIToken")
    expires = timezone.now() + timedelta(days=3)
    for prefix, read_only in (("aaaa0001", True), ("aaaa0002", False)):
        APIToken.objects.create(user=user, name=prefix, key_prefix=prefix, key_hash="0" * 64, read_only=read_only,
                                expires_at=expires)  # fmt: skip
    new = migrate(AFTER)
    scopes = dict(new.get_model("portal", "APIToken").objects.values_list("key_prefix", "scope"))
    assert scopes == {"aaaa0001": "read", "aaaa0002": "manage"}
    back = migrate(BEFORE)
    read_only = dict(back.get_model("portal", "APIToken").objects.values_list("key_prefix", "read_only"))
    assert read_only == {"aaaa0001": True, "aaaa0002": False}
