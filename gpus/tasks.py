"""Celery entry points for the inventory: thin wrappers over gpus.reconcile."""

import logging

from celery import shared_task

from cluster import get_backend
from core.metrics import RECONCILE_SECONDS

from .nodeconfig import advance_operations
from .reconcile import sync_inventory
from .smoketest import advance_smoke_tests

log = logging.getLogger(__name__)


@shared_task(name="gpus.tasks.reconcile_inventory", soft_time_limit=120, time_limit=180)
def reconcile_inventory() -> dict[str, int]:
    """Read the cluster and update nodes, GPUs, MIG partitions and resource classes."""
    with RECONCILE_SECONDS.time():
        return sync_inventory(get_backend()).as_dict()


@shared_task(name="gpus.tasks.advance_node_config_operations", soft_time_limit=120, time_limit=180)
def advance_node_config_operations() -> dict:
    """Move MIG / time-slicing reconfigurations forward (drain, write, follow the GPU Operator, refresh), and
    start and collect node smoke tests."""
    backend = get_backend()
    result = advance_operations(backend).as_dict()
    result["smoke_tests"] = advance_smoke_tests(backend)
    return result
