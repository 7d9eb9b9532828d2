"""Credentials the portal must keep but never show: sealed with Fernet (``cryptography``) under keys derived from
``DJANGO_SECRET_KEY`` and its ``SECRET_KEY_FALLBACKS``.

A sealed value is readable with the current key or any fallback, and ``seal`` always uses the current key, so
rotating ``DJANGO_SECRET_KEY`` the way Django documents it (the old key moves to ``SECRET_KEY_FALLBACKS`` until
every sealed value has been sealed again, which ``reseal`` does) loses nothing. The key of each secret is derived with
HKDF-SHA256 and a purpose string, so a sealed credential and a session signature never share a key.
"""

from __future__ import annotations

import base64

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings

PURPOSE = b"gpu-portal sealed credentials v1"


class Unreadable(Exception):
    """The value was sealed under a key that is neither DJANGO_SECRET_KEY nor one of its fallbacks."""


def _fernet(secret: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=PURPOSE).derive(secret.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def _keys() -> MultiFernet:
    secrets = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return MultiFernet([_fernet(secret) for secret in secrets])


def seal(value: str) -> str:
    """``value`` encrypted and authenticated under the current key; '' stays ''."""
    if not value:
        return ""
    return _keys().encrypt(value.encode()).decode("ascii")


def unseal(sealed: str) -> str:
    """The clear value of what ``seal`` returned, under the current key or a fallback."""
    if not sealed:
        return ""
    try:
        return _keys().decrypt(sealed.encode("ascii")).decode()
    except InvalidToken as error:
        raise Unreadable(
            "A sealed credential cannot be read with DJANGO_SECRET_KEY or SECRET_KEY_FALLBACKS: the key it was "
            "sealed under is gone. Put the old key in SECRET_KEY_FALLBACKS, or enter the credential again."
        ) from error


def reseal(sealed: str) -> str:
    """The same value sealed again under the current key (after a key rotation)."""
    return _keys().rotate(sealed.encode("ascii")).decode("ascii") if sealed else ""
