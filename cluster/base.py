"""The contract between the portal and a Kubernetes cluster.

Everything the portal reads from or writes to a cluster goes through a ``ClusterBackend``. Objects cross
this boundary as plain dicts in the Kubernetes JSON shape (camelCase keys, exactly what
``kubectl get -o json`` prints), so parsing, reconcile and rendering code behave identically whether the
objects came from a real kube-apiserver or from the embedded ``SimulatedCluster``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

# MANAGED_BY_LABEL (app.kubernetes.io/managed-by) is put on everything the portal creates; workloads are listed
# with this selector. Re-exported from vocab.names, where it is spelled.
from vocab.names import MANAGED_BY_LABEL as MANAGED_BY_LABEL
from vocab.names import OPAQUE_SECRET_TYPE

MANAGED_BY_VALUE = "gpu-portal"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"

KubeObject = dict[str, Any]

#: The HorizontalPodAutoscaler API versions: autoscaling/v2 is served from Kubernetes 1.23, v2beta2 up to 1.25.
AUTOSCALING_V2 = "autoscaling/v2"
AUTOSCALING_V2BETA2 = "autoscaling/v2beta2"
#: The Ingress API version the portal renders: networking.k8s.io/v1, served from Kubernetes 1.19.
NETWORKING_V1 = "networking.k8s.io/v1"
#: The metrics API groups an HPA reads: resource metrics (metrics-server: CPU), per-pod custom metrics and external
#: metrics (an adapter such as prometheus-adapter). A cluster serves those it has an APIService for.
RESOURCE_METRICS_API = "metrics.k8s.io"
CUSTOM_METRICS_API = "custom.metrics.k8s.io"
EXTERNAL_METRICS_API = "external.metrics.k8s.io"
METRICS_APIS = (RESOURCE_METRICS_API, CUSTOM_METRICS_API, EXTERNAL_METRICS_API)


class ClusterError(Exception):
    """A cluster call failed in a way the caller should report (not a programming error)."""


class NotFound(ClusterError):
    """The object does not exist (HTTP 404)."""


class Conflict(ClusterError):
    """The object already exists or was changed concurrently (HTTP 409)."""


class Invalid(ClusterError):
    """The cluster refused the object as invalid (HTTP 422)."""


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED | MODIFIED | DELETED | BOOKMARK
    object: KubeObject


@dataclass(frozen=True)
class WorkloadForms:
    """Which workload shapes the cluster's API server accepts; the one home of that decision is ``forms_for``."""

    server_version: tuple[int, int]
    #: batch/v1 Jobs with completionMode Indexed (GA in Kubernetes 1.24; older servers drop the field silently,
    #: so a gang rendered that way would run W identical, unnumbered pods).
    indexed_jobs: bool


#: The first Kubernetes minor version whose Indexed Jobs are on by default and stable.
INDEXED_JOBS_SINCE = (1, 24)


def parse_server_version(text: str) -> tuple[int, int]:
    """ "v1.20.2" / "v1.29.3-gke.100" / ("1", "27+") → (1, 20); (0, 0) for what cannot be read."""
    head = str(text or "").lstrip("v").split("-", 1)[0].split(".")
    try:
        return int(head[0]), int("".join(ch for ch in head[1] if ch.isdigit()))
    except (IndexError, ValueError):
        return (0, 0)


def forms_for(version: str) -> WorkloadForms:
    """What a server of ``version`` (its gitVersion) supports."""
    parsed = parse_server_version(version)
    return WorkloadForms(server_version=parsed, indexed_jobs=parsed >= INDEXED_JOBS_SINCE)


@runtime_checkable
class ClusterBackend(Protocol):
    """What the portal needs from a cluster. Implementations: KubernetesBackend, SimulatedCluster."""

    name: str

    # Nodes --------------------------------------------------------------------------------------
    def list_nodes(self, label_selector: str | None = None) -> tuple[list[KubeObject], str]:
        """All nodes (labels, taints, capacity, allocatable, conditions) and the list resourceVersion."""

    def get_node(self, name: str) -> KubeObject:
        """One node; raises NotFound."""

    def watch_nodes(self, resource_version: str | None = None, timeout_seconds: int = 30) -> Iterator[WatchEvent]:
        """Node changes after ``resource_version`` until the timeout elapses."""

    def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> KubeObject:
        """Set (str) or remove (None) node labels; returns the patched node."""

    # Workloads ----------------------------------------------------------------------------------
    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> KubeObject:
        """Create the namespace if missing (idempotent)."""

    def list_workloads(self, namespace: str | None = None) -> list[KubeObject]:
        """batch/v1 Jobs carrying the portal's managed-by label, in one namespace or all."""

    def list_pods(
        self, namespace: str | None = None, label_selector: str | None = MANAGED_SELECTOR
    ) -> list[KubeObject]:
        """Pods (by default only the portal's), with spec.nodeName and status."""

    def create_workload(self, manifest: KubeObject) -> KubeObject:
        """Create a batch/v1 Job. Idempotent: an existing Job of the same name is returned, not duplicated."""

    def delete_workload(self, namespace: str, name: str) -> bool:
        """Delete a Job and its pods in the background; False if it was already gone."""

    def workload_exists(self, namespace: str, name: str) -> bool:
        """Whether the Job exists, asked of the cluster itself and never of a cache: the one absence the portal
        acts on destructively (a job whose workload vanished is ended as lost) is confirmed here first."""

    def server_version(self) -> str:
        """The API server's gitVersion ("v1.20.2"), read once and cached; ``forms_for`` says what it supports."""

    # Notebook objects ---------------------------------------------------------------------------
    def ensure_pvc(self, manifest: KubeObject) -> KubeObject:
        """Create a v1 PersistentVolumeClaim unless one of that name exists (then return it unchanged)."""

    def delete_pvc(self, namespace: str, name: str) -> bool:
        """Delete a PersistentVolumeClaim; False if it was already gone."""

    # Volumes: claims and PersistentVolumes -------------------------------------------------------
    def list_pvcs(self, namespace: str | None = None) -> list[KubeObject]:
        """Every PersistentVolumeClaim (whoever made it) in one namespace or all, with status.phase,
        status.capacity, status.accessModes, spec.storageClassName and spec.volumeName."""

    def ensure_pv(self, manifest: KubeObject) -> KubeObject:
        """Create a cluster-scoped v1 PersistentVolume unless one of that name exists (then return it unchanged)."""

    def list_pvs(self, label_selector: str | None = None) -> list[KubeObject]:
        """PersistentVolumes (cluster-scoped), optionally by label, with status.phase and spec.claimRef."""

    def delete_pv(self, name: str) -> bool:
        """Delete a PersistentVolume; False if it was already gone."""

    def ensure_service(self, manifest: KubeObject) -> KubeObject:
        """Create a v1 Service unless one of that name exists (then return it unchanged)."""

    def delete_service(self, namespace: str, name: str) -> bool:
        """Delete a Service; False if it was already gone."""

    def notebook_kernels(self, namespace: str, service: str, pod_name: str) -> list[dict] | None:
        """Jupyter's /api/kernels for the notebook behind ``service`` ([{"execution_state", "last_activity"}]),
        or None when the cluster cannot tell (the caller then judges idleness by GPU utilisation alone)."""

    def workspace_health(self, namespace: str, service: str, pod_name: str) -> dict | None:
        """code-server's /healthz for the workspace behind ``service`` ({"status": "alive" | "expired",
        "lastHeartbeat": milliseconds since the epoch}), or None when the cluster cannot tell."""

    # ConfigMaps ---------------------------------------------------------------------------------
    def get_config_map(self, namespace: str, name: str) -> KubeObject:
        """One ConfigMap; raises NotFound."""

    def apply_config_map(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None
    ) -> KubeObject:
        """Create or replace a ConfigMap's data (create on 404, retry on 409)."""

    # Secrets ------------------------------------------------------------------------------------
    # Values go in and never come out: every Secret these calls return is *redacted*, its ``data`` mapping each key
    # to "" (what ``kubectl describe secret`` shows of it: names, not values). ``stringData`` never appears.
    def apply_secret(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        secret_type: str = OPAQUE_SECRET_TYPE,
        labels: dict[str, str] | None = None,
        owners: list[dict[str, Any]] | None = None,
    ) -> KubeObject:
        """Create the Secret, or replace its data (and type-preserving labels) when it exists; ``data`` holds
        plain-text values (the backend base64-encodes them). ``owners``: its ownerReferences (the garbage collector
        deletes it once every owner is gone); None keeps what it has. Returns the Secret redacted."""

    def get_secret(self, namespace: str, name: str) -> KubeObject:
        """One Secret, redacted (its keys, no values); raises NotFound."""

    def list_secrets(self, namespace: str, label_selector: str | None = MANAGED_SELECTOR) -> list[KubeObject]:
        """The namespace's Secrets (by default only the portal's), redacted."""

    def secret_values(self, namespace: str, name: str) -> tuple[str, dict[str, str]]:
        """The Secret's type and plain-text values, for one use only: copying a team's Secret to another cluster of
        the fleet (jobs.teams.presence), where the values go straight into ``apply_secret`` and are never kept.
        Raises NotFound."""

    def delete_secret(self, namespace: str, name: str) -> bool:
        """Delete a Secret; False if it was already gone."""

    # Services: Deployments, ReplicaSets, HorizontalPodAutoscalers (cluster/kubernetes_apps.py, sim/apps_api.py) ---
    def apply_deployment(self, manifest: KubeObject) -> KubeObject:
        """Create the apps/v1 Deployment, or replace its labels, annotations and spec when it exists (the selector is
        immutable); returns it as stored. The deployment controller rolls out a changed template."""

    def get_deployment(self, namespace: str, name: str) -> KubeObject:
        """One Deployment with its status (replicas, updated/ready/available, conditions); raises NotFound."""

    def list_deployments(
        self, namespace: str | None = None, label_selector: str | None = MANAGED_SELECTOR
    ) -> list[KubeObject]:
        """Deployments (by default only the portal's), in one namespace or all."""

    def delete_deployment(self, namespace: str, name: str) -> bool:
        """Delete a Deployment, its ReplicaSets and pods (background propagation); False if it was already gone."""

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> KubeObject:
        """Set spec.replicas (the scale subresource's effect); returns the Deployment."""

    def set_deployment_paused(self, namespace: str, name: str, paused: bool) -> KubeObject:
        """Pause (no rollouts; scaling still applies) or resume a Deployment; returns it."""

    def rollback_deployment(self, namespace: str, name: str, to_revision: int = 0) -> KubeObject:
        """``kubectl rollout undo``: copy the template of ``to_revision`` (0: the revision before the current one)
        from its ReplicaSet into the Deployment, pod-template-hash removed. Raises NotFound when there is none."""

    def list_replica_sets(self, namespace: str, deployment_name: str) -> list[KubeObject]:
        """The ReplicaSets the Deployment owns, oldest revision first (annotation deployment.kubernetes.io/revision)."""

    def autoscaling_api(self) -> str:
        """The HPA API version to render for: AUTOSCALING_V2 when the server serves it (>= 1.23), else
        AUTOSCALING_V2BETA2 (found through the server's API group versions, and remembered)."""

    def metrics_apis(self) -> frozenset[str]:
        """Which of METRICS_APIS the server serves (API discovery, remembered for a few minutes): without one, an
        HPA on that kind of metric never scales."""

    def api_groups(self) -> frozenset[str]:
        """The named API groups the server serves (API discovery, remembered like ``metrics_apis``): what the
        portal reads a cluster's capabilities from (cluster.connect.discover)."""

    # Dynamic Resource Allocation (resource.k8s.io/v1; cluster/kubernetes_dra.py, sim/dra_api.py) -------------
    # Reads only. A cluster that does not serve resource.k8s.io/v1 answers [] to each list, and says so through
    # ``resource_api_versions`` (empty), so "not served" and "served, nothing published" are told apart there.
    def resource_api_versions(self) -> list[str]:
        """The ``resource.k8s.io`` group-versions the server serves, newest first ("resource.k8s.io/v1", ...);
        empty when it serves none (API discovery, remembered like ``metrics_apis``)."""

    def list_device_classes(self) -> list[KubeObject]:
        """Every DeviceClass (cluster-scoped); [] when resource.k8s.io/v1 is not served."""

    def list_resource_slices(self, node_name: str | None = None, driver: str | None = None) -> list[KubeObject]:
        """The ResourceSlices the DRA drivers published, optionally only one node's or one driver's (the field
        selectors ``spec.nodeName`` and ``spec.driver``); [] when resource.k8s.io/v1 is not served."""

    def list_resource_claims(self, namespace: str | None = None) -> list[KubeObject]:
        """ResourceClaims (whoever made them) in one namespace or all, with ``status.allocation`` (which devices
        are allocated) and ``status.reservedFor``; [] when resource.k8s.io/v1 is not served."""

    # What a workload claims its devices from (jobs.dra_claims), in the team's namespace only. Their specs are
    # immutable, so "apply" creates the object unless one of that name exists, and then returns it unchanged.
    def apply_resource_claim_template(self, manifest: KubeObject) -> KubeObject:
        """Create a ``resource.k8s.io/v1`` ResourceClaimTemplate in its namespace unless one of that name exists
        (then return it unchanged); NotFound when the server does not serve resource.k8s.io/v1."""

    def delete_resource_claim_template(self, namespace: str, name: str) -> bool:
        """Delete a ResourceClaimTemplate; False if it was already gone or the server does not serve the kind. The
        claims made from it stay with their pods."""

    def apply_resource_claim(self, manifest: KubeObject) -> KubeObject:
        """Create a ``resource.k8s.io/v1`` ResourceClaim the portal makes for pods to share (jobs.dra_claims) unless
        one of that name exists (then return it unchanged); NotFound when the server does not serve
        resource.k8s.io/v1."""

    def delete_resource_claim(self, namespace: str, name: str) -> bool:
        """Delete a ResourceClaim; False if it was already gone or the server does not serve the kind. One still
        reserved for a pod is removed by the API server once no pod holds it (its finalizer)."""

    def apply_compute_domain(self, manifest: KubeObject) -> KubeObject:
        """Create NVIDIA's ``resource.nvidia.com/v1beta1`` ComputeDomain in its namespace unless one of that name
        exists (then return it unchanged); NotFound when the cluster has no ComputeDomain CRD."""

    def delete_compute_domain(self, namespace: str, name: str) -> bool:
        """Delete a ComputeDomain (its controller deletes its channel template); False if it was already gone or the
        cluster has no ComputeDomain CRD."""

    def apply_hpa(self, manifest: KubeObject) -> KubeObject:
        """Create or replace a HorizontalPodAutoscaler of ``autoscaling_api()``'s version; returns it."""

    def get_hpa(self, namespace: str, name: str) -> KubeObject:
        """One HorizontalPodAutoscaler with its status (current/desired replicas, metrics, conditions)."""

    def delete_hpa(self, namespace: str, name: str) -> bool:
        """Delete a HorizontalPodAutoscaler; False if it was already gone."""

    # Ingresses: a service's external address (jobs/service/follow.py, when the operator configured an ingress class)
    def apply_ingress(self, manifest: KubeObject) -> KubeObject:
        """Create the networking.k8s.io/v1 Ingress, or replace its labels, annotations and spec when the portal's
        own one of that name exists (Conflict when one the portal did not make does); returns it as stored."""

    def get_ingress(self, namespace: str, name: str) -> KubeObject:
        """One Ingress with its status (the load balancer's address once the controller set it); raises NotFound."""

    def delete_ingress(self, namespace: str, name: str) -> bool:
        """Delete an Ingress; False if it was already gone."""

    # Diagnostics --------------------------------------------------------------------------------
    def pod_events(self, namespace: str, pod_name: str) -> list[KubeObject]:
        """core/v1 Events whose involvedObject is the pod, oldest first."""

    def pod_logs(self, namespace: str, pod_name: str, tail_lines: int = 200) -> str:
        """The pod's container log tail; raises NotFound if there is no such pod."""

    # Logs: following and keeping (jobs.logkeeping, the live log) ----------------------------------
    def stream_pod_log(
        self,
        namespace: str,
        pod_name: str,
        *,
        follow: bool = False,
        tail_lines: int | None = None,
        timeout_seconds: float = 30.0,
    ) -> Iterator[str]:
        """The container's log line by line (each line ends with its newline): all of it, or its last
        ``tail_lines``; with ``follow``, then each new line as the container writes it, until the container
        ends or ``timeout_seconds`` passed (the caller reconnects for more). Raises NotFound if there is no
        such pod and ClusterError if its container cannot serve a log (not started, node unreachable)."""


def redacted_secret(secret: KubeObject) -> KubeObject:
    """The Secret as the portal may hold it: metadata, type and key names; every value replaced by ""."""
    keys = sorted({*(secret.get("data") or {}), *(secret.get("stringData") or {})})
    redacted = {k: v for k, v in secret.items() if k not in ("data", "stringData")}
    redacted["data"] = dict.fromkeys(keys, "")
    metadata = redacted.get("metadata")
    if isinstance(metadata, dict):
        # kubectl apply keeps the whole last applied object, values included, in this annotation.
        annotations = {
            k: v for k, v in (metadata.get("annotations") or {}).items() if not k.endswith("last-applied-configuration")
        }
        redacted["metadata"] = {**metadata, "annotations": annotations} if metadata.get("annotations") else metadata
    return redacted
