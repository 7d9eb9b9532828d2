"""The API's waiting without polling (jobs.eventstream has the rules): ``GET /api/v1/jobs/{id}/wait/`` (a
long-poll), ``GET /api/v1/jobs/{id}/events/stream/`` and ``GET /api/v1/teams/{slug}/events/stream/``
(server-sent events). JobViewSet takes the job actions from ``JobStreamActions``; the portal's URLs mount
``TeamEventStreamView``."""

from __future__ import annotations

import functools

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, renderers, serializers
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts import roles
from accounts.models import Team
from accounts.permissions import IsAuthenticatedWithTokenScope
from core.api.bounds import whole_number
from core.api.kept import KeptAnswers
from jobs import eventstream
from jobs.api import stream_cap
from jobs.api.serializers import JobSerializer
from jobs.choices import JobState

#: The paths the stream server answers, as a prefix: every view jobs.api.stream_cap caps (long-polls and event
#: streams, the followed log included). deploy/70-ingress.yaml and deploy/proxy/portal.conf.template route them there
#: with this expression; tests/unit/test_stream_routing.py holds them to it and to the URL conf.
STREAM_SERVER_PATHS = r"/api/v1/(jobs/[0-9]+/(wait|events/stream|logs/stream)|teams/[^/]+/events/stream)/"

#: One server-sent event of a stream (the schema of each event, as schemathesis and OpenAPI 3.2 read it).
SSE_EVENT = {
    "type": "object",
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string", "description": "The event's JSON, as text."},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}


class EventStreamRenderer(renderers.BaseRenderer):
    """Lets an EventSource (Accept: text/event-stream) reach a stream; errors still come as JSON."""

    media_type = "text/event-stream"
    format = "sse"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes) else str(data).encode()


class JobWaitSerializer(JobSerializer):
    """A job as the long-poll returns it: as soon as it changes, or as it was when the timeout passed."""

    timed_out = serializers.BooleanField(
        read_only=True, help_text="True: the timeout passed with no change; the job is as it was."
    )

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "timed_out"]
        read_only_fields = [*JobSerializer.Meta.read_only_fields, "timed_out"]


WAIT_ANSWERS = KeptAnswers(JobWaitSerializer, "api:job-detail")


def _whole(params, name: str, problems: dict) -> int | None:
    raw = params.get(name)
    if raw in (None, ""):
        return None
    value = whole_number(str(raw))
    if value is None:
        problems[name] = [f"An event id: a whole number from 0, in ASCII digits (got {raw!r})."]
    return value


#: The longest wait a long-poll may ask for (the API's contract); the operator's PORTAL_WAIT_MAX_SECONDS may
#: answer sooner (``timed_out`` true), never refuse.
MOST_SECONDS = 60


def _wait_arguments(params) -> tuple[float, str | None, int | None]:
    """(timeout, state, after_event) of a long-poll; a 400 naming every wrong one."""
    problems: dict[str, list[str]] = {}
    most = MOST_SECONDS
    timeout = 30.0
    if params.get("timeout") not in (None, ""):
        try:
            timeout = float(params["timeout"])
        except ValueError:
            timeout = -1.0
        if not 0 <= timeout <= most:
            problems["timeout"] = [f"Seconds to wait: a number from 0 to {most}."]
    state = params.get("state") or None
    if state is not None and state not in JobState.values:
        problems["state"] = [f"A job state, one of: {', '.join(JobState.values)}."]
    after_event = _whole(params, "after_event", problems)
    if problems:
        raise serializers.ValidationError(problems)
    return min(timeout, settings.PORTAL_WAIT_MAX_SECONDS), state, after_event


def _last_event_id(request) -> int | None:
    """Where a stream resumes: the Last-Event-ID header (EventSource sends it), else ``?after=``."""
    problems: dict[str, list[str]] = {}
    header = request.headers.get("Last-Event-ID")
    if header not in (None, ""):
        value = _whole({"Last-Event-ID": header.strip()}, "Last-Event-ID", problems)
    else:
        value = _whole(request.query_params, "after", problems)
    if problems:
        raise serializers.ValidationError(problems)
    return value


STREAM_DESCRIPTION = (
    "text/event-stream of timeline events: ``id:`` the event's id, ``event:`` its kind, ``data:`` JSON with id, "
    "job, job_name, state (the job's, when sent), cluster (the name of the cluster the job was placed on, null "
    "before that), kind, message, at and data. Resume after an event with the "
    "Last-Event-ID header (EventSource sends it) or ``after``. A ``: keep-alive`` comment goes out while it is "
    "quiet; a stream lasts at most PORTAL_EVENT_STREAM_SECONDS, then reconnect."
)
AFTER = OpenApiParameter("after", int, description="Go on after this event id (as Last-Event-ID).")


class JobStreamActions:
    """The long-poll and the event stream of one job (mixed into JobViewSet)."""

    @extend_schema(
        summary="Wait for a job to change (long-poll)",
        description="Answers as soon as the job's state differs from ``state``, a timeline event newer than "
        "``after_event`` exists, or the job has ended (given neither: once it has ended); else after ``timeout`` "
        "seconds with the job unchanged and ``timed_out`` true. Ask again to go on waiting.",
        parameters=[
            OpenApiParameter("timeout", float, description="Seconds to wait at most, 0 to 60 (default 30)."),
            OpenApiParameter("state", str, description="The state you know: answer once the job is in another."),
            OpenApiParameter("after_event", int, description="The newest event id you know: answer at a newer one."),
        ],
        responses={
            200: JobWaitSerializer,
            400: OpenApiResponse(description="timeout, state or after_event is wrong; the body says what to send."),
            404: OpenApiResponse(description="No such job among those you can see."),
            429: stream_cap.TOO_MANY,
        },
    )
    @action(detail=True, methods=["get"], filterset_class=None)
    @stream_cap.capped(stream_cap.wait_seconds)
    def wait(self, request, pk=None):
        # The job with its newest event's id, in one statement (JobViewSet.answered_job), so a wait that answers
        # at once costs one query; each later poll reads it the same way.
        job = self.answered_job(newest_event=True)
        timeout, state, after_event = _wait_arguments(request.query_params)
        read = functools.partial(self.answered_job, newest_event=True)
        job, timed_out = eventstream.wait_for_job(
            read, state=state, after_event=after_event, timeout=timeout, first=job
        )
        job.timed_out = timed_out
        return Response(WAIT_ANSWERS.one(job, request))

    @extend_schema(
        summary="Follow a job's timeline (server-sent events)",
        description=STREAM_DESCRIPTION + " The stream starts with the whole timeline (or the events after the one "
        "named) and ends with an ``end`` event once the job has ended.",
        parameters=[AFTER],
        responses={
            (200, "text/event-stream"): SSE_EVENT,
            400: OpenApiResponse(description="Last-Event-ID or after is not an event id."),
            404: OpenApiResponse(description="No such job among those you can see."),
            429: stream_cap.TOO_MANY,
        },
    )
    @action(detail=True, methods=["get"], url_path="events/stream", filterset_class=None,
            renderer_classes=[JSONRenderer, EventStreamRenderer])  # fmt: skip
    @stream_cap.capped(stream_cap.event_stream_seconds)
    def events_stream(self, request, pk=None):
        job = self.get_object()
        return eventstream.job_stream(job, _last_event_id(request))


@extend_schema(tags=["teams"])
class TeamEventStreamView(APIView):
    """GET /api/v1/teams/{slug}/events/stream/: the timeline events of every job of one team."""

    permission_classes = [IsAuthenticatedWithTokenScope]
    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        summary="Follow a team's job events (server-sent events)",
        description=STREAM_DESCRIPTION + " Members of the team (and admins) only. It starts with a ``ready`` event "
        "whose id is the newest event now, then sends each new one.",
        parameters=[AFTER],
        responses={
            (200, "text/event-stream"): SSE_EVENT,
            400: OpenApiResponse(description="Last-Event-ID or after is not an event id."),
            404: OpenApiResponse(description="No such team among yours."),
            429: stream_cap.TOO_MANY,
        },
    )
    @stream_cap.capped(stream_cap.event_stream_seconds)
    def get(self, request, slug: str):
        team = Team.objects.filter(slug=slug).first()
        if team is None or roles.team_role(request.user, team) is None:
            raise exceptions.NotFound(f"You are in no team called {slug!r}.")
        return eventstream.team_stream(team, _last_event_id(request))
