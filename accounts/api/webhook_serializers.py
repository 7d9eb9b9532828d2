"""The API's shape of webhooks and deliveries (accounts.webhook_ops does the work)."""

from rest_framework import serializers

from core.choices import WebhookFormat
from core.models import Delivery, Webhook


class WebhookSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    #: Blank names are refused by accounts.webhook_ops with the other problems, all at once.
    name = serializers.CharField(max_length=100, allow_blank=True)
    url = serializers.CharField(
        write_only=True, max_length=500, help_text="Where events are POSTed (https). Shown masked afterwards."
    )
    masked_url = serializers.CharField(read_only=True, help_text="The URL's host and the start of its path.")
    events = serializers.ListField(
        child=serializers.CharField(),
        help_text="Event types ('job.failed') or families ('job.*'); see the user guide for the list.",
    )
    format = serializers.ChoiceField(choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = Webhook
        fields = ["id", "team", "name", "url", "masked_url", "events", "format", "active", "created_by", "created"]
        read_only_fields = ["id", "team", "masked_url", "created_by", "created"]


class WebhookCreateSerializer(WebhookSerializer):
    team = serializers.SlugField(help_text="The team's slug; you must be one of its leads (or an admin).")

    class Meta(WebhookSerializer.Meta):
        read_only_fields = ["id", "masked_url", "created_by", "created"]


class WebhookSecretSerializer(WebhookSerializer):
    secret = serializers.CharField(read_only=True, help_text="The signing secret. Shown once; store it now.")

    class Meta(WebhookSerializer.Meta):
        fields = WebhookSerializer.Meta.fields + ["secret"]


class DeliverySerializer(serializers.ModelSerializer):
    class Meta:
        model = Delivery
        fields = [
            "id", "webhook", "event_id", "event_type", "status", "attempt", "response_code", "response_excerpt",
            "error", "attempts_log", "created", "next_attempt_at", "finished_at", "redelivery_of", "payload",
        ]  # fmt: skip
        read_only_fields = fields
