"""Celery entry points for the inventory: thin wrappers over gpus.reconcile."""

import logging

from celery import shared_task

from cluster import get_backend

from .reconcile import sync_inventory

log = logging.getLogger(__name__)


@shared_task(name="gpus.tasks.reconcile_inventory", soft_time_limit=120, time_limit=180)
def reconcile_inventory() -> dict[str, int]:
    """Read the cluster and update nodes, GPUs, MIG partitions and resource classes."""
    return sync_inventory(get_backend()).as_dict()


@shared_task(name="gpus.tasks.scrape_dcgm", soft_time_limit=60, time_limit=90)
def scrape_dcgm() -> dict[str, int]:
    """Read every dcgm-exporter once and store what it says (see gpus.telemetry)."""
    from django.utils import timezone

    from cluster.gpu_metrics import scrape
    from vocab import dcgm

    from . import telemetry
    from .models import TelemetrySource

    now = timezone.now()
    stored = failed = 0
    for result in scrape(get_backend()):
        if result.error:
            failed += 1
            log.warning("dcgm-exporter %s (%s): %s", result.url, result.node_name or "?", result.error)
            continue
        try:
            readings = telemetry.readings_from_dcgm(dcgm.parse_scrape(result.text), now, result.node_name)
        except ValueError as error:
            failed += 1
            log.warning("dcgm-exporter %s returned text that is not Prometheus format: %s", result.url, error)
            continue
        stored += telemetry.store(readings, TelemetrySource.DCGM)
    return {"stored": stored, "failed": failed}


@shared_task(name="gpus.tasks.maintain_telemetry", soft_time_limit=240, time_limit=300)
def maintain_telemetry() -> dict[str, dict[str, int]]:
    """Roll samples up, drop what is past retention, and flag idle jobs (every minute from beat)."""
    from jobs.idle import detect_idle

    from . import telemetry

    return {"rollup": telemetry.rollup(), "prune": telemetry.prune(), "idle": detect_idle()}


@shared_task(name="gpus.tasks.advance_node_config_operations", soft_time_limit=120, time_limit=180)
def advance_node_config_operations() -> dict:
    """Move MIG / time-slicing reconfigurations forward (drain, write, follow the GPU Operator, refresh)."""
    from .nodeconfig import advance_operations

    return advance_operations(get_backend()).as_dict()
