"""Verifying the portal's webhook requests in a receiver (no portal needed): the X-Portal-Signature header is
``t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<raw body>")>``."""

from __future__ import annotations

import hashlib
import hmac
import time


def verify(secret: str, header: str, body: bytes, tolerance: int = 300, now: float | None = None) -> bool:
    """True when ``header`` signs ``body`` (the raw request bytes) under ``secret`` and is at most ``tolerance``
    seconds old (an older one may be a replay)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    if "t" not in fields or "v1" not in fields or not fields["t"].isdigit():
        return False
    timestamp = int(fields["t"])
    if abs((time.time() if now is None else now) - timestamp) > tolerance:
        return False
    expected = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, fields["v1"])
