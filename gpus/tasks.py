"""Celery entry points for the inventory: thin wrappers over gpus.reconcile."""

import logging

from celery import shared_task
from django.conf import settings

from cluster import get_backend
from core.metrics import RECONCILE_SECONDS

from . import fleet, nodeops
from .choices import ClusterConnection
from .models import Cluster, settings_cluster_pk
from .nodeconfig import advance_operations
from .smoketest import advance_smoke_tests

log = logging.getLogger(__name__)


@shared_task(name="gpus.tasks.reconcile_inventory", soft_time_limit=120, time_limit=180)
def reconcile_inventory() -> dict[str, int]:
    """Read the cluster configured in settings and update its nodes, GPUs, MIG partitions and the resource classes;
    start a pass of every registered cluster as a task of its own, so a slow or unreachable one stalls no other."""
    for name in Cluster.objects.exclude(connection=ClusterConnection.SETTINGS).values_list("name", flat=True):
        sync_cluster.apply_async((name,), expires=settings.PORTAL_RECONCILE_INTERVAL)
    with RECONCILE_SECONDS.time():
        result = fleet.sync(Cluster.objects.get(pk=settings_cluster_pk()))
    return result.as_dict() if result is not None else {"unreachable": 1}


@shared_task(name="gpus.tasks.sync_cluster", soft_time_limit=120, time_limit=180)
def sync_cluster(name: str) -> dict[str, int]:
    """One inventory pass of the registered cluster ``name`` (skipped while another pass of it runs)."""

    def sync(cluster: Cluster) -> dict:
        with RECONCILE_SECONDS.time():
            result = fleet.sync(cluster)
        return result.as_dict() if result is not None else {"unreachable": 1}

    return fleet.one_pass("sync-cluster", name, 180, sync)


@shared_task(name="gpus.tasks.advance_node_config_operations", soft_time_limit=120, time_limit=180)
def advance_node_config_operations() -> dict:
    """Move MIG / time-slicing reconfigurations forward (drain, write, follow the GPU Operator, refresh), and
    start and collect node smoke tests, on the cluster configured in settings; each registered cluster with such
    work in progress gets a task of its own, run against its own backend, so an unreachable one stalls no other."""
    for name in nodeops.clusters_with_work():
        try:
            advance_cluster_operations.apply_async((name,), expires=settings.PORTAL_NODE_CONFIG_INTERVAL)
        except Exception:  # a broker outage must not stop this cluster's operations; beat tries again
            log.warning("could not queue the node operations of cluster %s", name, exc_info=True)
    backend = get_backend()
    result = advance_operations(backend).as_dict()
    result["smoke_tests"] = advance_smoke_tests(backend)
    return result


@shared_task(name="gpus.tasks.advance_cluster_operations", soft_time_limit=120, time_limit=180)
def advance_cluster_operations(name: str) -> dict:
    """The node operations and smoke tests in progress on the registered cluster ``name``, on its backend."""
    return fleet.one_pass("node-operations", name, 180, nodeops.advance_cluster)
