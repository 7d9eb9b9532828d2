"""The portal's secret keys during a rotation: DJANGO_SECRET_KEY signs everything new, and the keys in
DJANGO_SECRET_KEY_FALLBACKS (Django's SECRET_KEY_FALLBACKS) still count for what was made under them.

Django applies the fallbacks to what it verifies itself (sessions, signed cookies, password-reset links). The
portal also hands out values derived from the key that someone else keeps: a webhook's signing secret lives in its
receiver, and a notebook token waiting for its owner was hashed into the running server. Those must keep being
derived from the key they were made under for as long as that key is configured, so each such value names its key
by ``key_id``: the first 16 hex digits of an HMAC of a fixed text under the key, which says which key it is and
nothing about the key itself.
"""

from __future__ import annotations

from django.conf import settings
from django.utils.crypto import salted_hmac

KEY_ID_LENGTH = 16
_KEY_ID_SALT = "core.secret_keys.key_id"


def key_id(key: str) -> str:
    return salted_hmac(_KEY_ID_SALT, "", secret=key, algorithm="sha256").hexdigest()[:KEY_ID_LENGTH]


def current_key_id() -> str:
    """The id of DJANGO_SECRET_KEY (also the default of the rows that store one: made under the current key)."""
    return key_id(settings.SECRET_KEY)


def configured() -> list[tuple[str, str]]:
    """(name an operator knows it by, key): the current key first, then the fallbacks in their order."""
    keys = [("DJANGO_SECRET_KEY (current)", settings.SECRET_KEY)]
    fallbacks = getattr(settings, "SECRET_KEY_FALLBACKS", [])
    keys += [(f"DJANGO_SECRET_KEY_FALLBACKS item {number}", key) for number, key in enumerate(fallbacks, 1)]
    return keys


def key_for(wanted: str) -> str | None:
    """The configured key whose id is ``wanted``; None when no configured key has it (removed too early)."""
    return next((key for _, key in configured() if wanted and key_id(key) == wanted), None)
