"""The rows of the shared plumbing: the audit log, in-app notifications, and team webhooks with their deliveries.

These models moved here from the accounts app (label ``portal``) and keep its tables (``Meta.db_table``), so no
row was copied: core.0001 takes them over in Django's state only and relabels their content types. A team is
named by its label (``"portal.Team"``), never imported: this floor sits below accounts.

A Webhook stores no secret: its signing secret is derived from the portal's SECRET_KEY, the webhook's id and a
random salt kept on the row (``Webhook.secret``), so a copy of the database alone cannot forge a signature.
Rotating the secret replaces the salt. The row names the key its secret was made under (``secret_key_id``,
core.secret_keys): while the portal's key is being rotated and the old one is still a fallback, the webhook goes on
signing with the old one, so its receiver keeps verifying until a lead rotates the webhook's secret.

A Delivery is one event on its way to one webhook, with every attempt (time, response code or error) in
``attempts_log``; deliveries to one webhook go out in ``id`` order.
"""

from __future__ import annotations

import secrets

from django.conf import settings
from django.db import models
from django.utils import timezone
from django.utils.crypto import salted_hmac

from .choices import DeliveryStatus, WebhookFormat
from .secret_keys import current_key_id, key_for


class AuditEvent(models.Model):
    """Who changed what, when, from which request, with the object's state before and after."""

    when = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    #: Kept even if the user is deleted later; "system" for the reconciler.
    actor_name = models.CharField(max_length=150)
    #: A verb some app registered with core.audit (each app owns its verbs; see core.audit).
    action = models.CharField(max_length=40)
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=100)
    object_repr = models.CharField(max_length=200)
    before = models.JSONField(null=True, blank=True)
    after = models.JSONField(null=True, blank=True)
    request_id = models.CharField(max_length=64, blank=True)
    team = models.ForeignKey(
        "portal.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_events"
    )
    #: The cluster of the fleet the action concerns (a job placed there, a node carved there, the cluster itself),
    #: by name: this floor knows no clusters, and the name outlives a cluster that is later removed. "" when the
    #: action concerns no cluster (a team, a token) or happened before it had one (a job not yet placed).
    cluster = models.CharField(max_length=63, blank=True, default="", db_default="")

    class Meta:
        db_table = "portal_auditevent"
        ordering = ["-when", "-id"]
        indexes = [
            models.Index(fields=["object_type", "object_id"]),
            # The audit log filtered by cluster, newest first.
            models.Index(fields=["cluster", "-when"], name="audit_cluster_newest"),
        ]

    def __str__(self) -> str:
        return f"{self.when:%Y-%m-%d %H:%M} {self.actor_name} {self.action} {self.object_type} {self.object_repr}"


class NotificationQuerySet(models.QuerySet):
    def unread(self):
        return self.filter(read_at__isnull=True)


class Notification(models.Model):
    """An in-app message to one person (the bell in the header): an idle job of theirs, a limit coming up."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    kind = models.CharField(max_length=40)
    title = models.CharField(max_length=200)
    body = models.TextField(blank=True)
    url = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    read_at = models.DateTimeField(null=True, blank=True)

    objects = NotificationQuerySet.as_manager()

    class Meta:
        db_table = "portal_notification"
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["user", "read_at"], name="notification_user_unread")]

    def __str__(self) -> str:
        return f"{self.user} · {self.title}"


def _new_salt() -> str:
    return secrets.token_hex(16)


class Webhook(models.Model):
    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=100, help_text="What receives the events, e.g. 'team Slack channel'.")
    #: Where events are POSTed. It may itself be a credential (a Slack incoming-webhook URL is); pages and the
    #: API show it masked after creation (``masked_url``).
    url = models.URLField(max_length=500)
    #: Event types or families (``job.*``) this webhook receives; validated against core.webhooks' registry.
    events = models.JSONField(default=list)
    format = models.CharField(max_length=10, choices=WebhookFormat.choices, default=WebhookFormat.JSON)
    active = models.BooleanField(default=True)
    salt = models.CharField(max_length=32, default=_new_salt, editable=False)
    #: Which of the portal's secret keys the signing secret derives from (core.secret_keys.key_id: says nothing of
    #: the key). The current key's when made or rotated; rows older than this field got the key current when it
    #: was added (migration core.0003). "" (the database's default, for a writer on older code) reads as current.
    secret_key_id = models.CharField(max_length=16, default=current_key_id, db_default="", editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created = models.DateTimeField(auto_now_add=True)
    #: A delivery task holds the webhook until this time (one sender per webhook keeps the order).
    lease_until = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        db_table = "portal_webhook"
        ordering = ["team__slug", "name", "id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.team.slug})"

    @property
    def secret(self) -> str:
        """The signing secret, derived (never stored): HMAC-SHA256 of the id and salt under the secret key it was
        made under, while that key is SECRET_KEY or one of SECRET_KEY_FALLBACKS; under SECRET_KEY once that key is
        gone (its receiver then rejects the signatures until a lead rotates the secret)."""
        key = key_for(self.secret_key_id) or settings.SECRET_KEY
        # The salt's name is the one it had in accounts: renaming it would change every webhook's secret.
        digest = salted_hmac("accounts.webhook", f"{self.pk}:{self.salt}", secret=key, algorithm="sha256")
        return f"whsec_{digest.hexdigest()}"

    def rotate_secret(self) -> str:
        """A new salt under the current key: the old secret stops working at once."""
        self.salt, self.secret_key_id = _new_salt(), current_key_id()
        self.save(update_fields=["salt", "secret_key_id"])
        return self.secret

    @property
    def masked_url(self) -> str:
        """Scheme, host and the first characters of the path: enough to tell webhooks apart, not to call one."""
        scheme, _, rest = self.url.partition("://")
        host, slash, path = rest.partition("/")
        shown = path[:6]
        return f"{scheme}://{host}{slash}{shown}{'…' if len(path) > len(shown) else ''}"


class Delivery(models.Model):
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    #: The event's id; the same on every webhook that received the event and on a redelivery.
    event_id = models.UUIDField(db_index=True)
    event_type = models.CharField(max_length=60)
    #: The exact JSON body sent (already in the webhook's format).
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=DeliveryStatus.choices, default=DeliveryStatus.PENDING)
    attempt = models.PositiveSmallIntegerField(default=0, help_text="Attempts made so far.")
    response_code = models.PositiveSmallIntegerField(null=True, blank=True)
    response_excerpt = models.CharField(max_length=500, blank=True)
    error = models.CharField(max_length=500, blank=True)
    #: One entry per attempt: {"at", "code", "error"}.
    attempts_log = models.JSONField(default=list)
    created = models.DateTimeField(default=timezone.now)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    redelivery_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        db_table = "portal_delivery"
        ordering = ["-id"]
        indexes = [models.Index(fields=["webhook", "status", "id"], name="delivery_webhook_queue")]
        verbose_name_plural = "deliveries"

    def __str__(self) -> str:
        return f"{self.event_type} → {self.webhook_id} ({self.status})"
