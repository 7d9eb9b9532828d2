from django.db import transaction
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from .. import audit
from ..choices import AuditAction
from ..models import APIToken, Notification
from .serializers import APITokenSerializer, IssuedTokenSerializer, MeSerializer, NotificationSerializer


class MeView(APIView):
    @extend_schema(responses=MeSerializer, summary="Who am I: user, admin flag and team memberships")
    def get(self, request):
        return Response(MeSerializer(request.user).data)


class APITokenViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Your own API tokens. Creating one returns its secret once; deleting revokes it (the row stays)."""

    serializer_class = APITokenSerializer
    queryset = APIToken.objects.none()  # for the schema; get_queryset() filters per user

    def get_queryset(self):
        return APIToken.objects.filter(user=self.request.user)

    @extend_schema(request=APITokenSerializer, responses={201: IssuedTokenSerializer}, summary="Issue a token")
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        with transaction.atomic():
            token, raw = APIToken.issue(request.user, data["name"], data.get("days"), data.get("read_only", False))
            audit.record(
                request.user, AuditAction.TOKEN_ISSUE, token, after={"name": token.name, "read_only": token.read_only}
            )
        out = IssuedTokenSerializer(token).data
        out["token"] = raw
        return Response(out, status=status.HTTP_201_CREATED)

    @extend_schema(summary="Revoke a token")
    def destroy(self, request, *args, **kwargs):
        token = self.get_object()
        if token.revoked_at is None:
            with transaction.atomic():
                token.revoked_at = timezone.now()
                token.save(update_fields=["revoked_at"])
                audit.record(request.user, AuditAction.TOKEN_REVOKE, token, before={"revoked_at": None})
        return Response(status=status.HTTP_204_NO_CONTENT)


class NotificationViewSet(viewsets.ReadOnlyModelViewSet):
    """Your in-app notifications, newest first (``?unread=true`` for unread ones only)."""

    serializer_class = NotificationSerializer
    queryset = Notification.objects.none()  # for the schema
    extra_query_params = ("unread",)

    def get_queryset(self):
        qs = Notification.objects.filter(user=self.request.user)
        if self.request.query_params.get("unread") in ("1", "true", "yes"):
            qs = qs.unread()
        return qs

    @extend_schema(request=None, responses=NotificationSerializer, summary="Mark one notification read")
    @action(detail=True, methods=["post"])
    def read(self, request, pk=None):
        item = self.get_object()
        if item.read_at is None:
            item.read_at = timezone.now()
            item.save(update_fields=["read_at"])
        return Response(NotificationSerializer(item, context={"request": request}).data)
