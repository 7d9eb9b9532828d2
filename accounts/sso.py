"""Single sign-on with OpenID Connect (mozilla-django-oidc), and the group mapping applied at every SSO sign-in.

The rule: a person's SSO memberships are exactly what their groups grant now. At every sign-in the groups claim is
read again; memberships a mapped group grants are created (or their role changed), memberships single sign-on added
earlier that no group grants any more are removed, and memberships a person added in the portal (source "local")
are never touched. Portal admin follows the groups too, but only when some mapping grants admin: without one,
admin stays whatever an admin set by hand.

Accounts are found by the provider's (issuer, subject), never by username or e-mail, so a provider user cannot
take over a local break-glass account. SSO is off when OIDC_RP_CLIENT_ID is unset; nothing here then reaches out.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlencode

import requests
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured, SuspiciousOperation
from django.db import transaction
from django.shortcuts import resolve_url
from django.utils import timezone
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from core import audit

from .choices import MembershipRole, MembershipSource, SsoAuditAction
from .models import Membership
from .sso_models import SsoGroupMapping, SsoIdentity

log = logging.getLogger(__name__)

#: Roles from lowest to highest: where two groups grant roles in one team, the later one here wins.
ROLE_RANK = {MembershipRole.MEMBER.value: 0, MembershipRole.LEAD.value: 1}

# Endpoint settings and the discovery document's name for each.
_ENDPOINTS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization_endpoint",
    "OIDC_OP_TOKEN_ENDPOINT": "token_endpoint",
    "OIDC_OP_USER_ENDPOINT": "userinfo_endpoint",
    "OIDC_OP_JWKS_ENDPOINT": "jwks_uri",
    "OIDC_OP_LOGOUT_URL": "end_session_endpoint",
}
_DISCOVERY_TTL = 3600.0
_discovery_lock = threading.Lock()
_discovery_cache: dict[str, tuple[float, dict]] = {}


class SsoUnavailable(Exception):
    """The provider's configuration cannot be had (discovery unreachable, an endpoint missing)."""


def enabled() -> bool:
    return bool(getattr(settings, "OIDC_RP_CLIENT_ID", ""))


def provider_name() -> str:
    return getattr(settings, "PORTAL_SSO_PROVIDER_NAME", "") or "SSO"


def _discovery() -> dict:
    url = getattr(settings, "OIDC_OP_DISCOVERY_URL", "")
    if not url:
        return {}
    with _discovery_lock:
        cached = _discovery_cache.get(url)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        try:
            response = requests.get(url, timeout=getattr(settings, "OIDC_TIMEOUT", None) or 10)
            response.raise_for_status()
            document = response.json()
        except (requests.RequestException, ValueError) as exc:
            raise SsoUnavailable(f"The identity provider's discovery document {url} could not be read: {exc}") from exc
        _discovery_cache[url] = (time.monotonic() + _DISCOVERY_TTL, document)
        return document


def endpoint(setting: str, required: bool = True) -> str:
    """An OP endpoint: the explicit setting if given, else the discovery document's (read once an hour)."""
    value = getattr(settings, setting, "") or _discovery().get(_ENDPOINTS[setting], "")
    if required and not value:
        raise SsoUnavailable(f"Set {setting} or OIDC_OP_DISCOVERY_URL: the portal does not know where it is.")
    return value


# --- The mapping (pure) ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Grants:
    """What a set of groups grants: team id -> role, and portal admin (None: no mapping decides admin)."""

    teams: dict[int, str] = field(default_factory=dict)
    admin: bool | None = None


def grants_for(groups: Iterable[str], mappings: Iterable[SsoGroupMapping]) -> Grants:
    """The union of what the mapped groups among ``groups`` grant; the higher role wins within a team."""
    have = set(groups)
    teams: dict[int, str] = {}
    admin_decides = False
    admin = False
    for mapping in mappings:
        if mapping.is_admin:
            admin_decides = True
            admin = admin or mapping.group in have
            continue
        if mapping.group not in have:
            continue
        current = teams.get(mapping.team_id)
        if current is None or ROLE_RANK[mapping.role] > ROLE_RANK[current]:
            teams[mapping.team_id] = mapping.role
    return Grants(teams=teams, admin=admin if admin_decides else None)


def groups_from_claims(claims: dict) -> list[str]:
    """The groups claim as a list of strings (a provider may send one string, or nothing)."""
    value = claims.get(getattr(settings, "PORTAL_SSO_GROUPS_CLAIM", "groups") or "groups")
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []


# --- Applying it ---------------------------------------------------------------------------------------------------


def apply_groups(user, groups: Iterable[str]) -> Grants:
    """Make ``user``'s SSO memberships and admin flag what ``groups`` grant now; every change is audited."""
    groups = sorted(set(groups))
    with transaction.atomic():
        grants = grants_for(groups, SsoGroupMapping.objects.all())
        existing = {
            m.team_id: m for m in Membership.objects.select_for_update().select_related("team").filter(user=user)
        }
        for team_id, role in grants.teams.items():
            membership = existing.get(team_id)
            if membership is None:
                membership = Membership.objects.create(
                    user=user, team_id=team_id, role=role, source=MembershipSource.SSO
                )
                audit.record(
                    user, SsoAuditAction.MEMBERSHIP_GRANT, membership, team=membership.team,
                    after={"role": role, "source": MembershipSource.SSO.value, "groups": groups},
                )  # fmt: skip
            elif membership.source == MembershipSource.SSO and membership.role != role:
                before = membership.role
                membership.role = role
                membership.save(update_fields=["role"])
                audit.record(
                    user, SsoAuditAction.MEMBERSHIP_ROLE, membership, team=membership.team,
                    before={"role": before}, after={"role": role, "groups": groups},
                )  # fmt: skip
        for team_id, membership in existing.items():
            if membership.source == MembershipSource.SSO and team_id not in grants.teams:
                audit.record(
                    user, SsoAuditAction.MEMBERSHIP_REVOKE, membership, team=membership.team,
                    before={"role": membership.role, "source": membership.source}, after={"groups": groups},
                )  # fmt: skip
                membership.delete()
        if grants.admin is not None and (user.is_staff, user.is_superuser) != (grants.admin, grants.admin):
            before = {"is_staff": user.is_staff, "is_superuser": user.is_superuser}
            user.is_staff = user.is_superuser = grants.admin
            user.save(update_fields=["is_staff", "is_superuser"])
            audit.record(
                user, SsoAuditAction.ADMIN_CHANGE, user, before=before,
                after={"is_staff": grants.admin, "is_superuser": grants.admin, "groups": groups},
            )  # fmt: skip
    return grants


_USERNAME_UNSAFE = re.compile(r"[^\w.@+-]")


def username_from_claims(claims: dict) -> str:
    """preferred_username, else the e-mail address, else the subject; trimmed to what Django accepts."""
    raw = claims.get("preferred_username") or claims.get("email") or f"sso-{claims.get('sub', '')}"
    return _USERNAME_UNSAFE.sub("-", str(raw).strip())[:140] or "sso-user"


def _free_username(wanted: str) -> str:
    """``wanted``, or ``wanted-2``, ``wanted-3`` … when an account (e.g. a local one) already has it."""
    user_model = get_user_model()
    candidate, n = wanted, 1
    while user_model.objects.filter(username__iexact=candidate).exists():
        n += 1
        candidate = f"{wanted}-{n}"
    return candidate


def _profile(claims: dict) -> dict[str, str]:
    return {
        "email": str(claims.get("email") or "")[:254],
        "first_name": str(claims.get("given_name") or "")[:150],
        "last_name": str(claims.get("family_name") or "")[:150],
    }


def _linkable_local_account(claims: dict):
    """With PORTAL_SSO_LINK_LOCAL_ACCOUNTS on, the account made before SSO that this first SSO sign-in takes over:
    same username and same e-mail, which the provider says it verified; never an admin (break-glass accounts stay
    local) nor an account already linked. None otherwise."""
    email = claims.get("email")
    if not getattr(settings, "PORTAL_SSO_LINK_LOCAL_ACCOUNTS", False) or not email:
        return None
    if claims.get("email_verified") not in (True, "true"):
        return None
    return (
        get_user_model()
        .objects.select_for_update(of=("self",))
        .filter(username__iexact=username_from_claims(claims), email__iexact=email, is_staff=False, is_superuser=False)
        .filter(sso_identity__isnull=True)
        .first()
    )


def sign_in(issuer: str, claims: dict, request=None):
    """Find or create the account of this provider identity, refresh it from ``claims`` and apply the mapping."""
    subject = str(claims["sub"])
    groups = groups_from_claims(claims)
    user_model = get_user_model()
    with transaction.atomic():
        identity = (
            SsoIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is None:
            user = _linkable_local_account(claims)
            if user is not None:
                user.set_unusable_password()  # from now on this person signs in at the provider
                user.save(update_fields=["password"])
                audit.record(user, SsoAuditAction.USER_LINK, user, after={"issuer": issuer, "subject": subject})
            elif getattr(settings, "OIDC_CREATE_USER", True):
                user = user_model(username=_free_username(username_from_claims(claims)), **_profile(claims))
                user.set_unusable_password()  # SSO people sign in at the provider, never with a portal password
                user.save()
                audit.record(user, SsoAuditAction.USER_CREATE, user, after={"issuer": issuer, "subject": subject})
            else:
                return None
            identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
        user = identity.user
        profile = {k: v for k, v in _profile(claims).items() if v}
        if any(getattr(user, k) != v for k, v in profile.items()):
            for k, v in profile.items():
                setattr(user, k, v)
            user.save(update_fields=list(profile))
        identity.groups = groups
        identity.last_sign_in = timezone.now()
        identity.save(update_fields=["groups", "last_sign_in"])
        if not user.is_active:
            return user  # the callback refuses inactive accounts; their memberships stay as they were
        apply_groups(user, groups)
        audit.record(user, SsoAuditAction.LOGIN, user, after={"groups": groups})
    return user


class PortalOIDCBackend(OIDCAuthenticationBackend):
    """mozilla-django-oidc's backend with the portal's account rules (module docstring).

    Endpoints are looked up only when a sign-in comes back from the provider, so a password sign-in (break-glass)
    never waits on, or fails with, an unreachable provider.
    """

    def __init__(self, *args, **kwargs):
        self.UserModel = get_user_model()
        self.OIDC_RP_CLIENT_ID = getattr(settings, "OIDC_RP_CLIENT_ID", "")
        self.OIDC_RP_CLIENT_SECRET = getattr(settings, "OIDC_RP_CLIENT_SECRET", "")
        self.OIDC_RP_SIGN_ALGO = getattr(settings, "OIDC_RP_SIGN_ALGO", "RS256")
        self.OIDC_RP_IDP_SIGN_KEY = getattr(settings, "OIDC_RP_IDP_SIGN_KEY", None) or None

    def authenticate(self, request, **kwargs):
        # Only the callback view passes a nonce; a password form never reaches the provider through here.
        if request is None or "nonce" not in kwargs or not enabled():
            return None
        try:
            self.OIDC_OP_TOKEN_ENDPOINT = endpoint("OIDC_OP_TOKEN_ENDPOINT")
            self.OIDC_OP_USER_ENDPOINT = endpoint("OIDC_OP_USER_ENDPOINT")
            self.OIDC_OP_JWKS_ENDPOINT = endpoint("OIDC_OP_JWKS_ENDPOINT", required=False) or None
        except SsoUnavailable as exc:
            log.warning("Single sign-on failed: %s", exc)
            return None
        if self.OIDC_RP_SIGN_ALGO.startswith(("RS", "ES")) and not (
            self.OIDC_OP_JWKS_ENDPOINT or self.OIDC_RP_IDP_SIGN_KEY
        ):
            raise ImproperlyConfigured(f"{self.OIDC_RP_SIGN_ALGO} needs OIDC_OP_JWKS_ENDPOINT or OIDC_RP_IDP_SIGN_KEY.")
        try:
            return super().authenticate(request, **kwargs)
        except SuspiciousOperation as exc:  # a forged, foreign or stale token: the sign-in fails, nothing more
            log.warning("Single sign-on refused: %s", exc)
            return None

    def verify_token(self, token, **kwargs):
        """The library checks signature, expiry and nonce; this adds the audience and the issuer."""
        payload = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        if self.OIDC_RP_CLIENT_ID not in ([audience] if isinstance(audience, str) else list(audience or [])):
            raise SuspiciousOperation("The ID token was issued to another client (aud).")
        try:
            issuer = _discovery().get("issuer", "")
        except SsoUnavailable:
            issuer = ""
        if issuer and payload.get("iss") != issuer:
            raise SuspiciousOperation(f"The ID token's issuer {payload.get('iss')!r} is not {issuer!r}.")
        return payload

    def get_user(self, user_id):
        # Django's rule, which mozilla-django-oidc's own get_user drops: a deactivated account's open sessions end.
        user = super().get_user(user_id)
        return user if user is not None and self.user_can_authenticate(user) else None

    def verify_claims(self, claims):
        return bool(claims.get("sub")) and bool(claims.get("preferred_username") or claims.get("email"))

    def get_or_create_user(self, access_token, id_token, payload):
        userinfo = self.get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") not in (None, payload.get("sub")):
            raise SuspiciousOperation("The userinfo subject differs from the ID token's.")
        # The ID token's claims first (some providers put groups only there), the fresher userinfo over them.
        claims = {**payload, **userinfo}
        if not self.verify_claims(claims):
            raise SuspiciousOperation("The provider sent no subject, or neither preferred_username nor email.")
        return sign_in(str(payload.get("iss", "")), claims, self.request)


def logout_url(request) -> str | None:
    """Where to send a person whose portal session just ended so the provider ends theirs (None: nowhere).

    ``request.session`` must still hold the ID token (read it before logging out).
    """
    if not enabled():
        return None
    id_token = request.session.get("oidc_id_token")
    if not id_token:
        return None
    try:
        url = endpoint("OIDC_OP_LOGOUT_URL", required=False)
    except SsoUnavailable as exc:
        log.warning("Ending the provider's session skipped: %s", exc)
        return None
    if not url:
        return None
    after = request.build_absolute_uri(resolve_url(settings.LOGIN_URL))
    sep = "&" if "?" in url else "?"
    return f"{url}{sep}{urlencode({'id_token_hint': id_token, 'post_logout_redirect_uri': after})}"


__all__ = [
    "Grants",
    "PortalOIDCBackend",
    "SsoUnavailable",
    "apply_groups",
    "enabled",
    "endpoint",
    "grants_for",
    "logout_url",
    "provider_name",
    "sign_in",
]
