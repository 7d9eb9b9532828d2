"""/api/v1/notebooks/: launch, read, stop, start again and extend notebooks (jobs.notebook.sessions does each)."""

import functools

from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import (
    OpenApiResponse,
    extend_schema,
    extend_schema_view,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from accounts.permissions import IsAuthenticatedWithTokenScope
from cluster import get_backend
from core.api.strict_body import every_problem
from jobs import access, workload_templates
from jobs.api.serializers import (
    StopReasonSerializer,
)
from jobs.api.views import ERROR_RESPONSES, SERVICE_ERRORS, JobViewSet, raise_for
from jobs.choices import TemplateKind
from jobs.filtersets import (
    NotebookFilterSet,
)
from jobs.models import Notebook
from jobs.notebook import sessions as notebooks
from jobs.notebook import workspace
from jobs.notebook.api.serializers import NotebookExtendSerializer, NotebookSerializer


def _launch_fields(data: dict) -> dict:
    """The validated request as jobs.notebook.sessions.launch_notebook takes it."""
    return {
        "name": data["name"], "workspace": data.get("workspace"), "image": data.get("image"), "count": data["count"],
        "cpu_millicores": data["cpu_millicores"], "memory_mb": data["memory_mb"],
        "volume_gib": data.get("volume_gib"), "ttl_seconds": data.get("ttl_seconds"),
        "idle_timeout_seconds": data.get("idle_timeout_seconds"), "env": data.get("env") or [],
        "volumes": data.get("volumes") or [], "clusters": data.get("clusters") or [],
    }  # fmt: skip


def launch_problems(user, serializer: NotebookSerializer) -> dict[str, list[str]]:
    """What launch_notebook would refuse in a request whose fields read well (strict.every_problem)."""
    data = serializer.validated_data
    try:
        team = data.get("team") or JobViewSet._only_team(user)
    except serializers.ValidationError as error:
        return error.detail
    if not access.can_submit(user, team):
        return {}
    return notebooks.launch_problems(user, team, data["resource_class"], _launch_fields(data))


NOTEBOOK_ERRORS = {**ERROR_RESPONSES, 404: OpenApiResponse(description="No such notebook among those you can see.")}


@extend_schema_view(
    list=extend_schema(summary="List notebooks", description="Notebooks of your teams (admins: all)."),
    retrieve=extend_schema(summary="One notebook, with its address and the time left under each limit"),
    create=extend_schema(
        summary="Launch a notebook",
        description="Creates the notebook and its first session (queued against the team's quota). The answer "
        "carries `token` once; the portal keeps only its hash. With ``template`` (a notebook template of the team's) "
        "its spec is the start and the fields given change it.",
        responses={201: NotebookSerializer, 400: ERROR_RESPONSES[400], 403: ERROR_RESPONSES[403]},
    ),
)
@extend_schema(tags=["notebooks"])
class NotebookViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    queryset = Notebook.objects.none()
    serializer_class = NotebookSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    submit_scope_actions = ("create", "start", "stop", "extend", "token")
    filterset_class = NotebookFilterSet
    ordering_fields = ["created", "id", "name"]

    def get_queryset(self):
        return (
            access.visible_notebooks(self.request.user)
            .select_related("team", "owner", "resource_class", "session", "cluster")
            .distinct()
        )

    def _with_token(self, session, code):
        data = dict(self.get_serializer(session.notebook).data)
        # Only the owner ever sees the token: it opens their Jupyter server and home volume (audit finding 2). With
        # "portal" access it opens nothing (the owner opens the notebook from its page), so it is not sent.
        if session.notebook.owner_id == self.request.user.pk and not workspace.portal_access():
            data["token"] = session.token
        return Response(data, status=code)

    def create(self, request, *args, **kwargs):
        data = request.data
        if isinstance(data, dict) and "template" in data:
            try:
                data = workload_templates.merged(request.user, data, TemplateKind.NOTEBOOK)
            except DjangoValidationError as error:
                raise serializers.ValidationError(error.message_dict) from None
        serializer = self.get_serializer(data=data)
        if not serializer.is_valid():
            check = functools.partial(launch_problems, request.user)
            raise serializers.ValidationError(every_problem(serializer, "A notebook", check))
        data = serializer.validated_data
        team = data.get("team") or JobViewSet._only_team(request.user)
        try:
            session = notebooks.launch_notebook(request.user, team, data["resource_class"], _launch_fields(data))
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._with_token(session, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Extend a notebook's maximum age",
        description="Owner, team lead or admin. Adds `seconds` (default: the operator's extension) up to the team's "
        "maximum age counted from the session's start; counts as activity for the idle limit.",
        request=NotebookExtendSerializer,
        responses={200: NotebookSerializer, **NOTEBOOK_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def extend(self, request, pk=None):
        notebook = self.get_object()
        body = NotebookExtendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            notebook = notebooks.extend_notebook(request.user, notebook, body.validated_data.get("seconds"))
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(self.get_serializer(self.get_queryset().get(pk=notebook.pk)).data)

    @extend_schema(
        summary="Stop a notebook",
        description="Owner, team lead or admin. Deletes the server's workload, frees the quota, keeps the volume. "
        "A lead or admin stopping someone else's notebook says why (``reason``); the owner is told.",
        request=StopReasonSerializer,
        responses={200: NotebookSerializer, **NOTEBOOK_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def stop(self, request, pk=None):
        notebook = self.get_object()
        body = StopReasonSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            notebooks.stop_by_person(request.user, notebook, body.validated_data["reason"], get_backend())
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(self.get_serializer(self.get_queryset().get(pk=notebook.pk)).data)

    @extend_schema(
        summary="Start a stopped notebook again",
        description="Owner, team lead or admin. A new session on the same home volume; the answer carries the new "
        "`token`, once, only when the owner starts it (a lead or admin never receives a member's token: the owner "
        "collects it once with POST /api/v1/notebooks/{id}/token/).",
        request=None,
        responses={201: NotebookSerializer, **NOTEBOOK_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def start(self, request, pk=None):
        notebook = self.get_object()
        try:
            session = notebooks.start_notebook(request.user, notebook)
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._with_token(session, status.HTTP_201_CREATED)

    @extend_schema(
        summary="Collect the access token of a session someone else started (the owner, once)",
        description="After a lead or admin starts a member's notebook again, its new token waits for the owner: this "
        "answers the notebook with `token`, once. Anyone else gets 403; with no token waiting (already collected, the "
        "notebook stopped, or the owner started it), 400 says to stop and start the notebook for a new one.",
        request=None,
        responses={200: NotebookSerializer, **NOTEBOOK_ERRORS},
    )
    @action(detail=True, methods=["post"])
    def token(self, request, pk=None):
        notebook = self.get_object()
        try:
            token = notebooks.collect_token(request.user, notebook)
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._with_token(notebooks.Session(notebook, token), status.HTTP_200_OK)
