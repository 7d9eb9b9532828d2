"""Team webhooks: what the portal tells a team's endpoints, signed, in order, retried with backoff.

``emit`` is the one entry point: the floors above call it on a state change (one line each) and it does nothing
until the transaction commits. Then every active webhook of the team subscribed to the event gets a Delivery row
and a delivery task is enqueued (core.tasks.deliver_webhook). Cluster-wide facts (node operations) are emitted
with ``team=None`` and reach every team's webhooks that subscribed to them.

Order: deliveries to one webhook go out in the order of their ids (the order their events committed). One
sender at a time holds a webhook (a lease on the row, taken with a conditional UPDATE); it sends the oldest open
delivery first, and while that one waits for a retry nothing later to the same webhook is sent. A delivery that
runs out of attempts is marked failed and the queue moves on after its last backoff (it can be redelivered by hand).

Bounds: what one team's webhooks may cost the portal. A team has at most PORTAL_WEBHOOK_MAX_PER_TEAM webhooks
(accounts.webhook_ops); a webhook at most PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES waiting, an event past that being
stored as dropped with the reason; a sending pass stops starting attempts after PORTAL_WEBHOOK_PASS_SECONDS; each
POST has short connect and read timeouts, and goes only to public addresses (core.egress). The tasks run on a
queue and worker of their own (PORTAL_WEBHOOK_QUEUE), never the control loop's.

Signing: ``X-Portal-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>`` over the exact
bytes of the body (docs/user-guide.md shows how to verify it). The higher floors declare their event types
(``register_events``) from their AppConfig.ready, so subscriptions are validated without importing them.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import requests
from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from . import egress
from .choices import OPEN_DELIVERY_STATES, DeliveryStatus, WebhookFormat
from .metrics import WEBHOOK_DELIVERIES_DROPPED, WEBHOOK_DELIVERY_FAILURES
from .models import Delivery, Webhook

log = logging.getLogger(__name__)

#: Sent by name: core.tasks imports this module, not the other way round. The name is the one the task had when
#: it lived in accounts.tasks (core.tasks keeps it), so messages already queued still find it.
DELIVER_TASK = "accounts.tasks.deliver_webhook"

# -- the event registry ---------------------------------------------------------------------------------------

_events: dict[str, str] = {}
#: The event every webhook receives when someone presses "Send a test ping"; not subscribable.
PING = "ping"


def register_events(events: dict[str, str]) -> None:
    """Declare event types (``"job.failed": "A job failed"``); each is ``<family>.<what>``."""
    for name, label in events.items():
        if name.count(".") != 1 or not all(name.split(".")):
            raise ValueError(f"Webhook event {name!r} must be '<family>.<what>'.")
        _events[name] = label


def registered_events() -> dict[str, str]:
    return dict(sorted(_events.items()))


def families() -> list[str]:
    return sorted({name.split(".")[0] for name in _events})


def subscription_problems(patterns: list) -> list[str]:
    """Every problem with a subscription list at once, each saying what to use instead."""
    if not isinstance(patterns, list) or not patterns:
        return ["Subscribe to at least one event type, e.g. 'job.*' or 'job.failed'."]
    known, fams = registered_events(), families()
    problems = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            problems.append(f"{pattern!r} is not an event type; use strings such as 'job.failed'.")
        elif pattern.endswith(".*"):
            if pattern[:-2] not in fams:
                problems.append(f"'{pattern}' names no event family; families are {', '.join(f + '.*' for f in fams)}.")
        elif pattern not in known:
            choices = ", ".join(known)
            problems.append(f"'{pattern}' is not an event type; choose from {choices} or a family like 'job.*'.")
    return problems


def matches(patterns: list[str], event_type: str) -> bool:
    """Does a subscription list take ``event_type``? Patterns are exact types or ``<family>.*``."""
    family = event_type.split(".")[0]
    return event_type in patterns or f"{family}.*" in patterns


# -- URLs -----------------------------------------------------------------------------------------------------

#: What a lead reads when a URL's host is refused; it says how an operator allows a network of the team's own.
NOT_PUBLIC = (
    "{host} does not resolve to a public address: webhooks go to public https endpoints. If the receiver is on a "
    "private network, an operator can allow that network with PORTAL_WEBHOOK_ALLOW_NETWORKS."
)


def url_problems(url: str) -> list[str]:
    """https to a host whose every address is public (core.egress has the rule), or http/https to a network the
    operator allowed."""
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return ["Give a full URL such as https://hooks.example.org/portal."]
    if parts.scheme not in ("http", "https") or not host:
        return ["Give a full URL such as https://hooks.example.org/portal."]
    try:
        address = egress.checked_address(host, port or egress.default_port(parts.scheme))
    except egress.Refused:
        return [NOT_PUBLIC.format(host=host)]
    if parts.scheme != "https" and egress.public(address):
        return ["Use https:// (plain http is only allowed to a private network an operator allowed)."]
    return []


# -- signing --------------------------------------------------------------------------------------------------


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The X-Portal-Signature header value for ``body`` sent at ``timestamp``."""
    mac = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def verify(secret: str, header: str, body: bytes, tolerance: int = 300, now: float | None = None) -> bool:
    """What a receiver does (the docs show the same in a few lines): recompute and compare in constant time,
    refusing signatures older than ``tolerance`` seconds (replays)."""
    fields = dict(part.split("=", 1) for part in header.split(",") if "=" in part)
    try:
        timestamp = int(fields["t"])
    except (KeyError, ValueError):
        return False
    if abs((now or time.time()) - timestamp) > tolerance:
        return False
    expected = sign(secret, timestamp, body).split("v1=", 1)[1]
    return hmac.compare_digest(expected, fields.get("v1", ""))


# -- payloads -------------------------------------------------------------------------------------------------


def _username(actor) -> str | None:
    return actor.get_username() if actor is not None and getattr(actor, "is_authenticated", False) else None


def event_body(event_id: str, event_type: str, team, data: dict, actor: str | None, reason: str, at: datetime) -> dict:
    """The JSON event: the same for every webhook in JSON format."""
    body = {
        "id": event_id,
        "type": event_type,
        "created": at.isoformat(),
        "team": team.slug if team is not None else None,
        "data": data,
    }
    if actor:
        body["actor"] = actor
    if reason:
        body["reason"] = reason
    return body


def slack_text(event: dict) -> str:
    """One short line a person reads in a channel, with a link when the event has one."""
    data = event.get("data", {})
    what = data.get("title") or data.get("name") or ""
    words = event["type"].replace("_", " ").replace(".", " ")
    line = f"[{event['team'] or 'cluster'}] {words}" + (f": {what}" if what else "")
    if event.get("actor"):
        line += f" (by {event['actor']})"
    if event.get("reason"):
        line += f" — {event['reason']}"
    if data.get("url"):
        line += f" <{data['url']}|open>"
    return line


def render(webhook: Webhook, event: dict) -> dict:
    """The body this webhook receives: the event itself, or for Slack (and chat tools that take Slack's incoming
    webhook format) ``{"text": …}``, one line with a link."""
    if webhook.format == WebhookFormat.SLACK:
        return {"text": slack_text(event)}
    return event


def absolute(path: str) -> str:
    return settings.PORTAL_BASE_URL.rstrip("/") + path


# -- emitting -------------------------------------------------------------------------------------------------


def emit(team, event_type: str, data, *, actor=None, reason: str = "") -> None:
    """Queue ``event_type`` for the webhooks of ``team`` (a Team or its id; every team's when None) once the
    transaction commits; nothing is sent for a transaction that rolls back.

    ``data``: JSON-safe facts about the object (ids, name, state, an absolute ``url``), or a function returning
    them, called after commit only when some webhook takes the event (so an emitter that needs a query for a
    field costs nothing when nobody listens). ``actor``: who acted (a user; None for the portal); ``reason``: why,
    when someone acted on another person's work."""
    if event_type not in _events:
        raise ValueError(f"Webhook event {event_type!r} is not registered; declare it with register_events.")
    event_id, at, who = str(uuid.uuid4()), timezone.now(), _username(actor)
    team_id = getattr(team, "pk", team)
    transaction.on_commit(lambda: _fan_out(team_id, event_type, data, who, reason, event_id, at))


def emit_many(items: list[tuple], *, actor=None) -> None:
    """``emit`` for many events at once (a mass start of thousands of jobs): ``items`` are (team id, event type,
    data) triples, ``data`` as for ``emit``. After commit, one query finds the webhooks of all their teams and one
    insert stores every delivery: the round trips do not grow with the number of events."""
    for _, event_type, _ in items:
        if event_type not in _events:
            raise ValueError(f"Webhook event {event_type!r} is not registered; declare it with register_events.")
    if not items:
        return
    at, who = timezone.now(), _username(actor)
    stamped = [(team_id, event_type, data, str(uuid.uuid4())) for team_id, event_type, data in items]
    transaction.on_commit(lambda: _fan_out_many(stamped, who, at))


def _fan_out_many(items: list[tuple], actor, at) -> list[Delivery]:
    teams = {team_id for team_id, _, _, _ in items}
    hooks: dict = {}
    for webhook in Webhook.objects.filter(active=True, team_id__in=teams).select_related("team"):
        hooks.setdefault(webhook.team_id, []).append(webhook)
    deliveries = []
    for team_id, event_type, data, event_id in items:
        takers = [webhook for webhook in hooks.get(team_id, []) if matches(webhook.events, event_type)]
        if not takers:
            continue
        facts = data() if callable(data) else data
        for webhook in takers:
            event = event_body(event_id, event_type, webhook.team, facts, actor, "", at)
            deliveries.append(Delivery(webhook=webhook, event_id=event_id, event_type=event_type,
                                       payload=render(webhook, event)))  # fmt: skip
    if not deliveries:
        return []
    return _enqueue(Delivery.objects.bulk_create(_within_cap(deliveries), batch_size=500))


def _fan_out(team_id, event_type, data, actor, reason, event_id, at) -> list[Delivery]:
    hooks = Webhook.objects.filter(active=True).select_related("team")
    if team_id is not None:
        hooks = hooks.filter(team_id=team_id)
    takers = [webhook for webhook in hooks if matches(webhook.events, event_type)]
    if not takers:
        return []
    facts = data() if callable(data) else data
    deliveries = []
    for webhook in takers:
        event = event_body(event_id, event_type, webhook.team if team_id else None, facts, actor, reason, at)
        deliveries.append(Delivery(webhook=webhook, event_id=event_id, event_type=event_type,
                                   payload=render(webhook, event)))  # fmt: skip
    return _enqueue(Delivery.objects.bulk_create(_within_cap(deliveries)))


# -- how much may wait ----------------------------------------------------------------------------------------

#: The reason a dropped delivery's row gives, in the webhook's delivery log.
NOT_SENT = (
    "Not sent: {cap} deliveries to this webhook were already waiting, the most PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES "
    "allows, so the receiver is not keeping up. Once it answers again, redeliver the events you still need."
)


def waiting(webhook_ids) -> dict[int, int]:
    """How many deliveries each webhook has waiting (pending or retrying), in one query."""
    open_deliveries = Delivery.objects.filter(webhook_id__in=webhook_ids, status__in=OPEN_DELIVERY_STATES)
    return dict(open_deliveries.order_by().values_list("webhook_id").annotate(count=Count("id")))


def _within_cap(deliveries: list[Delivery]) -> list[Delivery]:
    """Mark every new delivery past its webhook's PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES as dropped, with the reason
    (the earlier events keep their places): a receiver that is down or slow costs the portal a bounded queue, and
    its lead sees in the delivery log which events did not go out."""
    cap = settings.PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES
    held = waiting({delivery.webhook_id for delivery in deliveries})
    now, dropped = timezone.now(), 0
    for delivery in deliveries:
        if held.get(delivery.webhook_id, 0) < cap:
            held[delivery.webhook_id] = held.get(delivery.webhook_id, 0) + 1
            continue
        delivery.status, delivery.finished_at, delivery.error = DeliveryStatus.DROPPED, now, NOT_SENT.format(cap=cap)
        dropped += 1
    if dropped:
        WEBHOOK_DELIVERIES_DROPPED.inc(dropped)
        log.warning("dropped %d webhook deliveries: their webhooks had %d waiting", dropped, cap)
    return deliveries


def queue_full(webhook: Webhook) -> str:
    """Why nothing more can be queued for this webhook by hand (a ping, a redelivery), or "" when it can."""
    cap = settings.PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES
    if waiting([webhook.pk]).get(webhook.pk, 0) < cap:
        return ""
    return (
        f"Webhook '{webhook.name}' already has {cap} deliveries waiting, the most PORTAL_WEBHOOK_MAX_OPEN_DELIVERIES "
        "allows: its receiver is not keeping up. Fix the receiver (the delivery log shows what it answered); "
        "this can be sent once the waiting deliveries have gone out."
    )


def ping(webhook: Webhook, actor) -> Delivery:
    """A test event to this webhook alone, whatever it subscribed to."""
    event_id, at = str(uuid.uuid4()), timezone.now()
    data = {"webhook": webhook.pk, "name": webhook.name, "url": absolute(f"/teams/{webhook.team.slug}/webhooks/")}
    event = event_body(event_id, PING, webhook.team, data, _username(actor), "", at)
    delivery = Delivery.objects.create(webhook=webhook, event_id=event_id, event_type=PING,
                                       payload=render(webhook, event))  # fmt: skip
    transaction.on_commit(lambda: _enqueue([delivery]))
    return delivery


def redeliver(delivery: Delivery) -> Delivery:
    """Send a delivery's exact body again, as a new delivery at the end of its webhook's queue."""
    again = Delivery.objects.create(webhook=delivery.webhook, event_id=delivery.event_id,
                                    event_type=delivery.event_type, payload=delivery.payload,
                                    redelivery_of=delivery)  # fmt: skip
    transaction.on_commit(lambda: _enqueue([again]))
    return again


def _enqueue(deliveries: list[Delivery]) -> list[Delivery]:
    for webhook_id in sorted({d.webhook_id for d in deliveries if d.status in OPEN_DELIVERY_STATES}):
        kick(webhook_id)
    return deliveries


def kick(webhook_id: int) -> None:
    """Ask a worker to send this webhook's due deliveries now."""
    try:
        current_app.send_task(DELIVER_TASK, args=(webhook_id,), queue=settings.PORTAL_WEBHOOK_QUEUE)
    except Exception:  # the broker being down must not fail the change; the periodic sweep sends it
        log.warning("could not queue webhook %s; the periodic sweep will send it", webhook_id, exc_info=True)


# -- sending --------------------------------------------------------------------------------------------------


def backoff(attempt: int) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, …): base × 2^(attempt-1), capped."""
    base = settings.PORTAL_WEBHOOK_RETRY_BASE_SECONDS
    return min(base * 2 ** (attempt - 1), settings.PORTAL_WEBHOOK_RETRY_MAX_SECONDS)


@dataclass
class Outcome:
    code: int | None
    excerpt: str
    error: str

    @property
    def ok(self) -> bool:
        return self.code is not None and 200 <= self.code < 300


#: The one error a delivery records when no answer came: the same whether the address was refused, nothing
#: listened, the connection was refused or timed out, or TLS failed, so the log tells nobody which ports are open
#: where; and it names no URL (the page masks it: it may be a credential). The worker's log has the detail.
UNREACHABLE = (
    "No answer: the receiver could not be reached, refused the connection or did not answer in time. Check that "
    "the URL is right and the endpoint is up and public; the delivery is tried again."
)


def post(webhook: Webhook, delivery: Delivery) -> Outcome:
    """One HTTP attempt, to the checked address of the URL's host (core.egress). Redirects are not followed (a
    receiver answers where it was registered)."""
    body = json.dumps(delivery.payload, separators=(",", ":"), sort_keys=True).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "gpu-portal-webhooks/1",
        "X-Portal-Event": delivery.event_type,
        "X-Portal-Delivery": str(delivery.pk),
        "X-Portal-Event-Id": str(delivery.event_id),
        "X-Portal-Signature": sign(webhook.secret, int(time.time()), body),
    }
    timeout = (settings.PORTAL_WEBHOOK_CONNECT_TIMEOUT_SECONDS, settings.PORTAL_WEBHOOK_TIMEOUT_SECONDS)
    try:
        code, excerpt = egress.post(webhook.url, body, headers, timeout, keep=500)
    except (egress.Refused, requests.RequestException, OSError) as error:
        why = str(error) if isinstance(error, egress.Refused) else type(error).__name__
        log.info("webhook %s (%s): delivery %s got no answer: %s", webhook.pk, webhook.masked_url, delivery.pk, why)
        return Outcome(None, "", UNREACHABLE)
    return Outcome(code, excerpt, "")


def _claim(webhook_id: int, now: datetime) -> bool:
    lease = now + timedelta(seconds=settings.PORTAL_WEBHOOK_LEASE_SECONDS)
    free = Q(lease_until__isnull=True) | Q(lease_until__lt=now)
    return bool(Webhook.objects.filter(Q(pk=webhook_id) & free).update(lease_until=lease))


def _record(delivery: Delivery, outcome: Outcome, now: datetime) -> float | None:
    """Store one attempt; returns the seconds until the webhook's next attempt, or None to go on at once.

    A delivery that fails its last attempt is failed, and the webhook's next delivery waits the backoff of that
    last attempt too: a receiver that failed every attempt is not sent the next event straight away, and so on
    down its queue."""
    delivery.attempt += 1
    delivery.response_code, delivery.response_excerpt, delivery.error = outcome.code, outcome.excerpt, outcome.error
    delivery.attempts_log = [*delivery.attempts_log, {"at": now.isoformat(), "code": outcome.code,
                                                      "error": outcome.error}]  # fmt: skip
    wait = None
    if not outcome.ok:
        WEBHOOK_DELIVERY_FAILURES.inc()
    if outcome.ok:
        delivery.status, delivery.finished_at = DeliveryStatus.SUCCEEDED, now
    elif delivery.attempt >= settings.PORTAL_WEBHOOK_MAX_ATTEMPTS:
        delivery.status, delivery.finished_at = DeliveryStatus.FAILED, now
        wait = backoff(delivery.attempt)
    else:
        wait = backoff(delivery.attempt)
        delivery.status, delivery.next_attempt_at = DeliveryStatus.RETRYING, now + timedelta(seconds=wait)
    delivery.save(update_fields=["attempt", "response_code", "response_excerpt", "error", "attempts_log", "status",
                                 "finished_at", "next_attempt_at"])  # fmt: skip
    if delivery.status == DeliveryStatus.FAILED and wait:
        hold = now + timedelta(seconds=wait)
        _open(delivery.webhook_id).filter(next_attempt_at__lt=hold).update(next_attempt_at=hold)
    return wait


def send_due(webhook_id: int, budget: float | None = None) -> float | None:
    """Send this webhook's open deliveries, oldest first, until one must wait, none is left or the pass has used
    its ``budget`` of seconds (PORTAL_WEBHOOK_PASS_SECONDS): it then starts no further attempt, so a worker spends
    at most the budget and one attempt's timeouts on one receiver before the other webhooks' tasks get their turn.
    Returns the seconds after which to call again (a retry is due, or more remain), or None.

    Holds the webhook's lease while it works; a caller that cannot take it returns at once (the holder sends
    what is due, and checks once more after letting go)."""
    deadline = time.monotonic() + (settings.PORTAL_WEBHOOK_PASS_SECONDS if budget is None else budget)
    while True:
        if not _claim(webhook_id, timezone.now()):
            return None
        try:
            again = _send_claimed(webhook_id, deadline)
        finally:
            Webhook.objects.filter(pk=webhook_id).update(lease_until=None)
        if again is not None:
            return again
        # Deliveries committed while we held the lease had their task turned away: look once more.
        if not _open(webhook_id).filter(next_attempt_at__lte=timezone.now()).exists():
            return None


def _open(webhook_id: int):
    return Delivery.objects.filter(webhook_id=webhook_id, status__in=OPEN_DELIVERY_STATES).order_by("id")


def _send_claimed(webhook_id: int, deadline: float) -> float | None:
    webhook = Webhook.objects.filter(pk=webhook_id).first()
    if webhook is None or not webhook.active:
        return None
    sent = False
    while True:
        delivery = _open(webhook_id).first()
        if delivery is None:
            return None
        now = timezone.now()
        if delivery.next_attempt_at > now:
            return (delivery.next_attempt_at - now).total_seconds()
        if sent and time.monotonic() >= deadline:
            return 0.0  # more is due: make way for the other webhooks, and come back behind them
        wait = _record(delivery, post(webhook, delivery), timezone.now())
        sent = True
        if wait is not None:
            return wait


def due_webhooks() -> list[int]:
    """Webhooks with a delivery due now (the periodic sweep re-enqueues them: a lost task, a worker restart)."""
    due = Delivery.objects.filter(status__in=OPEN_DELIVERY_STATES, next_attempt_at__lte=timezone.now())
    return sorted(set(due.filter(webhook__active=True).values_list("webhook_id", flat=True)))


def prune(now: datetime | None = None) -> int:
    """Delete finished deliveries older than PORTAL_WEBHOOK_LOG_DAYS (the log is for recent trouble, not an
    archive; the audit log keeps who changed what). Returns how many went."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.PORTAL_WEBHOOK_LOG_DAYS)
    finished = Delivery.objects.exclude(status__in=OPEN_DELIVERY_STATES).filter(finished_at__lt=cutoff)
    return finished.delete()[0]
