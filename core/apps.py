from django.apps import AppConfig


class CoreConfig(AppConfig):
    """Shared plumbing with no domain: event metrics, the audit log, notifications, the webhook delivery engine,
    request plumbing (request ids, rate limits) and the collector pause. Every app builds on it; it imports none.

    Its models (AuditEvent, Notification, Webhook, Delivery) came from the accounts app (label ``portal``) and keep
    their tables, ``portal_*`` (core.0001 took them over without touching a row).
    """

    name = "core"
    label = "core"
    verbose_name = "Core: audit log, notifications and webhooks"
