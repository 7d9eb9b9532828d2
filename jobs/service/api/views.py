"""/api/v1/services/: inference services. Thin: each endpoint checks the request's shape, calls jobs.service.ops
(which checks who may act — the owner, a lead of the team or an admin — validates everything at once and audits)
and answers the service. Other teams' services answer 404, as if they did not exist."""

from __future__ import annotations

import functools

from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from accounts.permissions import IsAuthenticatedWithTokenScope
from core.api.strict_body import every_problem
from jobs import access, workload_templates
from jobs.api.views import ERROR_RESPONSES, SERVICE_ERRORS, JobViewSet, raise_for
from jobs.choices import ServiceState, TemplateKind
from jobs.models.service import InferenceService
from jobs.service import ops as service_ops
from jobs.service.api.serializers import (
    ScaleSerializer,
    ServiceCreateSerializer,
    ServiceSerializer,
    ServiceUpdateSerializer,
)


def create_problems(user, body: ServiceCreateSerializer) -> dict[str, list[str]]:
    """What jobs.service.ops.create_service would refuse in a request whose fields read well
    (strict.every_problem)."""
    try:
        team = body.validated_data.get("team") or JobViewSet._only_team(user)
    except serializers.ValidationError as error:
        return error.detail
    if not access.can_submit(user, team):
        return {}
    return service_ops.create_problems(
        user, team, body.validated_data["resource_class"], body.spec(), body.service_fields()
    )


SERVICE_ERROR_RESPONSES = {
    **ERROR_RESPONSES,
    404: OpenApiResponse(description="No such service among those you can see."),
}


@extend_schema_view(
    list=extend_schema(
        summary="List services",
        description="Live services of your teams (admins: all), newest first; ``?state=stopped`` lists stopped ones.",
    ),
    retrieve=extend_schema(
        summary="One service: spec, state, address, health, rollout progress, granted and borrowed replicas, pods",
        responses={200: ServiceSerializer, 404: SERVICE_ERROR_RESPONSES[404]},
    ),
    create=extend_schema(
        summary="Start a service",
        description="The replica spec (as a job's) and the service's port, probes, replica bounds and metric. The "
        "minimum replicas are queued against the team's quota like a job; the autoscaler may go up to the maximum, "
        "each replica above the minimum granted only when quota and a node allow. With ``template`` (a service "
        "template of the team's) its spec is the start and the fields given change it. A 400 names every problem.",
        request=ServiceCreateSerializer,
        responses={201: ServiceSerializer, 400: ERROR_RESPONSES[400], 403: ERROR_RESPONSES[403]},
    ),
    partial_update=extend_schema(
        summary="Change a service",
        description="Image, command, args, env, secrets, volumes, CPU, memory, port or probes roll out a new "
        "revision replica by replica (the old spec is kept for rollback); replica bounds and the metric change "
        "the autoscaler only. The class, GPUs per replica and name cannot change: stop and start anew.",
        request=ServiceUpdateSerializer,
        responses={200: ServiceSerializer, **SERVICE_ERROR_RESPONSES},
    ),
    destroy=extend_schema(
        summary="Stop a service",
        description="Deletes its Deployment, Service and autoscaler; the record stays (state stopped). A lead or "
        "admin stopping someone else's service says why: ``reason`` in the query string (or a JSON body); the "
        "owner is told.",
        parameters=[OpenApiParameter("reason", str, description="Why (required for someone else's service).")],
        responses={204: None, **SERVICE_ERROR_RESPONSES},
    ),
)
@extend_schema(tags=["services"])
class ServiceViewSet(
    mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet
):
    queryset = InferenceService.objects.none()
    serializer_class = ServiceSerializer
    permission_classes = [IsAuthenticatedWithTokenScope]
    #: What a token of scope "submit" may do here (accounts.permissions): run its own services.
    submit_scope_actions = ("create", "partial_update", "destroy", "scale", "pause", "resume", "rollback")
    filterset_class = None
    extra_query_params = ("state",)  # ?state=stopped: the stopped services instead of the live ones
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self):
        services = access.visible_to(InferenceService.objects.all(), self.request.user).select_related(
            "team", "owner", "job", "job__resource_class", "job__cluster"
        )
        if self.action == "list":
            stopped = self.request.query_params.get("state") == ServiceState.STOPPED
            services = services.filter(state=ServiceState.STOPPED) if stopped else services.exclude(
                state=ServiceState.STOPPED)  # fmt: skip
        return services.distinct()

    def get_object(self):
        service = get_object_or_404(self.get_queryset(), pk=self.kwargs["pk"])
        self.check_object_permissions(self.request, service)
        return service

    def get_serializer_context(self):
        return super().get_serializer_context() | {"with_utilisation": self.action != "list"}

    def _answer(self, service, code=status.HTTP_200_OK):
        service = self.get_queryset().get(pk=service.pk)
        return Response(self.get_serializer(service).data, status=code)

    def create(self, request, *args, **kwargs):
        data = request.data
        if isinstance(data, dict) and "template" in data:
            try:
                data = workload_templates.merged(request.user, data, TemplateKind.SERVICE)
            except DjangoValidationError as error:
                raise serializers.ValidationError(error.message_dict) from None
        body = ServiceCreateSerializer(data=data, context=self.get_serializer_context())
        if not body.is_valid():
            check = functools.partial(create_problems, request.user)
            raise serializers.ValidationError(every_problem(body, "A service", check))
        team = body.validated_data.get("team") or JobViewSet._only_team(request.user)
        try:
            service = service_ops.create_service(
                request.user, team, body.validated_data["resource_class"], body.spec(), body.service_fields()
            )
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._answer(service, status.HTTP_201_CREATED)

    def partial_update(self, request, *args, **kwargs):
        service = self.get_object()
        body = ServiceUpdateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            service = service_ops.update_service(request.user, service, body.changes())
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._answer(service)

    def destroy(self, request, *args, **kwargs):
        service = self.get_object()
        try:
            service_ops.stop_service(request.user, service, _reason(request))
        except SERVICE_ERRORS as error:
            raise_for(error)
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Set a service's replica bounds",
        description="The autoscaler's minimum and maximum (no rollout). Above the minimum, replicas still come "
        "only as quota and nodes allow.",
        request=ScaleSerializer,
        responses={200: ServiceSerializer, **SERVICE_ERROR_RESPONSES},
    )
    @action(detail=True, methods=["post"])
    def scale(self, request, pk=None):
        service = self.get_object()
        try:
            service_ops.may_manage(request.user, service)
        except SERVICE_ERRORS as error:
            raise_for(error)
        body = ScaleSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            service = service_ops.scale_service(
                request.user, service, body.validated_data["min_replicas"], body.validated_data["max_replicas"]
            )
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._answer(service)

    def _act(self, operation):
        service = self.get_object()
        try:
            service = operation(self.request.user, service)
        except SERVICE_ERRORS as error:
            raise_for(error)
        return self._answer(service)

    @extend_schema(summary="Pause rollouts (replicas keep serving)", request=None,
                   responses={200: ServiceSerializer, **SERVICE_ERROR_RESPONSES})  # fmt: skip
    @action(detail=True, methods=["post"])
    def pause(self, request, pk=None):
        return self._act(service_ops.pause_service)

    @extend_schema(summary="Resume rollouts", request=None,
                   responses={200: ServiceSerializer, **SERVICE_ERROR_RESPONSES})  # fmt: skip
    @action(detail=True, methods=["post"])
    def resume(self, request, pk=None):
        return self._act(service_ops.resume_service)

    @extend_schema(summary="Roll back to the previous spec", request=None,
                   responses={200: ServiceSerializer, **SERVICE_ERROR_RESPONSES})  # fmt: skip
    @action(detail=True, methods=["post"])
    def rollback(self, request, pk=None):
        return self._act(service_ops.rollback_service)


def _reason(request) -> str:
    """A DELETE's reason: ``?reason=`` (clients that send no body on DELETE), else the JSON body's."""
    reason = request.query_params.get("reason")
    if reason is None and hasattr(request.data, "get"):
        reason = request.data.get("reason")
    reason = reason or ""
    if not isinstance(reason, str):
        raise serializers.ValidationError({"reason": ["A sentence saying why."]})
    return reason
