"""Node operations (carving, gpus.nodeconfig; smoke tests, gpus.smoketest) across the fleet: each cluster's run on
that cluster's own backend, so its ConfigMaps, node labels and test pods go where its nodes are.

The cluster configured in settings is advanced by the beat task itself; a registered cluster with operations or
smoke tests in progress gets a task of its own (gpus.tasks.advance_cluster_operations). One that cannot be reached
now keeps its operations where they are (each step is conditional and retried) and reports why; it never holds up
another cluster's.
"""

from __future__ import annotations

import logging

from django.db.models import Q

from cluster.base import ClusterError

from .choices import ACTIVE_CONFIG_STATES, ClusterConnection, SmokeTestState
from .fleet import backend_of
from .models import Cluster
from .nodeconfig import advance_operations
from .smoketest import advance_smoke_tests

log = logging.getLogger(__name__)


def clusters_with_work() -> list[str]:
    """The registered clusters (not the one configured in settings) with a reconfiguration or a smoke test in
    progress on one of their nodes: one query."""
    busy = Q(nodes__config_operations__state__in=ACTIVE_CONFIG_STATES) | Q(
        nodes__smoke_tests__state__in=(SmokeTestState.PENDING, SmokeTestState.RUNNING)
    )
    registered = Cluster.objects.exclude(connection=ClusterConnection.SETTINGS)
    return sorted(set(registered.filter(busy).values_list("name", flat=True)))


def advance_cluster(cluster: Cluster, backend=None) -> dict:
    """Advance the operations and smoke tests of ``cluster`` on its backend (``backend``: its own by default)."""
    try:
        backend = backend or backend_of(cluster)
    except ClusterError as error:
        log.warning("node operations of cluster %s wait: %s", cluster.name, error)
        return {"cluster": cluster.name, "errors": [str(error)]}
    result = advance_operations(backend, cluster=cluster).as_dict()
    result["smoke_tests"] = advance_smoke_tests(backend, cluster)
    return {"cluster": cluster.name, **result}
