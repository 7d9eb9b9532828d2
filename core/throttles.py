"""Rate limits on the ways in: wrong API tokens, minting tokens, and the command line's sign-in codes.

DRF's SimpleRateThrottle with the rates in settings.PORTAL_THROTTLE_RATES (read at each request, so an operator's
change and a test's override both apply), per client address as core.client_address tells it from
PORTAL_TRUSTED_PROXIES (the sign-in lockout counts by the same). Counts live in Django's cache: with more than one web
process, point CACHE_URL at Redis so they share them. While that Redis is down or hangs each process counts for
itself (core/cache.py), so a request never fails or waits for the throttle. The browser's sign-in form is limited
separately by django-axes.
"""

from __future__ import annotations

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle

from core.client_address import client_address


class PortalRateThrottle(SimpleRateThrottle):
    """Keyed on the client's address unless a subclass says otherwise."""

    def get_rate(self):
        return settings.PORTAL_THROTTLE_RATES[self.scope]

    def get_ident(self, request):
        # The address per PORTAL_TRUSTED_PROXIES, as the sign-in lockout counts it; DRF's own reads the whole
        # X-Forwarded-For, which the client writes.
        return client_address(request)

    def get_cache_key(self, request, view):
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}


class TokenCreateThrottle(PortalRateThrottle):
    """Issuing and rotating tokens, per user."""

    scope = "token-create"

    def get_cache_key(self, request, view):
        if not request.user.is_authenticated:
            return super().get_cache_key(request, view)
        return self.cache_format % {"scope": self.scope, "ident": f"user-{request.user.pk}"}


class DeviceStartThrottle(PortalRateThrottle):
    """Asking for a sign-in code, per address."""

    scope = "device-start"


class DevicePollThrottle(PortalRateThrottle):
    """Polling for the approved token, per address."""

    scope = "device-poll"


class TokenFailureThrottle(PortalRateThrottle):
    """Requests with a wrong, expired or revoked token, per address. Authentication runs before DRF's throttles
    (a failed authentication never reaches them), so APITokenAuthentication asks this one directly: ``wait`` is
    how long the address must wait (None: it may try), ``failed`` counts one failure."""

    scope = "token-failure"

    def _load(self, request) -> bool:
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()
        return True

    def blocked_for(self, request) -> float | None:
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self._load(request)
        if len(self.history) >= self.num_requests:
            return self.wait()
        return None

    def failed(self, request) -> None:
        self.rate = self.get_rate()
        self.num_requests, self.duration = self.parse_rate(self.rate)
        self._load(request)
        self.history.insert(0, self.now)
        self.cache.set(self.key, self.history, self.duration)
