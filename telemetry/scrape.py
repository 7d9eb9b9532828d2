"""Reading dcgm-exporter, one cluster at a time: each cluster's exporters through its own backend, each sample kept
with its cluster (node names are unique per cluster only).

The cluster configured in settings is scraped by the beat task itself; every registered cluster the inventory has
not found unreachable gets a task of its own (telemetry.tasks.scrape_cluster), so a slow or failing cluster delays
no other. A cluster that cannot be reached now is reported in its own result and nothing is stored for it; the
inventory (gpus.fleet.sync) is what marks it unreachable.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.utils import timezone

from cluster.base import ClusterBackend, ClusterError
from cluster.gpu_metrics import scrape
from gpus.choices import ClusterConnection, ClusterHealth
from gpus.fleet import backend_of
from gpus.models import Cluster
from vocab import dcgm

from . import samples
from .choices import TelemetrySource

log = logging.getLogger(__name__)


@dataclass
class ScrapeResult:
    cluster: str
    stored: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"cluster": self.cluster, "stored": self.stored, "failed": self.failed, "errors": self.errors}


def registered_to_scrape() -> list[str]:
    """The registered clusters whose exporters are read, each in a task of its own: those not found unreachable."""
    return list(
        Cluster.objects.exclude(connection=ClusterConnection.SETTINGS)
        .exclude(health=ClusterHealth.UNREACHABLE)
        .order_by("name")
        .values_list("name", flat=True)
    )


def scrape_cluster(cluster: Cluster, backend: ClusterBackend | None = None) -> ScrapeResult:
    """Read every dcgm-exporter of ``cluster`` once (through ``backend``, its own by default) and store what they
    say as samples of its nodes. Never raises for the cluster's sake: what failed is in the result.

    ``PORTAL_DCGM_URLS`` (exporters named by URL) belongs to the cluster configured in settings; a registered
    cluster's exporters are found as its dcgm-exporter pods."""
    result = ScrapeResult(cluster.name)
    now = timezone.now()
    try:
        backend = backend or backend_of(cluster)
        scrapes = scrape(backend, static_urls=cluster.connection == ClusterConnection.SETTINGS)
    except ClusterError as error:
        result.failed += 1
        result.errors.append(str(error))
        log.warning("dcgm scrape of cluster %s: %s", cluster.name, error)
        return result
    for one in scrapes:
        if one.error:
            result.failed += 1
            log.warning("dcgm-exporter %s (%s/%s): %s", one.url, cluster.name, one.node_name or "?", one.error)
            continue
        try:
            readings = samples.readings_from_dcgm(dcgm.parse_scrape(one.text), now, one.node_name)
        except ValueError as error:
            result.failed += 1
            log.warning("dcgm-exporter %s returned text that is not Prometheus format: %s", one.url, error)
            continue
        result.stored += samples.store(readings, TelemetrySource.DCGM, cluster.pk)
    return result
