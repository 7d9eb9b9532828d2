"""Reaching a cluster of the fleet: how a connection is described, building its backend, and discovering what the
cluster offers.

A ``Connection`` is plain data (the gpus app stores it per registered cluster, with the token sealed); ``connect``
turns one into a ``ClusterBackend``; ``discover`` asks the API server what it serves and says, in a sentence, what
is wrong when it cannot (unreachable, a certificate the CA does not sign, a token that is missing or refused).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vocab.dra import (
    COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS,
    COMPUTE_DOMAIN_DAEMON_DEVICE_CLASS,
    GPU_DEVICE_CLASS,
    MIG_DEVICE_CLASS,
    RESOURCE_API_VERSION,
    VFIO_DEVICE_CLASS,
)

from .base import ClusterBackend, ClusterError, forms_for

SIMULATED = "simulated"
IN_CLUSTER = "in_cluster"
KUBECONFIG = "kubeconfig"
TOKEN = "token"
KINDS = (SIMULATED, IN_CLUSTER, KUBECONFIG, TOKEN)

#: The API group the GPU Operator's ClusterPolicy is served under (NVIDIA/gpu-operator, api/nvidia/v1).
GPU_OPERATOR_GROUP = "nvidia.com"
#: Dynamic Resource Allocation (resource.k8s.io; stable v1 from Kubernetes 1.34).
DRA_GROUP = "resource.k8s.io"
#: The device classes of NVIDIA's DRA driver discovery looks for (its Helm chart installs them; vocab.dra).
NVIDIA_DEVICE_CLASSES = (
    GPU_DEVICE_CLASS,
    MIG_DEVICE_CLASS,
    VFIO_DEVICE_CLASS,
    COMPUTE_DOMAIN_CHANNEL_DEVICE_CLASS,
    COMPUTE_DOMAIN_DAEMON_DEVICE_CLASS,
)
#: Seconds a registration probe waits for the API server before calling it unreachable.
PROBE_TIMEOUT_SECONDS = 5.0


@dataclass(frozen=True)
class Connection:
    """How to reach one cluster. ``token`` is clear text and lives only in memory."""

    kind: str
    sim_state: str = ""
    sim_scenario: str = ""
    kubeconfig: str = ""
    context: str = ""
    server: str = ""
    ca_certificate: str = ""
    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class Capabilities:
    """What discovery found: the server's version, the workload forms it accepts, and what is installed."""

    server_version: str
    indexed_jobs: bool
    metrics_apis: tuple[str, ...]
    gpu_operator: bool
    #: Whether resource.k8s.io is served at all, and which group-versions, newest first ("resource.k8s.io/v1").
    dra: bool
    dra_versions: tuple[str, ...] = ()
    #: NVIDIA's device classes that exist on the cluster (NVIDIA_DEVICE_CLASSES order): its DRA driver is installed.
    dra_device_classes: tuple[str, ...] = ()

    @property
    def dra_v1(self) -> bool:
        """Whether the portal can use DRA here: it reads and renders resource.k8s.io/v1 only (Kubernetes 1.34+)."""
        return RESOURCE_API_VERSION in self.dra_versions

    def as_dict(self) -> dict[str, Any]:
        return {
            "server_version": self.server_version,
            "indexed_jobs": self.indexed_jobs,
            "metrics_apis": list(self.metrics_apis),
            "gpu_operator": self.gpu_operator,
            "dra": self.dra,
            "dra_versions": list(self.dra_versions),
            "dra_v1": self.dra_v1,
            "dra_device_classes": list(self.dra_device_classes),
        }


def connect(connection: Connection, *, probe: bool = False, **options: Any) -> ClusterBackend:
    """The backend for ``connection``. ``probe`` builds one for a registration check: no retries and a short
    timeout, so a wrong address fails in seconds. ``options`` go to KubernetesBackend (watch_cache, write_marks)."""
    if connection.kind == SIMULATED:
        from .sim import SimulatedCluster  # noqa: PLC0415 - load only the backend in use

        return SimulatedCluster(connection.sim_state or None, scenario=connection.sim_scenario or None)
    from .kubernetes import KubernetesBackend  # noqa: PLC0415 - the kubernetes client is heavy

    if probe:
        options.update(retries=0, request_timeout=PROBE_TIMEOUT_SECONDS)
    if connection.kind == IN_CLUSTER:
        return KubernetesBackend.in_cluster(**options)
    if connection.kind == KUBECONFIG:
        return KubernetesBackend.from_kubeconfig(connection.kubeconfig or None, connection.context or None, **options)
    if connection.kind == TOKEN:
        return KubernetesBackend.from_token(
            connection.server, connection.ca_certificate, connection.token, probe=probe, **options
        )
    raise ClusterError(f"Unknown connection kind {connection.kind!r}; use one of {', '.join(KINDS)}.")


def discover(backend: ClusterBackend) -> Capabilities:
    """Ask the cluster what it serves. Raises ClusterError with a plain sentence (``explain``) when it cannot."""
    try:
        version = backend.server_version()
        groups = backend.api_groups()
        dra_versions = tuple(backend.resource_api_versions()) if DRA_GROUP in groups else ()
        # Listed only where v1 is served (the lists answer [] elsewhere): which of NVIDIA's classes exist.
        classes = {c["metadata"]["name"] for c in backend.list_device_classes()} if dra_versions else set()
    except ClusterError as error:
        raise ClusterError(explain(str(error))) from error
    metrics = tuple(sorted(group for group in groups if group.endswith("metrics.k8s.io")))
    return Capabilities(
        server_version=version,
        indexed_jobs=forms_for(version).indexed_jobs,
        metrics_apis=metrics,
        gpu_operator=GPU_OPERATOR_GROUP in groups,
        dra=DRA_GROUP in groups,
        dra_versions=dra_versions,
        dra_device_classes=tuple(name for name in NVIDIA_DEVICE_CLASSES if name in classes),
    )


#: The words of a failure to reach the API server at all (refused, timed out, a name that does not resolve).
UNREACHABLE_WORDS = ("connection refused", "timed out", "timeout", "name or service", "resolve")


def failure_kind(problem: str) -> str:
    """What a cluster call's failure is: "certificate" (TLS verification failed), "unauthorised" (HTTP 401),
    "forbidden" (HTTP 403), "unreachable", "unusable ca" (any other certificate trouble: the CA given could not be
    used at all, e.g. no certificate in its PEM), or "" when it is none of these. The status is read as "HTTP 401"
    in the text, so a URL or port that contains the digits (https://10.0.0.1:40137) is not taken for it."""
    text = problem.lower()
    if "certificate_verify_failed" in text or "certificate verify failed" in text:
        return "certificate"
    if "http 401" in text:
        return "unauthorised"
    if "http 403" in text:
        return "forbidden"
    if any(word in text for word in UNREACHABLE_WORDS):
        return "unreachable"
    if "certificate" in text:
        return "unusable ca"
    return ""


#: The field of a cluster's registration an admin fixes for each kind of failure (``failure_kind``).
FIELD_TO_FIX = {
    "certificate": "ca_certificate",
    "unusable ca": "ca_certificate",
    "unauthorised": "token",
    "forbidden": "token",
    "unreachable": "server",
}


def explain(problem: str) -> str:
    """A cluster call's failure as the one thing an admin should fix."""
    kind = failure_kind(problem)
    if kind == "certificate":
        return (
            "The API server's certificate is not signed by the CA certificate given (TLS verification failed); "
            f"paste the cluster's CA (the kubeconfig's certificate-authority-data, decoded). [{problem}]"
        )
    if kind == "unauthorised":
        return f"The API server rejected the token (HTTP 401): check that it is current and complete. [{problem}]"
    if kind == "forbidden":
        return (
            "The token is valid but may not read the cluster (HTTP 403): bind it to the portal's ClusterRole "
            f"(deploy/10-rbac.yaml). [{problem}]"
        )
    if kind == "unreachable":
        return f"The API server cannot be reached: check the URL and that this portal's network reaches it. [{problem}]"
    return problem
