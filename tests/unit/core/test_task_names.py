"""The webhook tasks moved from accounts.tasks to core.tasks under their old names: a message queued before the
move, and beat's schedule, still reach them."""

from django.conf import settings

from core import tasks, webhooks
from portal.celery import app


def test_the_webhook_tasks_keep_the_names_they_had_in_accounts():
    assert tasks.deliver_webhook.name == webhooks.DELIVER_TASK == "accounts.tasks.deliver_webhook"
    assert tasks.sweep_webhooks.name == "accounts.tasks.sweep_webhooks"
    for name in ("accounts.tasks.deliver_webhook", "accounts.tasks.sweep_webhooks"):
        assert app.tasks[name].run.__module__ == "core.tasks"  # the worker runs core's code under the old name


def test_every_task_beat_schedules_is_registered():
    app.loader.import_default_modules()  # what a worker and beat do at start: import every app's tasks module
    missing = [entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values() if entry["task"] not in app.tasks]
    assert not missing
