"""What people do with webhooks: create, change, rotate the secret, ping, redeliver, delete. One function each,
shared by the pages and the API; each checks who may (a lead of the team or an admin), validates every field at
once (a ValidationError naming every problem) and writes its audit record.

Members who are not leads see nothing of their team's webhooks: a webhook's URL can itself be a credential (a
Slack incoming-webhook URL is) and deliveries carry every event of the team."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from core import audit, webhooks
from core.choices import WebhookFormat
from core.models import Delivery, Webhook

from . import roles
from .choices import WebhookAuditAction
from .models import Team

#: What the audit records keep of a webhook (the URL masked: it may be a credential).
EDITABLE = ("name", "url", "events", "format", "active")


def manages(user, team) -> bool:
    """Leads of ``team`` and admins manage its webhooks."""
    return roles.is_lead_or_admin(user, team)


def visible_webhooks(user):
    return Webhook.objects.filter(team__in=roles.led_teams(user)).select_related("team", "created_by")


def _check(user, team) -> None:
    if not manages(user, team):
        raise PermissionDenied(f"Only a lead of team {team.name} or an admin can manage its webhooks.")


def _snapshot(webhook: Webhook) -> dict:
    return {"name": webhook.name, "url": webhook.masked_url, "events": list(webhook.events),
            "format": webhook.format, "active": webhook.active}  # fmt: skip


def problems(fields: dict) -> dict[str, list[str]]:
    """Every problem with the given fields, per field, each saying what to do."""
    errors: dict[str, list[str]] = {}
    if "name" in fields and not str(fields["name"] or "").strip():
        errors["name"] = ["Give the webhook a name that says what receives it, e.g. 'team Slack channel'."]
    if "url" in fields and (found := webhooks.url_problems(str(fields["url"] or ""))):
        errors["url"] = found
    if "events" in fields and (found := webhooks.subscription_problems(fields["events"])):
        errors["events"] = found
    if "format" in fields and fields["format"] not in WebhookFormat.values:
        errors["format"] = [f"Choose a format: {', '.join(WebhookFormat.values)}."]
    return errors


def team_full(team) -> str:
    """Why ``team`` can have no more webhooks (PORTAL_WEBHOOK_MAX_PER_TEAM), or "" when it can."""
    cap, count = settings.PORTAL_WEBHOOK_MAX_PER_TEAM, Webhook.objects.filter(team=team).count()
    if count < cap:
        return ""
    return (
        f"Team {team.name} already has {count} webhooks, the most PORTAL_WEBHOOK_MAX_PER_TEAM allows ({cap}). "
        "Delete one it no longer needs, or ask an admin to raise the limit."
    )


def create(user, team, fields: dict) -> tuple[Webhook, str]:
    """A new webhook; returns it with its signing secret, which is shown this once. A team has at most
    PORTAL_WEBHOOK_MAX_PER_TEAM (counted under a lock on the team's row, so two at once cannot pass it)."""
    _check(user, team)
    fields = {key: fields[key] for key in EDITABLE if key in fields}
    missing = {key: ["This field is required."] for key in ("name", "url", "events") if key not in fields}
    errors = missing | problems(fields)
    if full := team_full(team):
        errors["detail"] = [full]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        Team.objects.select_for_update().filter(pk=team.pk).exists()
        if full := team_full(team):
            raise ValidationError({"detail": [full]})
        webhook = Webhook.objects.create(team=team, created_by=user, **(fields | {"name": fields["name"].strip()}))
        audit.record(user, WebhookAuditAction.WEBHOOK_CREATE, webhook, after=_snapshot(webhook), team=team)
    return webhook, webhook.secret


def update(user, webhook: Webhook, changes: dict) -> Webhook:
    _check(user, webhook.team)
    unknown = sorted(set(changes) - set(EDITABLE))
    errors = problems(changes)
    if unknown:
        errors["detail"] = [f"A webhook has no setting {', '.join(unknown)}; change {', '.join(EDITABLE)}."]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        before = _snapshot(webhook)
        for key, value in changes.items():
            setattr(webhook, key, value.strip() if key == "name" else value)
        webhook.save()
        audit.record(user, WebhookAuditAction.WEBHOOK_UPDATE, webhook, before=before, after=_snapshot(webhook),
                     team=webhook.team)  # fmt: skip
        if webhook.active and not before["active"]:
            transaction.on_commit(lambda: webhooks.kick(webhook.pk))  # what queued while it was off goes out now
    return webhook


def rotate(user, webhook: Webhook) -> str:
    """A new signing secret (the old one stops working at once); returned this once."""
    _check(user, webhook.team)
    with transaction.atomic():
        secret = webhook.rotate_secret()
        audit.record(user, WebhookAuditAction.WEBHOOK_ROTATE, webhook, team=webhook.team)
    return secret


def delete(user, webhook: Webhook) -> None:
    _check(user, webhook.team)
    with transaction.atomic():
        audit.record(user, WebhookAuditAction.WEBHOOK_DELETE, webhook, before=_snapshot(webhook), team=webhook.team)
        webhook.delete()


def _room(webhook: Webhook) -> None:
    if full := webhooks.queue_full(webhook):
        raise ValidationError({"detail": [full]})


def ping(user, webhook: Webhook) -> Delivery:
    _check(user, webhook.team)
    _room(webhook)
    with transaction.atomic():
        delivery = webhooks.ping(webhook, user)
        audit.record(user, WebhookAuditAction.WEBHOOK_PING, webhook, after={"delivery": delivery.pk},
                     team=webhook.team)  # fmt: skip
    return delivery


def redeliver(user, delivery: Delivery) -> Delivery:
    _check(user, delivery.webhook.team)
    _room(delivery.webhook)
    with transaction.atomic():
        again = webhooks.redeliver(delivery)
        audit.record(user, WebhookAuditAction.WEBHOOK_REDELIVER, delivery.webhook,
                     after={"delivery": delivery.pk, "new_delivery": again.pk, "event": delivery.event_type},
                     team=delivery.webhook.team)  # fmt: skip
    return again
