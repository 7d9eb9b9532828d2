from django.conf import settings
from rest_framework import serializers

from core.models import Notification

from .. import roles
from ..choices import TokenScope
from ..models import APIToken, Membership, ServiceAccount, Team
from ..tokens import MAX_ROTATION_OVERLAP_HOURS

TEAM_NOT_FOUND = "No team '{value}'. GET /api/v1/me/ lists your teams."


class TeamSlugField(serializers.SlugRelatedField):
    """A team by slug among the teams the caller belongs to (admins: every team). Another team answers exactly as
    one that does not exist, so a request cannot learn which teams there are (issue 31). A NUL byte is in no slug:
    refused the same way (PostgreSQL would refuse to compare with it: a 500)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("slug_field", "slug")
        kwargs.setdefault("error_messages", {"does_not_exist": TEAM_NOT_FOUND})
        kwargs.setdefault("queryset", Team.objects.all())
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        team = super().to_internal_value(data)
        # The caller's role through accounts.roles (remembered within roles_remembered, so a submission that checks
        # it again reads it once): no role, and the team answers as one that does not exist.
        request = self.context.get("request")
        if roles.team_role(request.user if request is not None else None, team) is None:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data)
        return team


class MembershipSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    namespace = serializers.CharField(source="team.namespace", read_only=True)

    class Meta:
        model = Membership
        fields = ["team", "namespace", "role"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    is_admin = serializers.BooleanField(source="is_staff")
    teams = MembershipSerializer(source="memberships", many=True)


class APITokenSerializer(serializers.ModelSerializer):
    days = serializers.IntegerField(
        write_only=True,
        required=False,
        min_value=1,
        help_text="Lifetime in days (default PORTAL_TOKEN_DEFAULT_DAYS, at most PORTAL_TOKEN_MAX_DAYS; a token made "
        "with a token may not outlive it).",
    )
    scope = serializers.ChoiceField(
        choices=TokenScope.choices,
        default=TokenScope.MANAGE,
        help_text="read: GET only; submit: also submit, cancel and resubmit jobs, run notebooks and services (own "
        "work); manage: everything the identity may do. A token made with a token may not have a wider scope.",
    )
    read_only = serializers.BooleanField(
        required=False, help_text="Deprecated spelling of scope=read; true means read, false changes nothing."
    )
    active = serializers.BooleanField(source="is_active", read_only=True)
    user = serializers.CharField(source="user.username", read_only=True)

    class Meta:
        model = APIToken
        fields = [
            "id",
            "name",
            "user",
            "key_prefix",
            "scope",
            "read_only",
            "active",
            "created",
            "expires_at",
            "last_used_at",
            "revoked_at",
            "days",
        ]
        read_only_fields = ["id", "key_prefix", "created", "expires_at", "last_used_at", "revoked_at"]

    def validate_name(self, value):
        value = value.strip()
        if not value:
            raise serializers.ValidationError("Give the token a name that says what uses it.")
        return value

    def validate_days(self, value):
        if value > settings.PORTAL_TOKEN_MAX_DAYS:
            raise serializers.ValidationError(
                f"Tokens may live at most {settings.PORTAL_TOKEN_MAX_DAYS} days; ask for fewer."
            )
        return value

    def validate(self, attrs):
        if attrs.pop("read_only", False):
            attrs["scope"] = TokenScope.READ
        return attrs


class IssuedTokenSerializer(APITokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. Shown once; store it now.")

    class Meta(APITokenSerializer.Meta):
        fields = APITokenSerializer.Meta.fields + ["token"]


class RotateSerializer(serializers.Serializer):
    overlap_hours = serializers.IntegerField(
        required=False,
        default=0,
        min_value=0,
        max_value=MAX_ROTATION_OVERLAP_HOURS,
        help_text="How long the old secret keeps working, so running pipelines can switch (default 0: stops now).",
    )


class ServiceAccountSerializer(serializers.ModelSerializer):
    team = TeamSlugField()
    username = serializers.CharField(source="user.username", read_only=True)
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    active = serializers.BooleanField(source="is_active", read_only=True)

    class Meta:
        model = ServiceAccount
        fields = ["id", "team", "name", "description", "username", "created_by", "created", "disabled_at", "active"]
        read_only_fields = ["id", "created", "disabled_at"]
        # The (team, name) uniqueness is checked by accounts.service_accounts with a message saying what to do.
        validators = []


class DeviceStartSerializer(serializers.Serializer):
    name = serializers.CharField(
        max_length=100, required=False, default="gpuportal command line", help_text="The token's name."
    )
    scope = serializers.ChoiceField(choices=TokenScope.choices, default=TokenScope.SUBMIT)
    days = serializers.IntegerField(required=False, min_value=1, help_text="Lifetime of the token in days.")

    def validate_days(self, value):
        return APITokenSerializer.validate_days(self, value)


class DeviceCodeSerializer(serializers.Serializer):
    device_code = serializers.CharField(help_text="Secret: poll with it; never show it.")
    user_code = serializers.CharField(help_text="What the person checks on the approval page.")
    verification_uri = serializers.CharField()
    verification_uri_complete = serializers.CharField()
    expires_in = serializers.IntegerField()
    interval = serializers.IntegerField(help_text="Seconds to wait between polls.")


class DevicePollSerializer(serializers.Serializer):
    device_code = serializers.CharField()


class NotificationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "kind", "title", "body", "url", "created_at", "read_at"]
        read_only_fields = fields
