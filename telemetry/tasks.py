"""Celery entry points for telemetry: thin wrappers over telemetry.samples and telemetry.scrape."""

import logging

from celery import shared_task
from django.conf import settings

from cluster import get_backend
from gpus import fleet
from gpus.models import Cluster, settings_cluster_pk

from . import samples, scrape

log = logging.getLogger(__name__)


@shared_task(name="telemetry.tasks.scrape_dcgm", soft_time_limit=60, time_limit=90)
def scrape_dcgm() -> dict:
    """Read every dcgm-exporter of the cluster configured in settings once and store what they say; start a scrape
    of every registered cluster that can be reached as a task of its own, so a slow one delays no other."""
    for name in scrape.registered_to_scrape():
        try:
            scrape_cluster.apply_async((name,), expires=settings.PORTAL_DCGM_SCRAPE_INTERVAL)
        except Exception:  # a broker outage must not stop this cluster's scrape; the next beat tries again
            log.warning("could not queue the dcgm scrape of cluster %s", name, exc_info=True)
    result = scrape.scrape_cluster(Cluster.objects.get(pk=settings_cluster_pk()), get_backend())
    return {"stored": result.stored, "failed": result.failed}


@shared_task(name="telemetry.tasks.scrape_cluster", soft_time_limit=60, time_limit=90)
def scrape_cluster(name: str) -> dict:
    """One dcgm scrape of the registered cluster ``name`` (skipped while another scrape of it runs)."""
    return fleet.one_pass("scrape-cluster", name, 90, lambda cluster: scrape.scrape_cluster(cluster).as_dict())


@shared_task(name="telemetry.tasks.maintain_telemetry", soft_time_limit=240, time_limit=300)
def maintain_telemetry() -> dict[str, dict[str, int]]:
    """Roll samples up and drop what is past retention (every minute from beat)."""
    return {"rollup": samples.rollup(), "prune": samples.prune()}
