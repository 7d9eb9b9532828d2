from django.conf import settings
from rest_framework import serializers

from ..models import APIToken, Membership, Notification


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
        write_only=True, required=False, min_value=1, help_text="Lifetime in days (default 90, at most 365)."
    )

    class Meta:
        model = APIToken
        fields = [
            "id",
            "name",
            "key_prefix",
            "read_only",
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


class IssuedTokenSerializer(APITokenSerializer):
    token = serializers.CharField(read_only=True, help_text="The secret. Shown once; store it now.")

    class Meta(APITokenSerializer.Meta):
        fields = APITokenSerializer.Meta.fields + ["token"]


class NotificationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Notification
        fields = ["id", "kind", "title", "body", "url", "created_at", "read_at"]
        read_only_fields = fields
