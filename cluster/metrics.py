"""The cluster package's metrics for Prometheus: Kubernetes API calls retried and given up (cluster.kubernetes), and
the watch caches' relists and watch restarts (cluster.informer).

Defined apart from the Kubernetes backend, and imported by the package, so every process exports them (at zero
with the simulated cluster) and dashboards and alerts find them whichever backend is configured.
"""

from __future__ import annotations

from prometheus_client import Counter

API_RETRIES = Counter(
    "gpuportal_kubernetes_api_retries_total",
    "Kubernetes API calls retried, by reason (server_error, throttled, timeout, connection).",
    ["reason"],
)
API_FAILURES = Counter(
    "gpuportal_kubernetes_api_failures_total",
    "Kubernetes API calls given up after their retries, or with the retry budget spent.",
)
for _reason in ("server_error", "throttled", "timeout", "connection"):
    API_RETRIES.labels(reason=_reason)
WATCH_CACHE_RELISTS = Counter(
    "gpuportal_kubernetes_watch_cache_relists_total",
    "Full lists made by the Kubernetes backend's watch caches, by resource and reason (initial: the first read in a "
    "process; expired: the watch's resourceVersion was gone, 410; stale: the watch was down too long; behind: the "
    "watch had not reached this process's own last write in time).",
    ["resource", "reason"],
)
WATCH_RESTARTS = Counter(
    "gpuportal_kubernetes_watch_restarts_total",
    "Watches of the Kubernetes backend's caches begun again, by resource and reason (ended: the server's timeout, "
    "the normal case; expired: 410 Gone; error: a failure, retried with backoff).",
    ["resource", "reason"],
)
for _resource in ("nodes", "pods", "pods-managed", "jobs"):
    for _reason in ("initial", "expired", "stale", "behind"):
        WATCH_CACHE_RELISTS.labels(resource=_resource, reason=_reason)
    for _reason in ("ended", "expired", "error"):
        WATCH_RESTARTS.labels(resource=_resource, reason=_reason)
