"""The door a job's checkpoint token opens: ``POST /api/v1/jobs/<its job>/checkpoint/`` and nothing else.

``CheckpointTokenAuthentication`` is set on that one action only (jobs.api.views.JobViewSet.checkpoint), ahead of
the API's usual classes; everywhere else a ``gpc_…`` token meets APITokenAuthentication, which does not know it
(401). On the checkpoint action it takes only ``gpc_`` bearer tokens (an API token goes on to the usual classes),
accepts one only while jobs.checkpoint_tokens.find does (its job active, its attempt current), and only on its own
job's address (any other job: 403). The request then acts as the job's owner, with the token as ``request.auth``:
jobs.checkpoints.report_checkpoint lets the token report for its job and for no other. Wrong tokens count
towards the same per-address limit as wrong API tokens.
"""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from core.throttles import TokenFailureThrottle
from jobs import checkpoint_tokens
from jobs.models import JobCheckpointToken

_KIND = f"{JobCheckpointToken.PREFIX}_".encode()


class CheckpointTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if len(header) != 2 or header[0].lower() != b"bearer" or not header[1].startswith(_KIND):
            return None  # not a checkpoint token: the API's usual classes decide
        try:
            raw = header[1].decode()
        except UnicodeError as exc:
            raise exceptions.AuthenticationFailed("The token contains characters that are not allowed.") from exc
        throttle = TokenFailureThrottle()
        wait = throttle.blocked_for(request)
        if wait is not None:
            raise exceptions.Throttled(wait, "Too many requests with a wrong checkpoint token came from your address.")
        token = checkpoint_tokens.find(raw)
        if token is None:
            throttle.failed(request)
            raise exceptions.AuthenticationFailed(
                "This checkpoint token is unknown or no longer works: a job's token works only while the attempt it "
                "was given to is active. A new attempt gets a new one in PORTAL_CHECKPOINT_TOKEN."
            )
        wanted = ((getattr(request, "parser_context", None) or {}).get("kwargs") or {}).get("pk")
        if str(wanted) != str(token.job_id):
            raise exceptions.PermissionDenied(
                f"This checkpoint token reports checkpoints of job #{token.job_id} only; use the address in "
                "PORTAL_CHECKPOINT_URL."
            )
        return token.job.owner, token

    def authenticate_header(self, request):
        return self.keyword


class CheckpointTokenScheme(OpenApiAuthenticationExtension):
    target_class = "jobs.api.checkpoint_auth.CheckpointTokenAuthentication"
    name = "checkpointToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A job's checkpoint token (PORTAL_CHECKPOINT_TOKEN inside a job that declared "
            '`"report": "token"`): reports that job\'s checkpoints and does nothing else.',
        }
