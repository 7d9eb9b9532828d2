"""/api/v1/webhooks/: a team's webhooks, for its leads and admins (members see none: a URL may be a credential).

Thin: every change goes through accounts.webhook_ops, which checks who may, validates and audits."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import exceptions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from core.models import Delivery, Webhook

from .. import webhook_ops
from ..models import Team
from .webhook_serializers import (
    DeliverySerializer,
    WebhookCreateSerializer,
    WebhookSecretSerializer,
    WebhookSerializer,
)


def _call(function, *args):
    """A webhook_ops call with its errors as the API's: 403 with the sentence, 400 with every field's problems."""
    try:
        return function(*args)
    except DjangoPermissionDenied as error:
        raise exceptions.PermissionDenied(str(error)) from None
    except DjangoValidationError as error:
        detail = error.message_dict if hasattr(error, "error_dict") else {"detail": error.messages}
        raise serializers.ValidationError(detail) from None


@extend_schema_view(
    list=extend_schema(summary="List your teams' webhooks"),
    retrieve=extend_schema(summary="One webhook"),
    destroy=extend_schema(summary="Delete a webhook"),
)
@extend_schema(tags=["webhooks"])
class WebhookViewSet(viewsets.ModelViewSet):
    """Your teams' webhooks (as a lead, or all as an admin). Creating one or rotating its secret returns the
    signing secret once."""

    serializer_class = WebhookSerializer
    queryset = Webhook.objects.none()  # for the schema; get_queryset() filters per user
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    filterset_fields = ["active"]

    def get_queryset(self):
        return webhook_ops.visible_webhooks(self.request.user).order_by("id")

    @extend_schema(
        request=WebhookCreateSerializer, responses={201: WebhookSecretSerializer}, summary="Create a webhook"
    )
    def create(self, request, *args, **kwargs):
        serializer = WebhookCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        team = Team.objects.filter(slug=data.pop("team")).first()
        if team is None or not webhook_ops.manages(request.user, team):
            raise serializers.ValidationError({"team": ["Give the slug of a team you lead."]})
        webhook, secret = _call(webhook_ops.create, request.user, team, data)
        out = WebhookSecretSerializer(webhook).data
        out["secret"] = secret
        return Response(out, status=status.HTTP_201_CREATED)

    @extend_schema(request=WebhookSerializer, responses=WebhookSerializer, summary="Change a webhook")
    def partial_update(self, request, *args, **kwargs):
        webhook = self.get_object()
        serializer = WebhookSerializer(webhook, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        _call(webhook_ops.update, request.user, webhook, dict(serializer.validated_data))
        return Response(WebhookSerializer(webhook).data)

    def update(self, request, *args, **kwargs):
        raise exceptions.MethodNotAllowed("PUT", "Change a webhook with PATCH.")

    def perform_destroy(self, instance):
        _call(webhook_ops.delete, self.request.user, instance)

    @extend_schema(request=None, responses=WebhookSecretSerializer, summary="Rotate the signing secret")
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, pk=None):
        webhook = self.get_object()
        secret = _call(webhook_ops.rotate, request.user, webhook)
        out = WebhookSecretSerializer(webhook).data
        out["secret"] = secret
        return Response(out)

    @extend_schema(request=None, responses={202: DeliverySerializer}, summary="Send a test ping")
    @action(detail=True, methods=["post"])
    def ping(self, request, pk=None):
        delivery = _call(webhook_ops.ping, request.user, self.get_object())
        return Response(DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses=DeliverySerializer(many=True), summary="Delivery log, newest first")
    @action(detail=True, methods=["get"])
    def deliveries(self, request, pk=None):
        webhook = self.get_object()
        page = self.paginate_queryset(webhook.deliveries.order_by("-id"))
        return self.get_paginated_response(DeliverySerializer(page, many=True).data)

    # A path converter, as the API router (core.api.routers.IdRouter) uses: an ASCII id, an integer in the schema.
    @extend_schema(request=None, responses={202: DeliverySerializer}, summary="Send a delivery again")
    @action(detail=True, methods=["post"], url_path="deliveries/<int:delivery_id>/redeliver")
    def redeliver(self, request, pk=None, delivery_id=None):
        webhook = self.get_object()
        delivery = get_object_or_404(Delivery, pk=delivery_id, webhook=webhook)
        again = _call(webhook_ops.redeliver, request.user, delivery)
        return Response(DeliverySerializer(again).data, status=status.HTTP_202_ACCEPTED)
