"""accounts.compiled: a queryset compiled once runs with new values, answers what the queryset answers (related
rows and annotations included) in one query, and refuses a builder whose arguments do not reach the SQL."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.db.models import Count
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.compiled import CompiledQuery
from accounts.models import APIToken


def _tokens(name: str, now):
    return (
        APIToken.objects.filter(name=name, expires_at__gt=now)
        .select_related("user")
        .annotate(n=Count("user__gpu_jobs"))
        .order_by("pk")
    )


@pytest.mark.django_db
def test_it_answers_what_the_queryset_answers_in_one_query(people):
    read = CompiledQuery(_tokens, str, type(timezone.now()))
    now = timezone.now()
    APIToken.issue(people["alice"], "ci")
    APIToken.issue(people["bob"], "ci")
    APIToken.issue(people["bob"], "other")
    APIToken.issue(people["bob"], "ci", expires_at=now - timedelta(days=1))
    for name in ("ci", "other", "none"):
        with CaptureQueriesContext(connection) as ctx:
            found = read(name, now)
            users = [t.user.username for t in found]
        assert len(ctx) == 1
        expected = list(_tokens(name, now))
        assert [(t.pk, t.key_hash, t.expires_at, t.n) for t in found] == [
            (t.pk, t.key_hash, t.expires_at, t.n) for t in expected
        ]
        assert users == [t.user.username for t in expected]
    assert read.plan() is read.plan()  # compiled once


@pytest.mark.django_db
def test_an_argument_that_does_not_reach_the_sql_is_refused():
    read = CompiledQuery(lambda name: get_user_model().objects.all(), str)
    with pytest.raises(ValueError, match="do not reach the SQL"):
        read("x")
