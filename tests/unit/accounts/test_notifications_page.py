"""The notifications page (audit finding 11): reading it changes nothing; marking read is a POST (with CSRF),
only of your own notifications."""

from __future__ import annotations

import pytest

from core.models import Notification
from core.notify import notify
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def test_get_shows_notifications_without_marking_them_read(client, people):
    notify(people["alice"], "job.idle", "Job x holds GPUs it is not using")
    client.login(username="alice", password=PASSWORD)
    for _ in range(2):
        page = client.get("/notifications/").content.decode()
        assert "holds GPUs it is not using" in page and 'data-testid="mark-read"' in page
    assert Notification.objects.filter(read_at__isnull=True).count() == 1
    assert client.head("/notifications/").status_code == 200
    assert Notification.objects.filter(read_at__isnull=True).count() == 1


def test_marking_read_is_a_post_of_your_own_notifications_only(client, people):
    mine = notify(people["alice"], "job.idle", "Yours")
    theirs = notify(people["bob"], "job.idle", "Not yours")
    client.login(username="alice", password=PASSWORD)
    assert client.get("/notifications/read/").status_code == 405
    response = client.post("/notifications/read/")
    assert response.status_code == 302 and response["Location"] == "/notifications/"
    mine.refresh_from_db()
    theirs.refresh_from_db()
    assert mine.read_at is not None and theirs.read_at is None
    assert 'data-testid="unread-count"' not in client.get("/notifications/").content.decode()


def test_marking_read_needs_the_csrf_token(people):
    from django.test import Client

    notify(people["alice"], "job.idle", "Yours")
    client = Client(enforce_csrf_checks=True)
    client.login(username="alice", password=PASSWORD)
    assert client.post("/notifications/read/").status_code == 403
    assert Notification.objects.filter(read_at__isnull=True).count() == 1
