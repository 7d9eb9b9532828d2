"""The command line's sign-in, device-code style (RFC 8628): ``gpuportal login --url URL`` asks for a code, the
person opens the approval page signed in to the browser (password or SSO, whatever the portal uses) and approves,
the CLI polls and receives a token of the scope it asked for.

Only a hash of the device code is stored; the token is made at the poll that collects it, so its secret is never
stored either. A code is good for PORTAL_DEVICE_CODE_SECONDS, approval and collection both, and gives out one token
at most: an approved code the CLI never collects expires like any other.
"""

from __future__ import annotations

import secrets
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import audit

from . import tokens
from .choices import AuditAction
from .models import DeviceAuthorization, hash_device_code

#: No vowels (no words) and nothing easily mistaken (0/O, 1/I).
USER_CODE_ALPHABET = "BCDFGHJKLMNPQRSTVWXZ"


class DeviceFlowError(Exception):
    """An RFC 8628 error: ``code`` is authorization_pending, slow_down, access_denied or expired_token."""

    def __init__(self, code: str, message: str):
        self.code = code
        super().__init__(message)


def normalise_user_code(raw: str) -> str:
    letters = "".join(ch for ch in (raw or "").upper() if ch.isalnum())
    return f"{letters[:4]}-{letters[4:8]}" if len(letters) == 8 else letters


def start(name: str, scope: str, days: int | None) -> tuple[DeviceAuthorization, str]:
    """A pending sign-in and its device code (returned once, to the CLI)."""
    device_code = secrets.token_urlsafe(32)
    while True:
        letters = "".join(secrets.choice(USER_CODE_ALPHABET) for _ in range(8))
        user_code = f"{letters[:4]}-{letters[4:]}"
        if not DeviceAuthorization.objects.filter(user_code=user_code, expires_at__gt=timezone.now()).exists():
            break
    now = timezone.now()
    auth = DeviceAuthorization.objects.create(
        device_code_hash=hash_device_code(device_code),
        user_code=user_code,
        name=name,
        scope=scope,
        days=days or settings.PORTAL_TOKEN_DEFAULT_DAYS,
        created=now,
        expires_at=now + timedelta(seconds=settings.PORTAL_DEVICE_CODE_SECONDS),
    )
    return auth, device_code


def pending(user_code: str) -> DeviceAuthorization | None:
    auth = DeviceAuthorization.objects.filter(user_code=normalise_user_code(user_code)).first()
    return auth if auth is not None and auth.is_pending else None


def decide(user, auth: DeviceAuthorization, approve: bool) -> None:
    """The signed-in person approves (the CLI will get a token of theirs) or denies the sign-in."""
    now = timezone.now()
    with transaction.atomic():
        undecided = DeviceAuthorization.objects.filter(
            pk=auth.pk, approved_at__isnull=True, denied_at__isnull=True, expires_at__gt=now
        )
        decision = {"approved_at": now} if approve else {"denied_at": now}
        updated = undecided.update(approved_by=user, **decision)
        if updated:
            audit.record(
                user,
                AuditAction.DEVICE_APPROVE if approve else AuditAction.DEVICE_DENY,
                auth,
                after={"user_code": auth.user_code, "name": auth.name, "scope": auth.scope, "days": auth.days},
            )


def collect(device_code: str) -> tokens.Issued:
    """The token for an approved sign-in, made now; raises DeviceFlowError while there is none to give."""
    with transaction.atomic():
        auth = (
            DeviceAuthorization.objects.select_for_update(of=("self",))
            .select_related("approved_by")
            .filter(device_code_hash=hash_device_code(device_code or ""))
            .first()
        )
        refusal = _refusal(auth)  # outside a failing transaction, so the poll's time is kept
        if refusal is None:
            issued = tokens.issue(auth.approved_by, auth.approved_by, auth.name, auth.scope, auth.days)
            auth.token = issued.token
            auth.save(update_fields=["token"])
    if refusal is not None:
        raise refusal
    return issued


def _refusal(auth: DeviceAuthorization | None) -> DeviceFlowError | None:
    now = timezone.now()
    if auth is None or auth.token_id is not None:
        return DeviceFlowError("expired_token", "This sign-in code is unknown or was used; run the login again.")
    if auth.denied_at is not None:
        return DeviceFlowError("access_denied", "The sign-in was denied in the browser.")
    if auth.expires_at <= now:  # approved or not (RFC 8628: expires_in is the device code's lifetime)
        if auth.approved_at is None:
            return DeviceFlowError("expired_token", "The sign-in code expired before approval; run the login again.")
        return DeviceFlowError(
            "expired_token", "The sign-in code expired before its token was collected; run the login again."
        )
    if auth.approved_at is None:
        too_soon = auth.last_polled_at and now - auth.last_polled_at < timedelta(
            seconds=settings.PORTAL_DEVICE_POLL_INTERVAL * 0.8
        )
        DeviceAuthorization.objects.filter(pk=auth.pk).update(last_polled_at=now)
        if too_soon:
            return DeviceFlowError("slow_down", "Polling too often; wait longer between polls.")
        return DeviceFlowError("authorization_pending", "Waiting for approval in the browser.")
    if not auth.approved_by.is_active:
        return DeviceFlowError("access_denied", "The account that approved the sign-in is disabled.")
    return None
