"""Choices of the shared plumbing: the audited admin's generic verbs and the webhook delivery engine's states."""

from django.db import models


class AdminAuditAction(models.TextChoices):
    """The generic verbs every audited admin records (core.admin.AuditedAdmin); registered by core.audit."""

    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    DELETE = "delete", "Deleted"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (signed event)"
    SLACK = "slack", 'Slack-compatible ({"text": …})'


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RETRYING = "retrying", "Retrying"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    #: Never sent: its webhook already had PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES waiting (the row's error says so).
    DROPPED = "dropped", "Not sent"


#: Deliveries still on their way (the sender works through these, oldest first).
OPEN_DELIVERY_STATES = (DeliveryStatus.PENDING, DeliveryStatus.RETRYING)
