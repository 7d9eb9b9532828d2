from django.db import models


class MembershipRole(models.TextChoices):
    MEMBER = "member", "Member"
    LEAD = "lead", "Lead"


class AuditAction(models.TextChoices):
    """The verbs of this app and the generic ones every audited admin uses. Each app declares its own verbs in
    its own choices module and registers them (accounts.audit.register_verbs), so a new verb never needs a
    migration here."""

    CREATE = "create", "Created"
    UPDATE = "update", "Updated"
    DELETE = "delete", "Deleted"
    TOKEN_ISSUE = "token.issue", "API token issued"
    TOKEN_REVOKE = "token.revoke", "API token revoked"
    LOGIN = "login", "Logged in"
    LOGOUT = "logout", "Logged out"
    TEAM_CREATE = "team.create", "Team created"
    TEAM_UPDATE = "team.update", "Team name or description changed"
    MEMBER_ADD = "team.member_add", "Member added to a team"
    MEMBER_ROLE = "team.member_role", "Member's role in a team changed"
    MEMBER_REMOVE = "team.member_remove", "Member removed from a team"


class WebhookAuditAction(models.TextChoices):
    WEBHOOK_CREATE = "webhook.create", "Webhook created"
    WEBHOOK_UPDATE = "webhook.update", "Webhook changed"
    WEBHOOK_DELETE = "webhook.delete", "Webhook deleted"
    WEBHOOK_ROTATE = "webhook.rotate", "Webhook secret rotated"
    WEBHOOK_PING = "webhook.ping", "Webhook pinged"
    WEBHOOK_REDELIVER = "webhook.redeliver", "Webhook delivery resent"


class WebhookFormat(models.TextChoices):
    JSON = "json", "JSON (signed event)"
    SLACK = "slack", 'Slack-compatible ({"text": …})'


class DeliveryStatus(models.TextChoices):
    PENDING = "pending", "Pending"
    RETRYING = "retrying", "Retrying"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


#: Deliveries still on their way (the sender works through these, oldest first).
OPEN_DELIVERY_STATES = (DeliveryStatus.PENDING, DeliveryStatus.RETRYING)
