"""The Celery application. Tasks live in each app's tasks.py as thin wrappers over plain functions."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
# Prometheus multiprocess mode writes a file per process there from the first metric on (portal.exposition).
if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    os.makedirs(os.environ["PROMETHEUS_MULTIPROC_DIR"], exist_ok=True)

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

from .exposition import install_celery_hooks  # noqa: E402 - the app must exist first

install_celery_hooks(app)
