"""Issuing, rotating and revoking API tokens, for people and service accounts, with the limits in one place.

The rule: a token never outlives or out-scopes the one that made it. When a request authenticated with a token
mints another (``maker``), the new token's scope may not be wider than the maker's and its expiry not later;
asking for more is refused with a message saying so (never silently narrowed). Every token also lives at most
PORTAL_TOKEN_MAX_DAYS. Every change is audited.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import audit

from .choices import SCOPE_RANK, AuditAction, TokenScope
from .models import APIToken

#: Longest overlap a rotation may give the old secret (hours).
MAX_ROTATION_OVERLAP_HOURS = 7 * 24


class TokenLimitError(Exception):
    """The request asks for more than allowed; ``problems`` maps each field to what to change."""

    def __init__(self, problems: dict[str, list[str]]):
        self.problems = problems
        super().__init__("; ".join(m for ms in problems.values() for m in ms))


@dataclass(frozen=True)
class Issued:
    token: APIToken
    secret: str


def _maker(maker) -> APIToken | None:
    return maker if isinstance(maker, APIToken) else None


def check_limits(scope: str, expires_at, maker: APIToken | None) -> dict[str, list[str]]:
    """Every reason the wanted scope and expiry are not allowed, by field."""
    problems: dict[str, list[str]] = {}
    longest = timezone.now() + timedelta(days=settings.PORTAL_TOKEN_MAX_DAYS)
    if expires_at > longest + timedelta(minutes=1):
        problems.setdefault("days", []).append(
            f"Tokens may live at most {settings.PORTAL_TOKEN_MAX_DAYS} days; ask for fewer."
        )
    if maker is not None:
        if SCOPE_RANK[TokenScope(scope)] > maker.scope_rank:
            problems.setdefault("scope", []).append(
                f"The token you are using has scope '{maker.scope}', so it can only make tokens of scope "
                f"{', '.join(s for s, r in SCOPE_RANK.items() if r <= maker.scope_rank)}. Ask for a narrower "
                "scope, or create this token in the browser."
            )
        if expires_at > maker.expires_at:
            problems.setdefault("days", []).append(
                f"The token you are using expires {maker.expires_at:%Y-%m-%d %H:%M} UTC; a token it makes may not "
                "outlive it. Ask for fewer days, or create this token in the browser."
            )
    return problems


def issue(actor, owner, name: str, scope: str, days: int | None, *, maker=None, team=None, rotated_from=None) -> Issued:
    """A new token for ``owner`` (a person, or a service account's user) made by ``actor``; ``maker`` is the
    token the request was authenticated with, if any."""
    maker = _maker(maker)
    days = days or settings.PORTAL_TOKEN_DEFAULT_DAYS
    expires_at = timezone.now() + timedelta(days=days)
    problems = check_limits(scope, expires_at, maker)
    if problems:
        raise TokenLimitError(problems)
    with transaction.atomic():
        token, raw = APIToken.issue(
            owner, name, scope=scope, expires_at=expires_at, created_by=actor, rotated_from=rotated_from
        )
        audit.record(
            actor,
            AuditAction.TOKEN_ROTATE if rotated_from else AuditAction.TOKEN_ISSUE,
            token,
            after={
                "name": token.name,
                "scope": token.scope,
                "user": owner.get_username(),
                "expires_at": token.expires_at.isoformat(),
                **({"rotated_from": rotated_from.key_prefix} if rotated_from else {}),
            },
            team=team,
        )
    return Issued(token, raw)


def rotate(actor, token: APIToken, overlap_hours: int = 0, *, maker=None, team=None) -> Issued:
    """A new secret with the same name, scope and lifetime as ``token``; the old one stops working now, or after
    ``overlap_hours`` so running pipelines can switch over."""
    if not token.is_active or token.revoking:
        raise TokenLimitError({"detail": ["Only an active token that is not already being rotated can be rotated."]})
    if not 0 <= overlap_hours <= MAX_ROTATION_OVERLAP_HOURS:
        raise TokenLimitError({"overlap_hours": [f"Give an overlap from 0 to {MAX_ROTATION_OVERLAP_HOURS} hours."]})
    lifetime = token.expires_at - token.created
    days = max(1, min(settings.PORTAL_TOKEN_MAX_DAYS, round(lifetime / timedelta(days=1))))
    with transaction.atomic():
        issued = issue(actor, token.user, token.name, token.scope, days, maker=maker, team=team, rotated_from=token)
        token.revoked_at = timezone.now() + timedelta(hours=overlap_hours)
        token.save(update_fields=["revoked_at"])
    return issued


def revoke(actor, token: APIToken, *, team=None) -> bool:
    """Stop ``token`` now (also one still in a rotation's overlap); False when it had already stopped."""
    now = timezone.now()
    if token.revoked_at is not None and token.revoked_at <= now:
        return False
    with transaction.atomic():
        before = {"revoked_at": token.revoked_at.isoformat() if token.revoked_at else None}
        token.revoked_at = now
        token.save(update_fields=["revoked_at"])
        audit.record(actor, AuditAction.TOKEN_REVOKE, token, before=before, team=team)
    return True
