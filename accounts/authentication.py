"""Bearer-token authentication for pipelines: ``Authorization: Bearer gpp_<prefix>_<secret>``."""

from datetime import timedelta

from django.utils import timezone
from django.utils.translation import gettext_lazy as _
from rest_framework import authentication, exceptions

from core.throttles import TokenFailureThrottle

from .models import APIToken

#: last_used_at is written at most this often per token, so a busy pipeline does not write on every call.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class APITokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() not in (b"bearer", b"token"):
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(_("Send the header as 'Authorization: Bearer <token>'."))
        try:
            raw = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed(_("The token contains characters that are not allowed.")) from exc
        throttle = TokenFailureThrottle()
        wait = throttle.blocked_for(request)
        if wait is not None:
            raise exceptions.Throttled(
                wait,
                str(
                    _(
                        "Too many requests with a wrong, expired or revoked API token came from your address. Check "
                        "the token you send (or create a new one under API tokens)."
                    )
                ),
            )
        token = APIToken.find(raw)
        if token is None:
            throttle.failed(request)
            raise exceptions.AuthenticationFailed(
                _(
                    "This API token is unknown, expired or revoked. Create a new one under API tokens in the page "
                    "header (signed in with the browser)."
                )
            )
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed(_("The account that owns this token is disabled."))
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            APIToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request):
        return self.keyword
