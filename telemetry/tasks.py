"""Celery entry points for telemetry: thin wrappers over telemetry.samples and the DCGM scraper."""

import logging

from celery import shared_task
from django.utils import timezone

from cluster import get_backend
from cluster.gpu_metrics import scrape
from vocab import dcgm

from . import samples
from .choices import TelemetrySource

log = logging.getLogger(__name__)


@shared_task(name="telemetry.tasks.scrape_dcgm", soft_time_limit=60, time_limit=90)
def scrape_dcgm() -> dict[str, int]:
    """Read every dcgm-exporter once and store what it says (see telemetry.samples)."""
    now = timezone.now()
    stored = failed = 0
    for result in scrape(get_backend()):
        if result.error:
            failed += 1
            log.warning("dcgm-exporter %s (%s): %s", result.url, result.node_name or "?", result.error)
            continue
        try:
            readings = samples.readings_from_dcgm(dcgm.parse_scrape(result.text), now, result.node_name)
        except ValueError as error:
            failed += 1
            log.warning("dcgm-exporter %s returned text that is not Prometheus format: %s", result.url, error)
            continue
        stored += samples.store(readings, TelemetrySource.DCGM)
    return {"stored": stored, "failed": failed}


@shared_task(name="telemetry.tasks.maintain_telemetry", soft_time_limit=240, time_limit=300)
def maintain_telemetry() -> dict[str, dict[str, int]]:
    """Roll samples up and drop what is past retention (every minute from beat)."""
    return {"rollup": samples.rollup(), "prune": samples.prune()}
