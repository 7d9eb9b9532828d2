"""Sign-in lockout (django-axes): after PORTAL_LOGIN_FAILURE_LIMIT wrong passwords for one username from one
address, that pair is refused until AXES_COOLOFF_TIME has passed (templates/registration/lockout.html says when).

axes refuses to run without the request; Django's test client and management commands authenticate without one,
and those are not attacks from the network, so this backend lets them through to the next backend instead.
"""

from axes.backends import AxesStandaloneBackend
from axes.helpers import get_client_username, get_cool_off
from django.conf import settings
from django.shortcuts import render
from django.utils import timezone


class LockoutBackend(AxesStandaloneBackend):
    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None:
            return None
        return super().authenticate(request, username=username, password=password, **kwargs)


def lockout_response(request, original_response=None, credentials=None):
    """The lockout page (HTTP 429) saying when to try again. Every attempt while locked out restarts the wait
    (AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT), so the wait runs from now."""
    cool_off = get_cool_off(request)
    minutes = max(1, round(cool_off.total_seconds() / 60)) if cool_off else None
    context = {
        "username": get_client_username(request, credentials) or "",
        "failure_limit": settings.AXES_FAILURE_LIMIT,
        "minutes": minutes,
        "retry_at": timezone.now() + cool_off if cool_off else None,
    }
    return render(request, "registration/lockout.html", context, status=429)
