"""Telling a job's owner that someone else acted on their work: the bell and, where they have an address, e-mail."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail

from accounts.notify import notify

from .models import Job

log = logging.getLogger(__name__)


def tell_owner(job: Job, title: str, body: str) -> None:
    url = job.get_absolute_url()
    notify(job.owner, "job.stopped_by_admin", title, body, url)
    if job.owner.email:
        try:
            send_mail(title, f"{body}\n\n{settings.PORTAL_BASE_URL.rstrip('/')}{url}", None, [job.owner.email])
        except Exception:  # a mail outage must not stop the cycle; the bell already has it
            log.warning("could not e-mail %s about job %s", job.owner.email, job.pk, exc_info=True)
