"""The only package that talks to Kubernetes. ``get_backend()`` returns the backend of the cluster configured in
settings; ``backend_for`` the backend of any registered cluster of the fleet (gpus.Cluster), one per process each."""

from __future__ import annotations

import threading
from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from . import metrics  # noqa: F401 - registers the API counters in every process
from .base import ClusterBackend
from .connect import IN_CLUSTER, KUBECONFIG, SIMULATED, Connection, connect


def settings_connection() -> Connection:
    """The connection of the cluster configured in settings: PORTAL_CLUSTER_BACKEND ('simulated' or 'kubernetes'),
    with PORTAL_SIM_* or PORTAL_K8S_IN_CLUSTER / PORTAL_KUBECONFIG / PORTAL_KUBE_CONTEXT."""
    from django.conf import settings  # noqa: PLC0415 - read when first called, after Django is set up

    kind = settings.PORTAL_CLUSTER_BACKEND
    if kind == "simulated":
        return Connection(SIMULATED, sim_state=settings.PORTAL_SIM_STATE, sim_scenario=settings.PORTAL_SIM_SCENARIO)
    if kind == "kubernetes":
        if settings.PORTAL_K8S_IN_CLUSTER:
            return Connection(IN_CLUSTER)
        return Connection(
            KUBECONFIG, kubeconfig=settings.PORTAL_KUBECONFIG or "", context=settings.PORTAL_KUBE_CONTEXT or ""
        )
    raise ImproperlyConfigured(f"PORTAL_CLUSTER_BACKEND must be 'simulated' or 'kubernetes', not {kind!r}.")


@lru_cache(maxsize=1)
def get_backend() -> ClusterBackend:
    """The backend of the cluster configured in settings, built once per process."""
    return _build(settings_connection(), scope="")


_backends: dict[str, tuple[Connection, ClusterBackend]] = {}
_backends_lock = threading.Lock()


def backend_for(name: str, connection: Connection) -> ClusterBackend:
    """The backend of the registered cluster ``name``, built once per process and built again when its connection
    changes (an admin replaced the token or the URL)."""
    with _backends_lock:
        known = _backends.get(name)
        if known is not None and known[0] == connection:
            return known[1]
    backend = _build(connection, scope=name)
    with _backends_lock:
        _backends[name] = (connection, backend)
    return backend


def forget_backend(name: str) -> None:
    """Drop the backend of a cluster that was removed."""
    with _backends_lock:
        _backends.pop(name, None)


def _build(connection: Connection, scope: str) -> ClusterBackend:
    if connection.kind == SIMULATED:
        return connect(connection)
    from django.conf import settings  # noqa: PLC0415

    from .kubernetes_cache import SharedWriteMarks  # noqa: PLC0415 - the kubernetes client is heavy

    return connect(connection, watch_cache=settings.PORTAL_K8S_WATCH_CACHE, write_marks=SharedWriteMarks(scope))
