"""In-app notifications (the bell in the header). Sending one is a single insert; reading marks it read."""

from __future__ import annotations

from .models import Notification


def notify(user, kind: str, title: str, body: str = "", url: str = "") -> Notification:
    return Notification.objects.create(user=user, kind=kind, title=title[:200], body=body, url=url[:300])
