"""The cluster package's metrics for Prometheus: Kubernetes API calls retried and given up (cluster.kubernetes).

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
