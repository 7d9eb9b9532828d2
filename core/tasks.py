"""Celery entry points for webhooks: thin wrappers over core.webhooks.

The tasks keep the names they had in accounts.tasks, so messages queued before the move (and beat's schedule)
still reach them."""

from celery import shared_task

from . import webhooks


@shared_task(bind=True, name="accounts.tasks.deliver_webhook", max_retries=None, soft_time_limit=120, time_limit=180)
def deliver_webhook(self, webhook_id: int) -> None:
    """Send a webhook's due deliveries in order. When one must wait (a retry's backoff) or more remain, the task
    retries itself after that many seconds (Celery's retry with a countdown, on the queue it came from), so a
    later event never overtakes an earlier one; the attempts themselves are counted on the Delivery rows."""
    again = webhooks.send_due(webhook_id)
    if again is not None:
        raise self.retry(countdown=max(again, 0.0))


@shared_task(name="accounts.tasks.sweep_webhooks", soft_time_limit=60, time_limit=90)
def sweep_webhooks() -> int:
    """Enqueue every webhook with a delivery due (a task lost with a worker is picked up here), and drop finished
    deliveries past their retention."""
    webhooks.prune()
    due = webhooks.due_webhooks()
    for webhook_id in due:
        webhooks.kick(webhook_id)
    return len(due)
