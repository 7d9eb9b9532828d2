"""Celery entry points for webhooks: thin wrappers over accounts.webhooks."""

from celery import shared_task

from . import webhooks


@shared_task(name="accounts.tasks.deliver_webhook", soft_time_limit=120, time_limit=180)
def deliver_webhook(webhook_id: int) -> None:
    """Send a webhook's due deliveries in order; when one must wait (a retry's backoff) or more remain, run again
    after that many seconds (Celery's countdown), so a later event never overtakes an earlier one."""
    again = webhooks.send_due(webhook_id)
    if again is not None:
        deliver_webhook.apply_async((webhook_id,), countdown=max(again, 0.0))


@shared_task(name="accounts.tasks.sweep_webhooks", soft_time_limit=60, time_limit=90)
def sweep_webhooks() -> int:
    """Enqueue every webhook with a delivery due (a task lost with a worker is picked up here)."""
    due = webhooks.due_webhooks()
    for webhook_id in due:
        deliver_webhook.delay(webhook_id)
    return len(due)
