"""``KubernetesBackend``: the ClusterBackend for a real cluster, built on the official ``kubernetes`` client.

Every call goes through ``_call``, which turns the client's exceptions into the portal's: 404 → NotFound,
409 → Conflict, 422 → Invalid, and retries what may be transient (5xx, 429, timeouts, dropped or reset
connections) a few times with exponential backoff before giving up with a ClusterError that says what was being
done and what to check. Retries draw on a budget (``RetryBudget``, shared by every call of the backend): while the
API server keeps failing, a cycle's hundred calls fail fast instead of each sleeping through its own backoff.
Writes are safe to retry because the callers treat a retried create that meets its own object (409) as created and
a retried delete that finds nothing (404) as deleted: a request whose answer was lost is not done twice.
Retries and give-ups are counted for Prometheus (``gpuportal_kubernetes_api_retries_total``, ``…_failures_total``).
Objects are returned as plain camelCase dicts (``ApiClient.sanitize_for_serialization``), the same shape the
SimulatedCluster produces. With ``watch_cache`` on (PORTAL_K8S_WATCH_CACHE), nodes, pods and the portal's Jobs are
read from list-then-watch caches instead (cluster/kubernetes_cache.py, cluster/informer.py).
"""

from __future__ import annotations

import copy
import json
import logging
import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any, TypeVar

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from .base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_SELECTOR,
    ClusterError,
    Conflict,
    Invalid,
    KubeObject,
    NotFound,
    WatchEvent,
)
from .kubernetes_apps import KubernetesAppsMixin
from .kubernetes_cache import KubernetesCacheMixin, WriteMarks
from .kubernetes_dra import KubernetesDraMixin
from .kubernetes_storage import APPLY_CONFLICT_ATTEMPTS, KubernetesStorageMixin
from .metrics import API_FAILURES, API_RETRIES

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: Statuses worth another try: throttling and server-side failures. Everything else is an answer.
RETRYABLE_STATUSES = frozenset({0, 429, 500, 502, 503, 504})
#: Page size for list calls, so a large cluster is read in chunks rather than one huge response.
LIST_PAGE_SIZE = 500

_EPOCH = datetime.min.replace(tzinfo=UTC)


def _ca_file(pem: str) -> str:
    """A private file holding ``pem`` (the client reads a CA bundle from a path only); '' for none."""
    if not pem.strip():
        return ""
    handle, path = tempfile.mkstemp(prefix="gpuportal-ca-", suffix=".pem")
    with os.fdopen(handle, "w") as out:
        out.write(pem)
    return path


class RetryBudget:
    """At most ``retries`` retries in any ``window`` seconds, across every call of one backend (thread-safe).

    Bounds what one cycle (or one burst of cycles) spends on a failing API server: the first calls retry with
    backoff, the rest fail at their first error until the window moves on.
    """

    def __init__(self, retries: int = 30, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.retries = retries
        self.window = window
        self.clock = clock
        self._spent: deque[float] = deque()
        self._lock = threading.Lock()

    def spend(self) -> bool:
        """Take one retry from the budget; False when none is left."""
        with self._lock:
            now = self.clock()
            while self._spent and self._spent[0] <= now - self.window:
                self._spent.popleft()
            if len(self._spent) >= self.retries:
                return False
            self._spent.append(now)
            return True

    def __str__(self) -> str:
        return f"{self.retries} retries per {self.window:g} s"


def _retry_reason(error: Exception) -> str:
    if isinstance(error, ApiException):
        return "throttled" if error.status == 429 else "server_error"
    if isinstance(error, urllib3.exceptions.TimeoutError | TimeoutError):
        return "timeout"
    return "connection"


def _status_message(error: ApiException) -> str:
    """The human part of a Kubernetes Status body, or the HTTP reason when there is none."""
    body = error.body
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if body:
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = body.strip()[:300]
        if message:
            return str(message)
    return str(error.reason or "no reason given")


class KubernetesBackend(KubernetesCacheMixin, KubernetesStorageMixin, KubernetesAppsMixin, KubernetesDraMixin):
    """A ClusterBackend that talks to a kube-apiserver through ``kubernetes.client``. Its storage calls (claims,
    PersistentVolumes, Secrets) are in cluster/kubernetes_storage.py, its Deployment and HPA calls in
    cluster/kubernetes_apps.py, its DRA reads in cluster/kubernetes_dra.py, its watch caches in
    cluster/kubernetes_cache.py. With ``watch_cache`` the lists of
    nodes, pods and workloads are shared read-only objects (never change them); without, each list is fresh."""

    name = "kubernetes"

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        retries: int = 3,
        backoff_seconds: float = 0.2,
        request_timeout: float = 30.0,
        retry_budget: RetryBudget | None = None,
        watch_cache: bool = False,
        watch_timeout: tuple[int, int] | None = None,
        write_marks: WriteMarks | None = None,
    ) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.batch = client.BatchV1Api(api_client)
        self.retries = retries
        self.backoff_seconds = backoff_seconds
        self.request_timeout = request_timeout
        self.retry_budget = retry_budget or RetryBudget()
        self._server_version: str | None = None
        self._init_cache(watch_cache, watch_timeout, write_marks)

    @classmethod
    def from_kubeconfig(cls, path: str | None = None, context: str | None = None, **options: Any) -> KubernetesBackend:
        """Use a kubeconfig file (``path``; None means $KUBECONFIG or ~/.kube/config) and optional context;
        ``options`` go to the constructor."""
        configuration = client.Configuration()
        try:
            config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        except (ConfigException, OSError) as error:
            where = path or "$KUBECONFIG or ~/.kube/config"
            raise ClusterError(
                f"Could not load the kubeconfig from {where}"
                + (f" (context {context!r})" if context else "")
                + f": {error}. Point PORTAL_KUBECONFIG at a valid kubeconfig or set PORTAL_K8S_IN_CLUSTER=true."
            ) from error
        return cls(client.ApiClient(configuration), **options)

    @classmethod
    def in_cluster(cls, **options: Any) -> KubernetesBackend:
        """Use the pod's service account (the portal running inside the cluster); ``options`` go to the constructor."""
        configuration = client.Configuration()
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as error:
            raise ClusterError(
                f"Could not load the in-cluster configuration: {error}. This only works inside a pod with a "
                "service account token; outside a cluster set PORTAL_K8S_IN_CLUSTER=false and use a kubeconfig."
            ) from error
        return cls(client.ApiClient(configuration), **options)

    @classmethod
    def from_token(
        cls, server: str, ca_certificate: str, token: str, *, probe: bool = False, **options: Any
    ) -> KubernetesBackend:
        """Use an API server URL, its CA certificate (PEM; empty: the system's trust store) and a bearer token (a
        registered cluster, gpus.Cluster). ``probe``: the HTTP client retries nothing either (a registration check)."""
        configuration = client.Configuration()
        configuration.host = server.rstrip("/")
        configuration.api_key = {"authorization": token}
        configuration.api_key_prefix = {"authorization": "Bearer"}
        configuration.verify_ssl = True
        configuration.ssl_ca_cert = _ca_file(ca_certificate) or None
        if probe:
            configuration.retries = False
        return cls(client.ApiClient(configuration), **options)

    def __repr__(self) -> str:
        return f"<KubernetesBackend {self.api_client.configuration.host}>"

    # Plumbing -------------------------------------------------------------------------------------
    def _call(self, what: str, func: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one API call, mapping errors and retrying transient failures with exponential backoff, within the
        backend's retry budget."""
        kwargs.setdefault("_request_timeout", self.request_timeout)
        last_problem = ""
        for attempt in range(self.retries + 1):
            try:
                return func(*args, **kwargs)
            except ApiException as error:
                status = error.status or 0
                message = _status_message(error)
                if status == 404:
                    raise NotFound(f"{what}: not found ({message})") from error
                if status == 409:
                    raise Conflict(f"{what}: conflict ({message})") from error
                if status == 422:
                    raise Invalid(f"{what}: the cluster rejected it as invalid ({message})") from error
                if status not in RETRYABLE_STATUSES:
                    hint = " Check the portal's RBAC (deploy/10-rbac.yaml)." if status in (401, 403) else ""
                    raise ClusterError(f"{what} was refused with HTTP {status}: {message}.{hint}") from error
                last_problem, reason = f"HTTP {status}: {message}", _retry_reason(error)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                last_problem, reason = f"{type(error).__name__}: {error}", _retry_reason(error)
            if attempt == self.retries:
                break
            if not self.retry_budget.spend():
                API_FAILURES.inc()
                raise ClusterError(
                    f"{what} failed with {last_problem}, and was not retried: the retry budget "
                    f"({self.retry_budget}) is spent, so the API server has been failing repeatedly. "
                    f"{self._server_hint()}"
                )
            API_RETRIES.labels(reason=reason).inc()
            logger.warning("%s failed (attempt %d of %d): %s", what, attempt + 1, self.retries + 1, last_problem)
            time.sleep(self.backoff_seconds * 2**attempt)
        API_FAILURES.inc()
        raise ClusterError(f"{what} failed {self.retries + 1} times, last with {last_problem}. {self._server_hint()}")

    def _server_hint(self) -> str:
        return f"Check that the Kubernetes API server at {self.api_client.configuration.host} is reachable and healthy."

    def _plain(self, obj: Any) -> Any:
        """A client model as the camelCase dict ``kubectl get -o json`` prints (which hides managedFields too)."""
        plain = self.api_client.sanitize_for_serialization(obj)
        if isinstance(plain, dict) and isinstance(plain.get("metadata"), dict):
            plain["metadata"].pop("managedFields", None)
        return plain

    def _list(
        self, what: str, func: Callable[..., Any], api_version: str, kind: str, **kwargs: Any
    ) -> tuple[list[KubeObject], str]:
        """All pages of a list call, plus the list's resourceVersion (for a watch that follows it)."""
        items: list[KubeObject] = []
        resource_version = ""
        continue_token: str | None = None
        while True:
            page_kwargs = dict(kwargs, limit=LIST_PAGE_SIZE)
            if continue_token:
                page_kwargs["_continue"] = continue_token
            page = self._call(what, func, **page_kwargs)
            resource_version = resource_version or (page.metadata.resource_version or "")
            for item in page.items:
                plain = self._plain(item)
                # List items come without apiVersion/kind; fill them in as kubectl does.
                plain.setdefault("apiVersion", api_version)
                plain.setdefault("kind", kind)
                items.append(plain)
            continue_token = page.metadata._continue
            if not continue_token:
                return items, resource_version

    # Nodes ----------------------------------------------------------------------------------------
    def list_nodes(self, label_selector: str | None = None) -> tuple[list[KubeObject], str]:
        if self.watch_cache:
            return self._cached_nodes(label_selector)
        kwargs = {"label_selector": label_selector} if label_selector else {}
        return self._list("List nodes", self.core.list_node, "v1", "Node", **kwargs)

    def get_node(self, name: str) -> KubeObject:
        node = self._plain(self._call(f"Get node {name}", self.core.read_node, name))
        return {"apiVersion": "v1", "kind": "Node", **node}

    def watch_nodes(self, resource_version: str | None = None, timeout_seconds: int = 30) -> Iterator[WatchEvent]:
        kwargs: dict[str, Any] = {
            "timeout_seconds": timeout_seconds,
            # The server ends the watch at timeout_seconds; the socket timeout is only a backstop.
            "_request_timeout": timeout_seconds + self.request_timeout,
        }
        if resource_version:
            kwargs["resource_version"] = resource_version
        what = f"Watch nodes from resourceVersion {resource_version or '(now)'}"
        problem = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_seconds * 2 ** (attempt - 1))
            watcher = watch.Watch()
            delivered = False
            try:
                for event in watcher.stream(self.core.list_node, **kwargs):
                    delivered = True
                    obj = event["object"]
                    plain = obj if isinstance(obj, dict) else self._plain(obj)
                    if event["type"] != "BOOKMARK":
                        plain.setdefault("apiVersion", "v1")
                        plain.setdefault("kind", "Node")
                    yield WatchEvent(type=event["type"], object=plain)
                return
            except ApiException as error:
                status = error.status or 0
                if status == 410:
                    raise ClusterError(
                        f"{what}: that resourceVersion is too old (HTTP 410 Gone). List the nodes again and "
                        "watch from the list's resourceVersion."
                    ) from error
                if delivered or status not in RETRYABLE_STATUSES:
                    raise ClusterError(f"{what} failed with HTTP {status}: {_status_message(error)}") from error
                problem = f"HTTP {status}: {_status_message(error)}"
            except (urllib3.exceptions.HTTPError, OSError) as error:
                if delivered:
                    # Events were already handed out; a silent restart could replay or skip some.
                    raise ClusterError(f"{what} was cut off: {error}. List and watch again.") from error
                problem = f"{type(error).__name__}: {error}"
            finally:
                watcher.stop()
            logger.warning("%s failed (attempt %d of %d): %s", what, attempt + 1, self.retries + 1, problem)
        raise ClusterError(f"{what} failed {self.retries + 1} times, last with {problem}. {self._server_hint()}")

    def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> KubeObject:
        # A JSON merge patch (RFC 7386): a string sets the label, None removes it, other labels are untouched.
        # Client 33 has no per-call content type, so the request is made through call_api with the header set.
        body = {"metadata": {"labels": labels}}
        node = self._call(
            f"Patch labels of node {name}",
            self.api_client.call_api,
            "/api/v1/nodes/{name}",
            "PATCH",
            path_params={"name": name},
            query_params=[],
            header_params={"Accept": "application/json", "Content-Type": "application/merge-patch+json"},
            body=body,
            response_type="V1Node",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )
        patched = {"apiVersion": "v1", "kind": "Node", **self._plain(node)}
        self._wrote("nodes", patched)
        return patched

    # Workloads ------------------------------------------------------------------------------------
    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> KubeObject:
        try:
            namespace = self._call(f"Get namespace {name}", self.core.read_namespace, name)
        except NotFound:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": dict(labels or {})}}
            try:
                namespace = self._call(f"Create namespace {name}", self.core.create_namespace, body)
            except Conflict:
                # Created by someone else between our read and our create: that is what we wanted.
                namespace = self._call(f"Get namespace {name}", self.core.read_namespace, name)
        return {"apiVersion": "v1", "kind": "Namespace", **self._plain(namespace)}

    def list_workloads(self, namespace: str | None = None) -> list[KubeObject]:
        if self.watch_cache:
            return self._cached_workloads(namespace)
        if namespace:
            func, kwargs = self.batch.list_namespaced_job, {"namespace": namespace}
        else:
            func, kwargs = self.batch.list_job_for_all_namespaces, {}
        where = f"in namespace {namespace}" if namespace else "in all namespaces"
        items, _ = self._list(
            f"List portal jobs {where}", func, "batch/v1", "Job", label_selector=MANAGED_SELECTOR, **kwargs
        )
        return items

    def list_pods(
        self, namespace: str | None = None, label_selector: str | None = MANAGED_SELECTOR
    ) -> list[KubeObject]:
        if self.watch_cache and (cached := self._cached_pods(namespace, label_selector)) is not None:
            return cached
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        if namespace:
            func, kwargs["namespace"] = self.core.list_namespaced_pod, namespace
        else:
            func = self.core.list_pod_for_all_namespaces
        where = f"in namespace {namespace}" if namespace else "in all namespaces"
        items, _ = self._list(f"List pods {where}", func, "v1", "Pod", **kwargs)
        return items

    def server_version(self) -> str:
        """The API server's gitVersion (GET /version), asked once per backend: a server is not upgraded under a
        running portal often enough to ask every cycle, and a restart of the portal reads it again."""
        if self._server_version is None:
            info = self._call("Read the server version", client.VersionApi(self.api_client).get_code)
            self._server_version = str(info.git_version or "")
        return self._server_version

    def create_workload(self, manifest: KubeObject) -> KubeObject:
        body = copy.deepcopy(manifest)
        metadata = body.setdefault("metadata", {})
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not namespace or not name:
            raise Invalid("A workload manifest needs metadata.name and metadata.namespace.")
        # Everything the portal creates carries its label, Job and pods alike (list_pods filters on it).
        metadata.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        template_metadata = body.setdefault("spec", {}).setdefault("template", {}).setdefault("metadata", {})
        template_metadata.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        what = f"Create job {namespace}/{name}"
        try:
            job = self._call(what, self.batch.create_namespaced_job, namespace, body)
        except Conflict:
            # Deterministic names make a retried submission land here: hand back the Job that already exists.
            job = self._call(f"Get job {namespace}/{name}", self.batch.read_namespaced_job, name, namespace)
            owner = (job.metadata.labels or {}).get(MANAGED_BY_LABEL)
            if owner != MANAGED_BY_VALUE:
                raise Conflict(
                    f"{what}: a Job of that name exists and is not managed by the portal "
                    f"({MANAGED_BY_LABEL}={owner!r}). Delete or rename it."
                ) from None
        created = {"apiVersion": "batch/v1", "kind": "Job", **self._plain(job)}
        self._wrote("jobs", created)
        return created

    def delete_workload(self, namespace: str, name: str) -> bool:
        try:
            self._call(
                f"Delete job {namespace}/{name}",
                self.batch.delete_namespaced_job,
                name,
                namespace,
                # Background: the Job goes now and the garbage collector removes its pods. The default for Jobs
                # (orphan) would leave the pods running.
                propagation_policy="Background",
            )
        except NotFound:
            self._deleted("jobs", namespace, name)
            return False
        self._deleted("jobs", namespace, name)
        return True

    def workload_exists(self, namespace: str, name: str) -> bool:
        try:
            self._call(f"Read job {namespace}/{name}", self.batch.read_namespaced_job, name, namespace)
        except NotFound:
            return False
        return True

    # Notebook objects -----------------------------------------------------------------------------
    def _ensure(self, kind: str, manifest: KubeObject, create, read) -> KubeObject:
        body = copy.deepcopy(manifest)
        metadata = body.setdefault("metadata", {})
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not namespace or not name:
            raise Invalid(f"A {kind} manifest needs metadata.name and metadata.namespace.")
        metadata.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        try:
            obj = self._call(f"Create {kind} {namespace}/{name}", create, namespace, body)
        except Conflict:
            # It exists (a retry, or the notebook started again): the existing one is the one to use.
            obj = self._call(f"Get {kind} {namespace}/{name}", read, name, namespace)
        return {"apiVersion": "v1", "kind": kind, **self._plain(obj)}

    def _delete(self, kind: str, namespace: str, name: str, delete) -> bool:
        try:
            self._call(f"Delete {kind} {namespace}/{name}", delete, name, namespace)
        except NotFound:
            return False
        return True

    def ensure_service(self, manifest: KubeObject) -> KubeObject:
        return self._ensure("Service", manifest, self.core.create_namespaced_service, self.core.read_namespaced_service)

    def delete_service(self, namespace: str, name: str) -> bool:
        return self._delete("Service", namespace, name, self.core.delete_namespaced_service)

    def notebook_kernels(self, namespace: str, service: str, pod_name: str) -> list[dict] | None:
        # The portal keeps only a salted hash of each notebook's token, so it cannot authenticate to the server's
        # /api/kernels; on a real cluster idleness is judged by GPU utilisation alone (docs/user-guide.md).
        return None

    def workspace_health(self, namespace: str, service: str, pod_name: str) -> dict | None:
        # code-server answers /healthz without signing in, so the API server's service proxy can ask it (RBAC:
        # services/proxy get). The body is read raw: the client would turn a JSON answer into a Python repr.
        response = self._call(
            f"Ask {namespace}/{service} for /healthz",
            self.core.connect_get_namespaced_service_proxy_with_path,
            f"{service}:http",
            namespace,
            "healthz",
            _preload_content=False,
        )
        try:
            health = json.loads(response.data)
        except (TypeError, ValueError):
            return None
        return health if isinstance(health, dict) else None

    # ConfigMaps -----------------------------------------------------------------------------------
    def get_config_map(self, namespace: str, name: str) -> KubeObject:
        config_map = self._call(
            f"Get ConfigMap {namespace}/{name}", self.core.read_namespaced_config_map, name, namespace
        )
        return {"apiVersion": "v1", "kind": "ConfigMap", **self._plain(config_map)}

    def apply_config_map(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None
    ) -> KubeObject:
        what = f"Apply ConfigMap {namespace}/{name}"
        for _ in range(APPLY_CONFLICT_ATTEMPTS):
            try:
                current = self.get_config_map(namespace, name)
            except NotFound:
                body = {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {
                        "name": name,
                        "namespace": namespace,
                        "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, **(labels or {})},
                    },
                    "data": dict(data),
                }
                try:
                    created = self._call(what, self.core.create_namespaced_config_map, namespace, body)
                except Conflict:
                    continue  # created concurrently; replace it on the next round
                return {"apiVersion": "v1", "kind": "ConfigMap", **self._plain(created)}

            metadata = current["metadata"]
            merged_labels = {**(metadata.get("labels") or {}), **(labels or {})}
            if current.get("data", {}) == data and (metadata.get("labels") or {}) == merged_labels:
                return current  # already as wanted: no write, no new resourceVersion
            metadata["labels"] = merged_labels
            current["data"] = dict(data)
            try:
                # The body carries the resourceVersion just read, so a concurrent change answers 409 and we retry.
                replaced = self._call(what, self.core.replace_namespaced_config_map, name, namespace, current)
            except Conflict:
                continue
            return {"apiVersion": "v1", "kind": "ConfigMap", **self._plain(replaced)}
        raise Conflict(
            f"{what}: it kept changing underneath us ({APPLY_CONFLICT_ATTEMPTS} conflicting writes in a row). "
            "Another controller may be rewriting it; try again."
        )

    # Diagnostics ----------------------------------------------------------------------------------
    def pod_events(self, namespace: str, pod_name: str) -> list[KubeObject]:
        events = self._call(
            f"List events of pod {namespace}/{pod_name}",
            self.core.list_namespaced_event,
            namespace,
            field_selector=f"involvedObject.name={pod_name},involvedObject.kind=Pod",
        ).items

        def last_seen(event: client.CoreV1Event) -> datetime:
            # Events from the events.k8s.io API (the v1.20 scheduler's) carry eventTime and no lastTimestamp.
            return (
                event.last_timestamp
                or event.event_time
                or event.first_timestamp
                or event.metadata.creation_timestamp
                or _EPOCH
            )

        events.sort(key=last_seen)
        return [{"apiVersion": "v1", "kind": "Event", **self._plain(event)} for event in events]

    def pod_logs(self, namespace: str, pod_name: str, tail_lines: int = 200) -> str:
        # _preload_content=False: the client would otherwise json.loads() a log that happens to be valid JSON.
        response = self._call(
            f"Read logs of pod {namespace}/{pod_name}",
            self.core.read_namespaced_pod_log,
            pod_name,
            namespace,
            tail_lines=tail_lines,
            _preload_content=False,
        )
        try:
            return response.data.decode("utf-8", errors="replace")
        finally:
            response.release_conn()

    def stream_pod_log(
        self,
        namespace: str,
        pod_name: str,
        *,
        follow: bool = False,
        tail_lines: int | None = None,
        timeout_seconds: float = 30.0,
    ) -> Iterator[str]:
        # The log follow API (GET .../pods/{name}/log?follow=true): the apiserver proxies the kubelet's stream,
        # which ends when the container does. The read timeout bounds how long a quiet follow waits for a line;
        # the deadline bounds the whole stream, so a follower never holds a worker for ever.
        # https://kubernetes.io/docs/reference/generated/kubernetes-api/v1.30/#read-log-pod-v1-core
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        kwargs: dict[str, Any] = {"follow": follow, "_preload_content": False}
        if tail_lines is not None:
            kwargs["tail_lines"] = tail_lines
        if follow:
            kwargs["_request_timeout"] = (self.request_timeout, max(1.0, timeout_seconds))
        response = self._call(f"Read logs of pod {namespace}/{pod_name}", self.core.read_namespaced_pod_log,
                              pod_name, namespace, **kwargs)  # fmt: skip
        pending = b""
        finished = False
        try:
            for chunk in response.stream(8192, decode_content=True):
                pending += chunk
                *complete, pending = pending.split(b"\n")
                for line in complete:
                    yield line.decode("utf-8", errors="replace") + "\n"
                if follow and time.monotonic() >= deadline:
                    return
            finished = True
            if pending:
                yield pending.decode("utf-8", errors="replace")
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
            return  # a follow that saw no line for its read timeout, or a dropped stream: the caller reconnects
        finally:
            if not finished:
                response.close()  # an unfinished stream's connection cannot go back to the pool
            response.release_conn()
