from django.conf import settings
from django.shortcuts import get_object_or_404
from django.urls import reverse
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import exceptions, mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from core.models import Notification
from core.throttles import DevicePollThrottle, DeviceStartThrottle, TokenCreateThrottle

from .. import device_login, service_accounts, tokens
from ..models import APIToken, ServiceAccount
from .serializers import (
    APITokenSerializer,
    DeviceCodeSerializer,
    DevicePollSerializer,
    DeviceStartSerializer,
    IssuedTokenSerializer,
    MeSerializer,
    NotificationSerializer,
    RotateSerializer,
    ServiceAccountSerializer,
)


@extend_schema(tags=["auth"])
class MeView(APIView):
    @extend_schema(responses=MeSerializer, summary="Who am I: user, admin flag and team memberships")
    def get(self, request):
        return Response(MeSerializer(request.user).data)


def _refusal(error: Exception):
    """A domain refusal as the API's 400 (every problem by field) or 403."""
    if isinstance(error, PermissionError):
        return exceptions.PermissionDenied(str(error))
    return serializers.ValidationError(error.problems)


@extend_schema_view(
    list=extend_schema(summary="List your API tokens"),
    retrieve=extend_schema(summary="One of your API tokens"),
)
@extend_schema(tags=["tokens"])
class APITokenViewSet(mixins.CreateModelMixin, mixins.DestroyModelMixin, viewsets.ReadOnlyModelViewSet):
    """Your own API tokens. Creating one returns its secret once; deleting revokes it (the row stays)."""

    serializer_class = APITokenSerializer
    queryset = APIToken.objects.none()  # for the schema; get_queryset() filters per user

    def get_queryset(self):
        return APIToken.objects.filter(user=self.request.user).select_related("user")

    def get_throttles(self):
        if self.action in ("create", "rotate"):
            return [TokenCreateThrottle()]
        return super().get_throttles()

    @extend_schema(request=APITokenSerializer, responses={201: IssuedTokenSerializer}, summary="Issue a token")
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        try:
            issued = tokens.issue(
                request.user, request.user, data["name"], data["scope"], data.get("days"), maker=request.auth
            )
        except tokens.TokenLimitError as error:
            raise _refusal(error) from None
        return Response(_issued(issued), status=status.HTTP_201_CREATED)

    @extend_schema(
        request=RotateSerializer,
        responses={201: IssuedTokenSerializer},
        summary="Rotate a token: a new secret with the same name, scope and lifetime; the old one stops now or "
        "after overlap_hours",
    )
    @action(detail=True, methods=["post"])
    def rotate(self, request, pk=None):
        token = self.get_object()
        body = RotateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            issued = tokens.rotate(request.user, token, body.validated_data["overlap_hours"], maker=request.auth)
        except tokens.TokenLimitError as error:
            raise _refusal(error) from None
        return Response(_issued(issued), status=status.HTTP_201_CREATED)

    @extend_schema(summary="Revoke a token")
    def destroy(self, request, *args, **kwargs):
        tokens.revoke(request.user, self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


def _issued(issued: tokens.Issued) -> dict:
    out = IssuedTokenSerializer(issued.token).data
    out["token"] = issued.secret
    return out


# A path converter, as the API router (core.api.routers.IdRouter) uses: an ASCII id, an integer in the schema.
SA_TOKEN_PATH = "tokens/<int:token_id>"


@extend_schema_view(
    list=extend_schema(summary="List service accounts", description="Of your teams (admins: all); ?team=<slug>."),
    retrieve=extend_schema(summary="One service account"),
    create=extend_schema(summary="Create a team service account (team leads and admins)"),
)
@extend_schema(tags=["tokens"])
class ServiceAccountViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Team service accounts: robot identities its leads create, with tokens they issue, rotate and revoke.
    Members of the team may list them; other teams do not see them (404)."""

    serializer_class = ServiceAccountSerializer
    queryset = ServiceAccount.objects.none()
    filterset_class = None
    extra_query_params = ("team",)
    ordering_fields = ["name", "created", "id"]

    def get_queryset(self):
        accounts = service_accounts.visible(self.request.user)
        if self.action == "list" and self.request.query_params.get("team"):
            accounts = accounts.filter(team__slug=self.request.query_params["team"])
        return accounts

    def get_throttles(self):
        if self.action in ("tokens", "rotate_token") and self.request.method == "POST":
            return [TokenCreateThrottle()]
        return super().get_throttles()

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        team = data["team"]  # one of the caller's teams (TeamSlugField): another team reads as one that does not exist
        try:
            account = service_accounts.create(request.user, team, data["name"], data.get("description", ""))
        except (PermissionError, service_accounts.ServiceAccountError) as error:
            raise _refusal(error) from None
        return Response(self.get_serializer(account).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=ServiceAccountSerializer, summary="Disable a service account for good")
    @action(detail=True, methods=["post"])
    def disable(self, request, pk=None):
        account = self.get_object()
        try:
            service_accounts.disable(request.user, account)
        except PermissionError as error:
            raise _refusal(error) from None
        account.refresh_from_db()
        return Response(self.get_serializer(account).data)

    def _manageable(self):
        account = self.get_object()
        if not service_accounts.can_manage(self.request.user, account.team):
            raise exceptions.PermissionDenied(
                f"Only leads of {account.team.slug} and portal admins can manage its service accounts' tokens."
            )
        return account

    @extend_schema(
        methods=["GET"], responses=APITokenSerializer(many=True), summary="A service account's tokens (leads, admins)"
    )
    @extend_schema(
        methods=["POST"],
        request=APITokenSerializer,
        responses={201: IssuedTokenSerializer},
        summary="Issue a token for a service account (leads, admins); the secret is shown once",
    )
    @action(detail=True, methods=["get", "post"], filterset_class=None, pagination_class=None)
    def tokens(self, request, pk=None):
        account = self._manageable()
        if request.method == "GET":
            return Response(APITokenSerializer(account.user.api_tokens.select_related("user"), many=True).data)
        if not account.is_active:
            raise serializers.ValidationError({"detail": ["This service account is disabled; create another."]})
        body = APITokenSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        try:
            issued = tokens.issue(
                request.user, account.user, data["name"], data["scope"], data.get("days"), maker=request.auth,
                team=account.team,
            )  # fmt: skip
        except tokens.TokenLimitError as error:
            raise _refusal(error) from None
        return Response(_issued(issued), status=status.HTTP_201_CREATED)

    def _token(self, account, token_id):
        return get_object_or_404(APIToken, pk=token_id, user=account.user)

    @extend_schema(request=RotateSerializer, responses={201: IssuedTokenSerializer},
                   summary="Rotate a service account's token (leads, admins)")  # fmt: skip
    @action(detail=True, methods=["post"], url_path=f"{SA_TOKEN_PATH}/rotate", filterset_class=None)
    def rotate_token(self, request, pk=None, token_id=None):
        account = self._manageable()
        body = RotateSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            issued = tokens.rotate(
                request.user, self._token(account, token_id), body.validated_data["overlap_hours"],
                maker=request.auth, team=account.team,
            )  # fmt: skip
        except tokens.TokenLimitError as error:
            raise _refusal(error) from None
        return Response(_issued(issued), status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None}, summary="Revoke a service account's token (leads, admins)")
    @action(detail=True, methods=["post"], url_path=f"{SA_TOKEN_PATH}/revoke", filterset_class=None)
    def revoke_token(self, request, pk=None, token_id=None):
        account = self._manageable()
        tokens.revoke(request.user, self._token(account, token_id), team=account.team)
        return Response(status=status.HTTP_204_NO_CONTENT)


@extend_schema(tags=["auth"])
class DeviceStartView(APIView):
    """Step one of `gpuportal login`: a sign-in code for the person to approve in the browser."""

    authentication_classes: list = []
    permission_classes = [permissions.AllowAny]
    throttle_classes = [DeviceStartThrottle]

    @extend_schema(request=DeviceStartSerializer, responses={201: DeviceCodeSerializer},
                   summary="Start a command-line sign-in (no token needed)", auth=[])  # fmt: skip
    def post(self, request):
        body = DeviceStartSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        auth, device_code = device_login.start(data["name"], data["scope"], data.get("days"))
        page = request.build_absolute_uri(reverse("device-approve"))
        out = {
            "device_code": device_code,
            "user_code": auth.user_code,
            "verification_uri": page,
            "verification_uri_complete": f"{page}?code={auth.user_code}",
            "expires_in": settings.PORTAL_DEVICE_CODE_SECONDS,
            "interval": settings.PORTAL_DEVICE_POLL_INTERVAL,
        }
        return Response(out, status=status.HTTP_201_CREATED)


@extend_schema(tags=["auth"])
class DeviceTokenView(APIView):
    """Step two of `gpuportal login`: poll until the sign-in is approved, then receive the token once."""

    authentication_classes: list = []
    permission_classes = [permissions.AllowAny]
    throttle_classes = [DevicePollThrottle]

    @extend_schema(
        request=DevicePollSerializer,
        responses={200: IssuedTokenSerializer, 400: OpenApiResponse(description="{error, detail}: RFC 8628 codes")},
        summary="Collect the token of an approved command-line sign-in",
        auth=[],
    )
    def post(self, request):
        body = DevicePollSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        try:
            issued = device_login.collect(body.validated_data["device_code"])
        except device_login.DeviceFlowError as error:
            return Response({"error": error.code, "detail": str(error)}, status=status.HTTP_400_BAD_REQUEST)
        return Response(_issued(issued))


@extend_schema_view(
    list=extend_schema(summary="List your notifications, newest first"),
    retrieve=extend_schema(summary="One notification"),
)
@extend_schema(tags=["notifications"])
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
