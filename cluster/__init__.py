"""The only package that talks to Kubernetes. ``get_backend()`` returns the configured ClusterBackend."""

from __future__ import annotations

from functools import lru_cache

from django.core.exceptions import ImproperlyConfigured

from . import metrics  # noqa: F401 - registers the API counters in every process
from .base import ClusterBackend


@lru_cache(maxsize=1)
def get_backend() -> ClusterBackend:
    """The backend chosen by settings.PORTAL_CLUSTER_BACKEND ('simulated' or 'kubernetes'), built once per process."""
    from django.conf import settings  # noqa: PLC0415 - read when first called, after Django is set up

    kind = settings.PORTAL_CLUSTER_BACKEND
    if kind == "simulated":
        from .sim import SimulatedCluster  # noqa: PLC0415 - start-up cost: load only the backend in use

        return SimulatedCluster(settings.PORTAL_SIM_STATE, scenario=settings.PORTAL_SIM_SCENARIO)
    if kind == "kubernetes":
        from .kubernetes import KubernetesBackend  # noqa: PLC0415 - start-up cost: the kubernetes client is heavy
        from .kubernetes_cache import SharedWriteMarks  # noqa: PLC0415

        options = {"watch_cache": settings.PORTAL_K8S_WATCH_CACHE, "write_marks": SharedWriteMarks()}
        if settings.PORTAL_K8S_IN_CLUSTER:
            return KubernetesBackend.in_cluster(**options)
        return KubernetesBackend.from_kubeconfig(settings.PORTAL_KUBECONFIG, settings.PORTAL_KUBE_CONTEXT, **options)
    raise ImproperlyConfigured(f"PORTAL_CLUSTER_BACKEND must be 'simulated' or 'kubernetes', not {kind!r}.")
