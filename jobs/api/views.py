import functools

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import OuterRef, Subquery
from django.http import Http404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import (
    OpenApiParameter,
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
    inline_serializer,
)
from rest_framework import exceptions, mixins, renderers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.settings import api_settings

from accounts.models import Team
from accounts.permissions import IsAuthenticatedWithTokenScope
from accounts.roles import roles_remembered
from cluster.base import ClusterError, NotFound
from core.api.bounds import BoundedLimitOffsetPagination, is_id, whole_number
from core.api.strict_body import every_problem
from gpus.fleet import backend_of_id
from jobs import access, actions, checkpoints, livelog, logkeeping, workload_templates
from jobs.api import answer_read, stream_cap
from jobs.api.checkpoint_auth import CheckpointTokenAuthentication
from jobs.api.serializers import (
    JOB_ANSWERS,
    JOB_REQUESTS,
    CheckpointReportSerializer,
    JobArrayCreateSerializer,
    JobArraySerializer,
    JobEventSerializer,
    JobSerializer,
    PrioritySerializer,
    StopReasonSerializer,
    answered,
    submit_fields,
)
from jobs.api.streams import EventStreamRenderer, JobStreamActions
from jobs.choices import ACTIVE_STATES, TemplateKind
from jobs.distributed import ranks
from jobs.filtersets import (
    JobArrayFilterSet,
    JobFilterSet,
)
from jobs.models import Job, JobArray, JobEvent
from jobs.validation import array_problems

#: A job's own checkpoint token (jobs.api.checkpoint_auth) opens the checkpoint action and no other.
CHECKPOINT_AUTHENTICATION = [CheckpointTokenAuthentication, *api_settings.DEFAULT_AUTHENTICATION_CLASSES]


class UnprocessableEntity(exceptions.APIException):
    status_code = 422
    default_detail = "The request conflicts with an earlier one."
    default_code = "unprocessable"


class PlainTextRenderer(renderers.BaseRenderer):
    """Lets a client that asks for text/plain reach the download (the response is built by the view)."""

    media_type = "text/plain"
    format = "txt"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return data if isinstance(data, bytes) else str(data).encode()


class LogUnavailable(exceptions.APIException):
    """The cluster could not give the log now (pod not started, API server unreachable): try again later."""

    status_code = 503
    default_detail = "The cluster did not return the log; try again shortly."
    default_code = "log_unavailable"


SERVICE_ERRORS = (DjangoPermissionDenied, DjangoValidationError, actions.IdempotencyConflict)


#: The services' (and the model's) field names, as the API's requests call them.
API_FIELD_NAMES = {"cpu_millicores": "cpu", "array_size": "size", "array_parallelism": "parallelism"}


def raise_for(error: Exception):
    """A jobs.actions error as the DRF error with the same words: 400 with field keys, 403, or 422."""
    if isinstance(error, DjangoPermissionDenied):
        raise exceptions.PermissionDenied(str(error))
    if isinstance(error, actions.IdempotencyConflict):
        raise UnprocessableEntity(str(error))
    if isinstance(error, DjangoValidationError):
        if hasattr(error, "error_dict"):
            # The services name the model's field; the API calls it what the request called it.
            detail = {API_FIELD_NAMES.get(k, k): v for k, v in error.message_dict.items()}
        else:
            detail = {"detail": " ".join(error.messages)}
        raise serializers.ValidationError(detail)
    raise error


def spec_problems(user, serializer: JobSerializer, *, array: bool = False) -> dict[str, list[str]]:
    """What jobs.actions.submit_job (``array``: submit_array) would refuse in a request whose fields read well:
    quota, placement, the drivers, mounts and secrets (for strict.every_problem)."""
    try:
        team = serializer.validated_data.get("team") or JobViewSet._only_team(user)
    except serializers.ValidationError as error:
        return error.detail
    if not access.can_submit(user, team):
        return {}
    data = serializer.validated_data
    fields = actions.spec_defaults() | serializer.submit_fields()
    errors = actions.spec_errors(user, team, data["resource_class"], fields, array=array)
    if array:
        for field, messages in array_problems(data["size"], data["parallelism"]).items():
            errors.setdefault(field, []).extend(messages)
    return errors


#: ?pod= and ?rank= of the log endpoints: one of the job's own pods only (jobs.livelog.requested_pod).
LOG_POD_PARAMETERS = [
    OpenApiParameter("pod", str, description="One of the job's pods: an earlier attempt's, or a rank's."),
    OpenApiParameter("rank", int, description="A rank of a distributed job (0 to workers - 1): that rank's pod."),
]


#: The actions whose job is only answered: they read what the answer shows (jobs.api.serializers.answered).
ANSWER_ONLY_ACTIONS = ("list", "retrieve", "wait")


ERROR_RESPONSES = {
    400: OpenApiResponse(description="The request is invalid; the body names each field with what to change."),
    403: OpenApiResponse(description="Not signed in, a read-only token, or not allowed (the detail says which)."),
    404: OpenApiResponse(description="No such job among those you can see."),
}


class JobPages(BoundedLimitOffsetPagination):
    """The job list's pages, answered as DRF's LimitOffsetPagination answers them (``count``, ``next``,
    ``previous``, ``results``), with the page read first: a page shorter than the limit (one not empty, or the first
    one) already says how many jobs match, ``offset`` plus its rows, so the COUNT query is run only when it does
    not. A pipeline's lists (its queued or unfinished jobs) mostly fit in one page: a query less each, and its
    compile. The next and previous links are DRF's, from the same ``count``, ``limit`` and ``offset``."""

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        self.limit = self.get_limit(request)
        if self.limit is None:
            return None
        self.offset = self.get_offset(request)
        rows = list(queryset[self.offset : self.offset + self.limit])
        if len(rows) < self.limit and (rows or self.offset == 0):
            self.count = self.offset + len(rows)
        else:
            self.count = self.get_count(queryset)
            if self.count == 0 or self.offset > self.count:
                rows = []
        if self.count > self.limit and self.template is not None:
            self.display_page_controls = True
        return rows


@extend_schema_view(
    list=extend_schema(summary="List jobs", description="Jobs of your teams (admins: all), newest first."),
    retrieve=extend_schema(summary="One job, with why it waits"),
    create=extend_schema(
        summary="Submit a job",
        description="Queues a job against its team's quota. Send an `Idempotency-Key` header so a retried request "
        "returns the first job instead of a second one (200 instead of 201).",
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                OpenApiTypes.STR,
                OpenApiParameter.HEADER,
                description="Up to 100 characters, unique per request you mean (per user).",
            )
        ],
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="The job an earlier request with this key created."),
            400: ERROR_RESPONSES[400],
            403: ERROR_RESPONSES[403],
            422: OpenApiResponse(description="The Idempotency-Key was used before with a different request."),
        },
    ),
)
@extend_schema(tags=["jobs"])
class JobViewSet(JobStreamActions, mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Job.objects.none()  # for the schema; get_queryset() filters per user
    serializer_class = JobSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    #: What a token of scope "submit" may do here (accounts.permissions): its own work.
    submit_scope_actions = ("create", "cancel", "resubmit", "priority", "checkpoint")
    filterset_class = JobFilterSet
    pagination_class = JobPages
    ordering_fields = ["submitted_at", "state", "priority", "id"]

    def get_queryset(self):
        # Built once a request (a view instance is one request's): the long-poll reads its job through
        # get_object() and from the same queryset again while it waits; building it is about a millisecond.
        if getattr(self, "_jobs", None) is None:
            self._jobs = self._visible_jobs()
        return self._jobs

    def _visible_jobs(self):
        jobs = access.visible_jobs(self.request.user)
        if self.action in ANSWER_ONLY_ACTIONS:
            jobs = answered(jobs)
        else:  # the actions read more of the team (its namespace) and the class (its nodes' limits)
            jobs = jobs.select_related("team", "owner", "resource_class", "cluster")
        if self.action == "wait":
            # The id of the job's newest timeline event comes with the job, so a wait that answers at once needs
            # no second query (jobs.eventstream reads ``newest_event``).
            newest = JobEvent.objects.filter(job_id=OuterRef("pk")).order_by("-pk").values("pk")[:1]
            jobs = jobs.annotate(newest_event=Subquery(newest))
        return jobs

    def filter_queryset(self, queryset):
        # One job by id with no query string (a pipeline's poll): the list's filters have nothing to say, and
        # building the FilterSet costs about a millisecond.
        if self.action != "list" and not self.request.query_params:
            return queryset
        return super().filter_queryset(queryset)

    def list(self, request, *args, **kwargs):
        jobs = self.filter_queryset(self.get_queryset())
        page = self.paginate_queryset(jobs)
        if page is None:
            return Response(JOB_ANSWERS.many(jobs, request))
        return self.get_paginated_response(JOB_ANSWERS.many(page, request))

    def retrieve(self, request, *args, **kwargs):
        return Response(JOB_ANSWERS.one(self.answered_job(), request))

    def answered_job(self, *, newest_event: bool = False) -> Job:
        """The job of the URL for the detail and the long-poll, read in one fixed statement (jobs.api.answer_read:
        compiling the ORM's query was half of a detail's CPU); with ``newest_event``, its newest event's id too
        (``job.newest_event``). A query string (the list's filters apply to a detail asked with one) or an id
        that is no database id goes through ``get_object()``, so every answer, a 404's words too, stays the ORM's."""
        text = str(self.kwargs.get(self.lookup_url_kwarg or self.lookup_field, ""))
        if (self.action != "wait" and self.request.query_params) or not is_id(text):
            return self.get_object()
        job = answer_read.visible_job(self.request.user, int(text), newest_event=newest_event)
        if job is None:  # none, or not one the user may see: the words of get_object()'s 404
            raise Http404(f"No {Job._meta.object_name} matches the given query.")
        self.check_object_permissions(self.request, job)
        return job

    def finalize_response(self, request, response, *args, **kwargs):
        # An error answers JSON (application/json) even when the log's text or event stream was asked for.
        text = (PlainTextRenderer, EventStreamRenderer)
        if response.status_code >= 400 and isinstance(getattr(request, "accepted_renderer", None), text):
            request.accepted_renderer, request.accepted_media_type = JSONRenderer(), JSONRenderer.media_type
        return super().finalize_response(request, response, *args, **kwargs)

    def create(self, request, *args, **kwargs):
        key = request.headers.get("Idempotency-Key", "")
        if len(key) > 100:
            raise serializers.ValidationError({"Idempotency-Key": ["At most 100 characters."]})
        with roles_remembered():  # the team's name, the right to submit and the priority: one read of the role
            data = request.data
            if isinstance(data, dict) and "template" in data:
                data = self.from_template(request.user, data)
            valid = JOB_REQUESTS.validated(data, self.get_serializer_context())
            if valid is None:  # a problem: a serializer of this request's own says every one
                serializer = self.get_serializer(data=data)
                if not serializer.is_valid():
                    check = functools.partial(spec_problems, request.user)
                    raise serializers.ValidationError(every_problem(serializer, "A job", check))
                valid = serializer.validated_data
            team = valid.get("team") or self._only_team(request.user)
            try:
                submission = actions.submit_job(request.user, team, valid["resource_class"], submit_fields(valid), key)
            except SERVICE_ERRORS as error:
                raise_for(error)
        data = JOB_ANSWERS.one(submission.job, request)
        return Response(data, status=status.HTTP_201_CREATED if submission.created else status.HTTP_200_OK)

    @staticmethod
    def from_template(user, data: dict) -> dict:
        """The request's fields on top of the spec of the job template it names (``template``: NAME or
        NAME@VERSION, of the team it names, else of the user's teams); the whole is then checked as any
        submission. A notebook's or a service's template is refused."""
        try:
            return workload_templates.merged(user, data, TemplateKind.JOB)
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None

    @staticmethod
    def _only_team(user) -> Team:
        teams = list(Team.objects.filter(memberships__user=user))
        if len(teams) != 1:
            names = ", ".join(t.slug for t in teams) or "none"
            raise serializers.ValidationError({"team": [f"Say which team the job is for (you belong to: {names})."]})
        return teams[0]

    @extend_schema(
        summary="Cancel a job",
        description="Owner, team lead or admin. A queued job leaves the queue; a running one is stopped. A lead or "
        "admin cancelling someone else's job says why (``reason``); the owner is told (bell, e-mail, webhooks).",
        request=StopReasonSerializer,
        responses={200: JobSerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object()
        body = StopReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = actions.cancel_job(request.user, job, body.validated_data["reason"])
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(JOB_ANSWERS.one(job, request))

    @extend_schema(
        summary="Submit the request again as a new job, with changes",
        description="For an ended job. The body may override any field a new job takes (preemptible, count, "
        "priority, image, command, env, labels, volumes, shm_mb, secret_env, secret_files, architecture, …); "
        "the result is checked exactly like a new job, and the fields left out keep the job's values. An empty "
        "body resubmits it unchanged. Repeating the same request "
        "returns the same new job (200) instead of making another.",
        request=JobSerializer(partial=True),
        responses={
            201: JobSerializer,
            200: OpenApiResponse(JobSerializer, description="The job an earlier resubmission made."),
            **ERROR_RESPONSES,
        },
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def resubmit(self, request, pk=None):
        job = self.get_object()
        earlier = set(Job.objects.filter(resubmitted_from=job).values_list("pk", flat=True))
        overrides = request.data if hasattr(request.data, "keys") else None
        if overrides is None:
            raise serializers.ValidationError({"detail": "Send an object of the fields to change, or nothing."})
        changes, resource_class = None, None
        if overrides:
            if "team" in overrides and overrides["team"] != job.team.slug:
                raise serializers.ValidationError({"team": ["A resubmission stays in the job's team."]})
            checked = self.get_serializer(data=self.get_serializer().resubmit_data(job, overrides))
            checked.is_valid(raise_exception=True)
            changes, resource_class = checked.submit_fields(), checked.validated_data["resource_class"]
        try:
            new = actions.resubmit_job(request.user, job, changes, resource_class)
        except SERVICE_ERRORS as error:
            raise_for(error)
        created = new.pk not in earlier
        return Response(
            JOB_ANSWERS.one(new, request), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK
        )

    @extend_schema(
        summary="Change a queued job's priority",
        description="Owner, team lead or admin, up to the priority their role allows (members: the portal's "
        "member limit). Audited; the next admission cycle orders the queue by it.",
        request=PrioritySerializer,
        responses={200: JobSerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"], filterset_class=None)
    def priority(self, request, pk=None):
        job = self.get_object()
        try:
            actions.require_manage(request.user, job, "change its priority")
        except SERVICE_ERRORS as error:
            raise_for(error)
        body = PrioritySerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = actions.change_priority(request.user, job, body.validated_data["priority"])
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(JOB_ANSWERS.one(job, request))

    @extend_schema(
        summary="Report a checkpoint",
        description="Called from inside a running job (with its owner's token, or a lead's) once it has written a "
        "checkpoint: stored as the job's last_checkpoint_at, written on its timeline, and read by preemption (the "
        "job that loses least since its last checkpoint is stopped first) and by the next attempt "
        "(PORTAL_LAST_CHECKPOINT).",
        request=CheckpointReportSerializer,
        responses={200: JobSerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"], filterset_class=None, authentication_classes=CHECKPOINT_AUTHENTICATION)
    def checkpoint(self, request, pk=None):
        job = self.get_object()
        body = CheckpointReportSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            job = checkpoints.report_checkpoint(request.user, job, body.validated_data["at"], credential=request.auth)
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(JOB_ANSWERS.one(job, request))

    @extend_schema(summary="The job's timeline", responses=JobEventSerializer(many=True))
    @action(detail=True, methods=["get"], pagination_class=None, filterset_class=None)
    def events(self, request, pk=None):
        job = self.get_object()
        return Response(JobEventSerializer(job.events.all(), many=True).data)

    @extend_schema(
        summary="The tail of the job's log",
        description=(
            "The pod's log while it exists; once the container ended, the log the portal kept (``kept`` true; "
            "``cut_bytes`` says how many bytes from its start were cut by the size cap)."
        ),
        parameters=[
            OpenApiParameter("tail", int, description="Lines from the end, 1 to 5000 (default 200)."),
            *LOG_POD_PARAMETERS,
        ],
        responses={
            200: inline_serializer(
                "JobLog",
                {
                    "pod": serializers.CharField(),
                    "log": serializers.CharField(),
                    "kept": serializers.BooleanField(),
                    "cut_bytes": serializers.IntegerField(),
                    "note": serializers.CharField(),
                },
            ),
            400: OpenApiResponse(description="tail is not a whole number from 1 to 5000."),
            404: OpenApiResponse(description="No such job, or it has no pod and no kept log; the detail says why."),
            503: OpenApiResponse(
                description="The cluster did not give the log now (container not started, or "
                "the API server unreachable); the detail says which."
            ),
        },
    )
    @action(detail=True, methods=["get"], filterset_class=None)
    def logs(self, request, pk=None):
        job = self.get_object()
        tail = _tail(request, default=200)
        asked = _asked_pod(job, request)
        kept = list(job.logs.all())
        if asked:
            chosen = next((entry for entry in kept if entry.pod_name == asked), None)
            if chosen is None and asked != job.pod_name and asked not in ranks.rank_pods(job):
                raise exceptions.NotFound(f"Job #{job.pk} has no log of a pod called {asked}.")
            view, pod = logkeeping.LogView(kept=chosen, live=chosen is None), asked
        else:
            view = logkeeping.log_view(job, kept)
            pod = job.pod_name
        if view.kept is not None:
            text = "".join(line + "\n" for line in view.kept.text.splitlines()[-tail:])
            return Response({"pod": view.kept.pod_name, "log": text, "kept": True,
                             "cut_bytes": view.kept.cut_bytes, "note": view.kept.note})  # fmt: skip
        if not pod:
            if job.state in ACTIVE_STATES or job.state == "queued":
                raise exceptions.NotFound(f"Job #{job.pk} has no pod yet ({job.get_state_display().lower()}).")
            raise exceptions.NotFound(view.note)
        try:
            text = backend_of_id(job.cluster_id).pod_logs(job.team.namespace, pod, tail_lines=tail)
        except NotFound:
            raise exceptions.NotFound(f"The pod {pod} is gone from the cluster and its log was not kept.") from None
        except ClusterError as error:
            raise LogUnavailable(f"No log from pod {pod} now: {error}") from None
        return Response({"pod": pod, "log": text, "kept": False, "cut_bytes": 0, "note": ""})

    @extend_schema(
        summary="Download the job's whole log",
        description=(
            "A text/plain attachment: the kept log (a first line starting with # says what the size cap cut), or "
            "the running pod's whole log read from the cluster. ``pod`` picks the kept log of an earlier attempt, "
            "``pod`` or ``rank`` a rank of a distributed job."
        ),
        parameters=LOG_POD_PARAMETERS,
        responses={
            (200, "text/plain"): OpenApiTypes.STR,
            404: OpenApiResponse(description="No such job or pod, or no log to give; the detail says why."),
        },
    )
    @action(detail=True, methods=["get"], url_path="logs/download", filterset_class=None,
            renderer_classes=[JSONRenderer, PlainTextRenderer])  # fmt: skip
    def logs_download(self, request, pk=None):
        job = self.get_object()
        try:
            return livelog.download(job, _asked_pod(job, request))
        except Http404 as error:
            raise exceptions.NotFound(str(error)) from None

    @extend_schema(
        summary="Follow the job's log live (server-sent events)",
        description=(
            "text/event-stream: the last ``tail`` lines, then each new line while the container runs; each "
            "event's id is the line's number. A stream lasts at most PORTAL_LOG_FOLLOW_SECONDS; reconnect with "
            "the Last-Event-ID header (EventSource does) or ``from`` to go on. Events named ``waiting`` (no log "
            "yet, retry) and ``end`` (no more will come: the container ended) carry a sentence."
        ),
        parameters=[
            OpenApiParameter("tail", int, description="Lines from the end to start with, 0 to 5000 (default 200)."),
            OpenApiParameter("from", int, description="Go on after this line number (as Last-Event-ID)."),
            *LOG_POD_PARAMETERS,
        ],
        responses={
            # One server-sent event (the stream is a sequence of them): a line, or "waiting"/"end" in words.
            (200, "text/event-stream"): {
                "type": "object",
                "properties": {
                    "event": {"type": "string", "description": "message (a log line), waiting or end"},
                    "data": {"type": "string"},
                    "id": {"type": "string", "description": "The line's number (send it back as Last-Event-ID)."},
                    "retry": {"type": "integer"},
                },
            },
            404: OpenApiResponse(description="No such job, or it has no pod and no kept log; the detail says why."),
            429: stream_cap.TOO_MANY,
        },
    )
    @action(detail=True, methods=["get"], url_path="logs/stream", filterset_class=None,
            renderer_classes=[JSONRenderer, EventStreamRenderer])  # fmt: skip
    @stream_cap.capped(stream_cap.log_follow_seconds)
    def logs_stream(self, request, pk=None):
        job = self.get_object()
        tail = _tail(request, default=200, low=0)
        last = request.headers.get("Last-Event-ID") or request.query_params.get("from")
        line = whole_number(str(last)) if last is not None else None
        if last is not None and line is None:
            raise serializers.ValidationError({"from": ["A line number: a whole number from 0, in ASCII digits."]})
        try:
            pod = _asked_pod(job, request)
            return livelog.follow(job, tail=tail, last_id=line, pod=pod)
        except Http404 as error:
            raise exceptions.NotFound(str(error)) from None


def _asked_pod(job, request) -> str | None:
    """The pod ?pod= or ?rank= names (None: the default log); 404 in words for a rank without a pod."""
    try:
        return livelog.requested_pod(job, request.query_params)
    except Http404 as error:
        raise exceptions.NotFound(str(error)) from None


def _tail(request, *, default: int, low: int = 1) -> int:
    try:
        tail = int(request.query_params.get("tail", default))
    except ValueError:
        tail = -1
    if not low <= tail <= 5000:
        raise serializers.ValidationError({"tail": [f"A whole number from {low} to 5000."]})
    return tail


@extend_schema_view(
    list=extend_schema(summary="List job arrays", description="Arrays of your teams (admins: all), newest first."),
    retrieve=extend_schema(summary="One job array, with its tasks' summary"),
    create=extend_schema(
        summary="Submit a job array",
        description="A job's fields plus `size` (tasks) and `parallelism` (most admitted at once). Every task is a "
        "job of its own, checked and counted against quota like one; it sees its index in PORTAL_ARRAY_INDEX. "
        "Send an `Idempotency-Key` header so a retried request returns the first array (200).",
        request=JobArrayCreateSerializer,
        responses={
            201: JobArraySerializer,
            200: OpenApiResponse(JobArraySerializer, description="The array an earlier request with this key made."),
            400: ERROR_RESPONSES[400],
            403: ERROR_RESPONSES[403],
            422: OpenApiResponse(description="The Idempotency-Key was used before with a different request."),
        },
    ),
)
@extend_schema(tags=["jobs"])
class JobArrayViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = JobArray.objects.none()
    serializer_class = JobArraySerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    submit_scope_actions = ("create", "cancel")
    filterset_class = JobArrayFilterSet
    ordering_fields = ["created", "id"]

    def get_queryset(self):
        return access.visible_arrays(self.request.user).select_related("team", "owner").distinct()

    def create(self, request, *args, **kwargs):
        key = request.headers.get("Idempotency-Key", "")
        if len(key) > 100:
            raise serializers.ValidationError({"Idempotency-Key": ["At most 100 characters."]})
        data = request.data
        if isinstance(data, dict) and "template" in data:
            data = JobViewSet.from_template(request.user, data)
        body = JobArrayCreateSerializer(data=data, context=self.get_serializer_context())
        if not body.is_valid():
            check = functools.partial(spec_problems, request.user, array=True)
            raise serializers.ValidationError(every_problem(body, "A job", check))
        data = body.validated_data
        team = data.get("team") or JobViewSet._only_team(request.user)
        try:
            submission = actions.submit_array(
                request.user, team, data["resource_class"], body.submit_fields(), data["size"], data["parallelism"], key
            )
        except SERVICE_ERRORS as error:
            raise_for(error)
        code = status.HTTP_201_CREATED if submission.created else status.HTTP_200_OK
        return Response(self.get_serializer(submission.array).data, status=code)

    @extend_schema(
        summary="Cancel every task of a job array",
        description="Owner, team lead or admin. Tasks that have not ended are cancelled; one audit record.",
        request=None,
        responses={200: JobArraySerializer, **ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        array = self.get_object()
        try:
            actions.cancel_array(request.user, array)
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(self.get_serializer(array).data)
