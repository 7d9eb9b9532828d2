"""Celery entry points for jobs: one cycle reconciles jobs with the cluster, admits and places queued work,
and creates the workloads. Safe to run concurrently (the admission step is serialised by the admission lock).

Thin wrappers: nothing below imports this module (a kick sends the task by name, jobs.kick)."""

from __future__ import annotations

import logging

from celery import shared_task
from django.conf import settings

from cluster import get_backend
from cluster.base import ClusterError
from gpus import fleet
from jobs import idle, kick, logkeeping
from jobs.cycle import metrics as cycle_metrics
from jobs.cycle import run as cycle
from jobs.notebook import sessions as notebooks
from jobs.storage import presence, volumes

log = logging.getLogger(__name__)


@shared_task(name="jobs.tasks.run_cycle", ignore_result=True)
def run_cycle() -> dict:
    """One job cycle of the cluster configured in settings, with the fleet-wide admission; then each registered
    cluster the inventory can reach gets its cluster-facing passes as a task of its own (``cycle_cluster``), which
    follow its jobs and launch what admission just placed there, so a slow or unreachable one stalls no other."""
    kick.cycle_starting()  # before the cycle reads anything: a change committed after this kicks again
    result = cycle_metrics.run_observed_cycle(get_backend(), fleet=[]).as_dict()
    for name in fleet.reachable_names():
        try:
            cycle_cluster.apply_async((name,), expires=settings.PORTAL_JOB_CYCLE_INTERVAL)
        except Exception:  # a broker outage must not fail the cycle that already ran; the next cycle sends again
            log.warning("could not queue the job cycle of cluster %s", name, exc_info=True)
    return result


@shared_task(name="jobs.tasks.cycle_cluster", ignore_result=True, soft_time_limit=120, time_limit=180)
def cycle_cluster(name: str) -> dict:
    """The job cycle's passes of the registered cluster ``name`` (skipped while another pass of it runs)."""

    def passes(cluster) -> dict:
        try:
            backend = fleet.backend_of(cluster)
        except ClusterError as error:  # its connection cannot even be built (a kubeconfig gone)
            log.warning("cluster %s skipped by the job cycle: %s", cluster.name, error)
            return {"errors": 1}
        return cycle.cluster_cycle(cluster, backend).as_dict()

    return fleet.one_pass("job-cycle", name, 180, passes)


@shared_task(name="jobs.tasks.cull_notebooks", ignore_result=True, soft_time_limit=50, time_limit=90)
def cull_notebooks() -> dict:
    """Warn owners and stop notebooks past their maximum age or idle timeout (jobs.notebook.culling has the rule)."""
    return notebooks.cull_notebooks(get_backend())


@shared_task(name="jobs.tasks.detect_idle", ignore_result=True, soft_time_limit=50, time_limit=90)
def detect_idle() -> dict:
    """Flag running jobs whose GPUs sat idle through the window, and tell their owners (jobs.idle has the rule)."""
    return idle.detect_idle()


@shared_task(name="jobs.tasks.reconcile_volumes", ignore_result=True, soft_time_limit=50, time_limit=90)
def reconcile_volumes() -> dict:
    """Publish datasets to their teams and refresh the team volume inventory of the cluster configured in settings
    (jobs.storage.volumes has the rule); start a presence pass of every registered cluster as a task of its own
    (secrets, registry credentials, datasets and volumes there: jobs.storage.presence), so a slow or unreachable
    one stalls no other."""
    for cluster in presence.registered():
        sync_presence.apply_async((cluster.name,), expires=settings.PORTAL_VOLUME_RECONCILE_INTERVAL)
    return volumes.reconcile_volumes(get_backend())


@shared_task(name="jobs.tasks.sync_presence", ignore_result=True, soft_time_limit=100, time_limit=150)
def sync_presence(name: str) -> dict:
    """One presence pass of the registered cluster ``name`` (skipped while another pass of it runs)."""
    return fleet.one_pass("sync-presence", name, 150, lambda cluster: presence.sync(cluster).as_dict())


@shared_task(name="jobs.tasks.expire_logs", ignore_result=True, soft_time_limit=300, time_limit=360)
def expire_logs() -> int:
    """Delete kept logs older than PORTAL_LOG_RETENTION_DAYS (jobs.logkeeping.expire)."""
    return logkeeping.expire()
