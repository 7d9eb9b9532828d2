"""The API facade: ``SimulatedCluster``, the ClusterBackend (cluster/base.py) over the simulated cluster.

It stands in for kube-apiserver. A call opens a transaction on the store (which first brings the world up
to ``clock()``), validates and admits what is submitted (``validation``: names, labels, Job manifests,
resource quantities), reads or writes objects, and when it wrote something the components react to, lets
the clock settle them (``clock.settle``) before it returns. It does no controller work itself: pods are
created by the Job controller, bound by the scheduler, started by the kubelet; node labels are followed by
the GPU Operator; readiness and cordons by the node lifecycle controller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from vocab.names import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_OPERATOR_NAMESPACE,
    MIG_CONFIG_LABEL,
)

from ..base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_SELECTOR,
    ClusterError,
    Conflict,
    Invalid,
    KubeObject,
    NotFound,
    WatchEvent,
    forms_for,
)
from ..label_selectors import parse_label_selector, requirements_match
from .apps_api import AppsAPI
from .clock import advance, quiet_until, settle
from .dcgm_exporter import heartbeat, kernels, load_kind, render
from .dra_api import DraAPI
from .ingress_api import IngressAPI
from .logs import log_lines
from .nodes import set_unschedulable
from .scenario import add_node, add_raw_node, build_state, load_scenario
from .storage_api import StorageAPI
from .store import (
    Store,
    bump_rv,
    clone,
    get_node,
    gpu_uuid,
    mark_changed,
    new_config_map,
    new_metadata,
    new_namespace,
    node_events_since,
    object_key,
    touch,
)
from .validation import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_HELP,
    SUBDOMAIN_HELP,
    admit_job,
    label_problem,
    server_version,
    validated_job,
)

#: Node labels an admin sets that the GPU Operator's agents follow.
_OPERATOR_LABELS = (DEVICE_PLUGIN_CONFIG_LABEL, MIG_CONFIG_LABEL)


class SimulatedCluster(StorageAPI, AppsAPI, IngressAPI, DraAPI):
    """A ClusterBackend backed by a simulated Kubernetes + GPU Operator cluster (see the ``cluster.sim`` package)."""

    name = "simulated"
    watch_poll_interval = 0.2

    def __init__(
        self,
        state_path: str | Path | None = None,
        scenario: dict[str, Any] | str | Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path = Path(state_path) if state_path is not None else None
        self._scenario_source = scenario
        self._scenario: dict[str, Any] | None = None
        self._store = Store(self._path, clock, self._build_state, advance, quiet_until)
        # What list calls hand out, per kind and key: (uid, resourceVersion) and a copy made once for that version.
        self._clones: dict[str, dict[str, tuple[tuple[Any, Any], KubeObject]]] = {"nodes": {}, "pods": {}, "jobs": {}}
        with self._store.transaction():
            pass  # creates the state (file) from the scenario if there is none yet

    def __repr__(self) -> str:
        return f"SimulatedCluster({str(self._path) if self._path else 'in-memory'!r})"

    def _build_state(self, now: float, stored_scenario: dict[str, Any] | None = None) -> dict[str, Any]:
        return build_state(now, self._scenario_dict(stored_scenario))

    #: Compare every cached list copy with the stored object it was made from (tests: an object changed without a
    #: resourceVersion bump, or a caller that changed what a list returned, fails loudly instead of going stale).
    verify_list_copies = False

    def _listed(self, kind: str, objects: dict[str, KubeObject], requirements, namespace: str | None = None):
        """The objects of ``kind`` that match, sorted by key, as read-only copies.

        Like an informer's cache, a copy is made once per (uid, resourceVersion) and handed to every later list
        until the object changes (every change bumps its resourceVersion): callers must never modify what a list
        returns. Copies of objects that are gone are dropped once they outnumber the live ones."""
        cache = self._clones[kind]
        out = []
        for key in sorted(objects):
            obj = objects[key]
            meta = obj["metadata"]
            if namespace is not None and meta.get("namespace") != namespace:
                continue
            if not requirements_match(requirements, meta.get("labels")):
                continue
            stamp = (meta.get("uid"), meta.get("resourceVersion"))
            hit = cache.get(key)
            if hit is None or hit[0] != stamp:
                hit = cache[key] = (stamp, clone(obj))
            elif self.verify_list_copies and hit[1] != obj:
                raise AssertionError(f"{kind} {key} changed without a resourceVersion bump (or a caller changed a "
                                     "listed copy)")  # fmt: skip
            out.append(hit[1])
        if len(cache) > 2 * len(objects) + 100:
            for key in [key for key in cache if key not in objects]:
                del cache[key]
        return out

    def list_nodes(self, label_selector: str | None = None) -> tuple[list[KubeObject], str]:
        requirements = parse_label_selector(label_selector)
        with self._store.transaction() as tx:
            return self._listed("nodes", tx.state["nodes"], requirements), str(tx.state["rv"])

    def get_node(self, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            return clone(get_node(tx, name))

    def watch_nodes(self, resource_version: str | None = None, timeout_seconds: int = 30) -> Iterator[WatchEvent]:
        try:
            since = int(resource_version) if resource_version not in (None, "", "0") else None
        except ValueError:
            raise Invalid(f"resourceVersion {resource_version!r} is not one this cluster handed out.") from None
        deadline = time.monotonic() + max(0, timeout_seconds)
        while True:
            with self._store.transaction() as tx:
                events = node_events_since(tx, since)
            if events or since is None:
                yield from events
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            time.sleep(min(self.watch_poll_interval, remaining))

    def patch_node_labels(self, name: str, labels: dict[str, str | None]) -> KubeObject:
        for key, value in labels.items():
            problem = label_problem(key, value)
            if problem:
                raise Invalid(f'Node "{name}" is invalid: metadata.labels: {problem}')
        with self._store.transaction() as tx:
            node = get_node(tx, name)
            current = node["metadata"].setdefault("labels", {})
            before = dict(current)
            for key, value in labels.items():
                if value is None:
                    current.pop(key, None)
                else:
                    current[key] = value
            if current != before:
                node["metadata"]["labels"] = current = dict(sorted(current.items()))
                touch(tx, node)
                if any(before.get(label) != current.get(label) for label in _OPERATOR_LABELS):
                    settle(tx)  # the device plugin and MIG Manager follow their labels
            return clone(node)

    def ensure_namespace(self, name: str, labels: dict[str, str] | None = None) -> KubeObject:
        if len(name) > 63 or not DNS1123_LABEL.fullmatch(name):
            raise Invalid(f'Namespace "{name}" is invalid: metadata.name: Invalid value: "{name}": {LABEL_HELP}')
        with self._store.transaction() as tx:
            namespace = tx.state["namespaces"].get(name)
            if namespace is None:
                namespace = new_namespace(tx, name, labels)
            elif labels and any(namespace["metadata"]["labels"].get(k) != v for k, v in labels.items()):
                namespace["metadata"]["labels"].update(labels)
                touch(tx, namespace)
            return clone(namespace)

    def list_workloads(self, namespace: str | None = None) -> list[KubeObject]:
        requirements = parse_label_selector(MANAGED_SELECTOR)
        with self._store.transaction() as tx:
            return self._listed("jobs", tx.state["jobs"], requirements, namespace)

    def list_pods(
        self, namespace: str | None = None, label_selector: str | None = MANAGED_SELECTOR
    ) -> list[KubeObject]:
        requirements = parse_label_selector(label_selector)
        with self._store.transaction() as tx:
            return self._listed("pods", tx.state["pods"], requirements, namespace)

    def server_version(self) -> str:
        """The scenario's ``server_version`` (modern by default; cluster.sim.constants.DEFAULT_SERVER_VERSION)."""
        with self._store.transaction() as tx:
            return server_version(tx)

    def create_workload(self, manifest: KubeObject) -> KubeObject:
        job = validated_job(manifest)
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        with self._store.transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            existing = tx.state["jobs"].get(object_key(namespace, name))
            if existing is not None:
                owner = (existing["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL)
                if owner != MANAGED_BY_VALUE:
                    raise Conflict(
                        f'jobs.batch "{name}" already exists and is not managed by the portal '
                        f"({MANAGED_BY_LABEL}={owner!r}). Delete or rename it."
                    )
                return clone(existing)
            admit_job(tx, job, forms_for(server_version(tx)))
            settle(tx)  # the Job controller creates its pod, the scheduler binds it, the kubelet starts it
            return clone(tx.state["jobs"][object_key(namespace, name)])

    def delete_workload(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            key = object_key(namespace, name)
            job = tx.state["jobs"].pop(key, None)
            if job is None:
                return False
            tx.state["jobsim"].pop(key, None)
            bump_rv(tx)
            settle(tx)  # its pods are garbage-collected
            return True

    def workload_exists(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            return object_key(namespace, name) in tx.state["jobs"]

    # Volumes: claims and PersistentVolumes (the PV controller, volume_binder, binds them) -----------------------
    def ensure_service(self, manifest: KubeObject) -> KubeObject:
        service = clone(manifest)
        metadata = service.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "default", str(metadata.get("name") or "")
        if service.get("apiVersion") != "v1" or service.get("kind") != "Service":
            raise Invalid(f"Expected a v1 Service, not {service.get('apiVersion')}/{service.get('kind')}.")
        if not name or len(name) > 63 or not DNS1123_LABEL.fullmatch(name):
            raise Invalid(f'Service "{name}" is invalid: metadata.name: Invalid value: "{name}": {LABEL_HELP}')
        if not (service.get("spec") or {}).get("ports"):
            raise Invalid(f'Service "{name}" is invalid: spec.ports: Required value')
        with self._store.transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            services = tx.state.setdefault("services", {})
            existing = services.get(object_key(namespace, name))
            if existing is not None:
                return clone(existing)
            seq = tx.state["service_seq"] = tx.state.get("service_seq", 0) + 1
            service["metadata"] = {**metadata, **new_metadata(tx, name, namespace)}
            ip = f"10.96.{(seq // 250) % 256}.{seq % 250 + 2}"
            if service["spec"].get("clusterIP") == "None":
                ip = "None"  # a headless Service: DNS answers with its pods' addresses, there is no virtual IP
            service["spec"].update(type=service["spec"].get("type", "ClusterIP"), clusterIP=ip, clusterIPs=[ip])
            service["status"] = {"loadBalancer": {}}
            services[object_key(namespace, name)] = service
            return clone(service)

    def delete_service(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            if tx.state.setdefault("services", {}).pop(object_key(namespace, name), None) is None:
                return False
            bump_rv(tx)
            return True

    def get_service(self, namespace: str, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            service = tx.state.get("services", {}).get(object_key(namespace, name))
            if service is None:
                raise NotFound(f'services "{name}" not found')
            return clone(service)

    def _workspace_pod(self, tx, namespace: str, service: str, pod_name: str) -> tuple[dict, dict] | None:
        """A running pod behind an existing Service and its simulation record; None when either is missing (a real
        proxy call would fail the same way)."""
        if object_key(namespace, service) not in tx.state.get("services", {}):
            return None
        key = object_key(namespace, pod_name)
        pod, sim = tx.state["pods"].get(key), tx.state["podsim"].get(key) or {}
        if pod is None or sim.get("stage") != "running" or sim.get("running") is None:
            return None
        return pod["spec"]["containers"][0], sim

    def notebook_kernels(self, namespace: str, service: str, pod_name: str) -> list[dict] | None:
        """The kernels of a running notebook pod, from the same load model as its GPU utilisation."""
        with self._store.transaction() as tx:
            found = self._workspace_pod(tx, namespace, service, pod_name)
            if found is None:
                return None
            return kernels(load_kind(found[0]), found[1]["running"], tx.now)

    def workspace_health(self, namespace: str, service: str, pod_name: str) -> dict | None:
        """code-server's /healthz for a running pod that runs code-server, from the same load model; None for any
        other server (it has no /healthz) or a missing pod."""
        with self._store.transaction() as tx:
            found = self._workspace_pod(tx, namespace, service, pod_name)
            if found is None or "code-server" not in (found[0].get("command") or []):
                return None
            return heartbeat(load_kind(found[0]), found[1]["running"], tx.now)

    def get_config_map(self, namespace: str, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            config_map = tx.state["configmaps"].get(object_key(namespace, name))
            if config_map is None:
                raise NotFound(f'configmaps "{name}" not found')
            return clone(config_map)

    def apply_config_map(
        self, namespace: str, name: str, data: dict[str, str], labels: dict[str, str] | None = None
    ) -> KubeObject:
        if len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
            raise Invalid(f'ConfigMap "{name}" is invalid: metadata.name: Invalid value: "{name}": {SUBDOMAIN_HELP}')
        for key, value in data.items():
            if not isinstance(value, str):
                raise Invalid(f'ConfigMap "{name}" is invalid: data[{key}]: Invalid value: must be a string')
        with self._store.transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            key = object_key(namespace, name)
            config_map = tx.state["configmaps"].get(key)
            if config_map is None:
                config_map = new_config_map(
                    tx, namespace, name, data, {MANAGED_BY_LABEL: MANAGED_BY_VALUE, **(labels or {})}
                )
            else:
                merged = {**(config_map["metadata"].get("labels") or {}), **(labels or {})}
                if config_map.get("data", {}) == data and config_map["metadata"].get("labels", {}) == merged:
                    return clone(config_map)
                config_map["data"] = dict(data)
                config_map["metadata"]["labels"] = merged
                touch(tx, config_map)
            if namespace == GPU_OPERATOR_NAMESPACE:
                settle(tx)  # the device plugin's config-manager sidecar watches its ConfigMap and reloads
            return clone(config_map)

    def pod_events(self, namespace: str, pod_name: str) -> list[KubeObject]:
        with self._store.transaction() as tx:
            events = [
                event
                for event in tx.state["events"].values()
                if event["metadata"]["namespace"] == namespace
                and event["involvedObject"].get("kind") == "Pod"
                and event["involvedObject"].get("name") == pod_name
            ]
            events.sort(key=lambda e: (e["lastTimestamp"], int(e["metadata"]["resourceVersion"])))
            return clone(events)

    def pod_logs(self, namespace: str, pod_name: str, tail_lines: int = 200) -> str:
        with self._store.transaction() as tx:
            lines, _ = self._container_log(tx, namespace, pod_name)
            if tail_lines is not None and tail_lines >= 0:
                lines = lines[-tail_lines:] if tail_lines else []
            return "".join(line + "\n" for line in lines)

    def stream_pod_log(
        self,
        namespace: str,
        pod_name: str,
        *,
        follow: bool = False,
        tail_lines: int | None = None,
        timeout_seconds: float = 30.0,
    ) -> Iterator[str]:
        # The simulated process writes its log as the clock runs: following re-reads it every poll interval and
        # hands out the lines written since, until the container ended (or the pod went) or time is up.
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        sent: int | None = None
        while True:
            try:
                with self._store.transaction() as tx:
                    lines, ended = self._container_log(tx, namespace, pod_name)
            except NotFound:
                if sent is None:
                    raise
                return  # the pod was deleted while followed: its log ends here, as kubectl logs -f does
            if sent is None:
                sent = max(0, len(lines) - tail_lines) if tail_lines is not None and tail_lines >= 0 else 0
            for line in lines[sent:]:
                yield line + "\n"
            sent = max(sent, len(lines))
            if not follow or ended or time.monotonic() >= deadline:
                return
            time.sleep(self.watch_poll_interval)

    def _container_log(self, tx, namespace: str, pod_name: str) -> tuple[list[str], bool]:
        """The log lines the pod's container wrote so far, and whether it has ended (no more will come)."""
        key = object_key(namespace, pod_name)
        pod = tx.state["pods"].get(key)
        if pod is None:
            raise NotFound(f'pods "{pod_name}" not found')
        sim = tx.state["podsim"].get(key) or {}
        container = pod["spec"]["containers"][0]["name"]
        if not pod["spec"].get("nodeName"):
            raise ClusterError(
                f'Read logs of pod {namespace}/{pod_name}: container "{container}" in pod "{pod_name}" is '
                "waiting to start: the pod is not scheduled to a node yet"
            )
        if sim.get("stage") in ("bound", "errimagepull", "backoff"):
            reason = {"bound": "ContainerCreating"}.get(sim["stage"], "trying and failing to pull image")
            if sim.get("config_problem"):
                reason = "CreateContainerConfigError"
            raise ClusterError(
                f'Read logs of pod {namespace}/{pod_name}: container "{container}" in pod "{pod_name}" is '
                f"waiting to start: {reason}"
            )
        return log_lines(tx, pod, sim), sim.get("finished") is not None

    def dcgm_metrics(self) -> dict[str, str]:
        """What dcgm-exporter on each GPU node would serve now (cluster.sim.dcgm_exporter), by node name."""
        with self._store.transaction() as tx:
            return render(tx.state, tx.now, gpu_uuid)

    def add_node(self, spec: dict[str, Any]) -> KubeObject:
        """Add a node; Conflict if the name is taken.

        ``spec`` is either a scenario ``nodes:`` entry (the hardware is simulated: GFD labels, device plugin, MIG
        Manager) or a Node object as the API returns it (kept as given, like ``kubectl create -f node.json``; the
        API server assigns a new uid and resourceVersion).
        """
        raw = isinstance(spec.get("metadata"), dict)
        name = spec["metadata"].get("name") if raw else spec.get("name")
        with self._store.transaction() as tx:
            if name in tx.state["nodes"]:
                raise Conflict(f'nodes "{name}" already exists')
            node = add_raw_node(tx, spec) if raw else add_node(tx, spec)
            settle(tx)
            return clone(node)

    def remove_node(self, name: str) -> None:
        """Delete a node; its pods are garbage-collected and their Jobs create replacements."""
        with self._store.transaction() as tx:
            node = get_node(tx, name)
            del tx.state["nodes"][name]
            tx.state["hw"].pop(name, None)
            rv = bump_rv(tx)
            node["metadata"]["resourceVersion"] = str(rv)
            tx.state["tombstones"].append({"rv": rv, "object": node})
            del tx.state["tombstones"][:-500]
            settle(tx)  # its pods are garbage-collected and their Jobs create replacements

    def set_node_ready(self, name: str, ready: bool) -> KubeObject:
        """Flip the node's Ready condition (NotReady nodes get the not-ready taints; pods are evicted after 300 s)."""
        with self._store.transaction() as tx:
            node = get_node(tx, name)
            hw = tx.state["hw"][name]
            if hw.get("ready", True) != ready:
                hw["ready"] = ready
                hw["not_ready_since"] = None if ready else tx.now
                mark_changed(tx)
                settle(tx)  # the node lifecycle controller updates the conditions and taints
            return clone(node)

    def set_node_unschedulable(self, name: str, unschedulable: bool = True) -> KubeObject:
        """Cordon or uncordon a node (``kubectl cordon``)."""
        with self._store.transaction() as tx:
            node = get_node(tx, name)
            if bool(node["spec"].get("unschedulable")) != unschedulable:
                set_unschedulable(node, unschedulable)
                touch(tx, node)
                settle(tx)
            return clone(node)

    def reset(self) -> None:
        """Throw away all state and rebuild the cluster from the scenario."""
        with self._store.transaction(fresh=True):
            pass

    def list_events(self, namespace: str | None = None) -> list[KubeObject]:
        """All stored core/v1 Events (pods and Jobs), oldest first."""
        with self._store.transaction() as tx:
            events = [
                e for e in tx.state["events"].values() if namespace is None or e["metadata"]["namespace"] == namespace
            ]
            events.sort(key=lambda e: (e["lastTimestamp"], int(e["metadata"]["resourceVersion"])))
            return clone(events)

    def fail_next_mig_reconfiguration(self, name: str, reason: str = "injected failure") -> None:
        """Make MIG Manager's next reconfiguration of this node end in ``failed`` (for tests and the demo of the
        failure path); the scenario can ask for the same with ``mig: {fail_next: "<reason>"}``."""
        with self._store.transaction() as tx:
            hw = tx.state["hw"].get(name)
            if hw is None or hw.get("gpu") is None:
                raise NotFound(f'nodes "{name}" not found')
            hw["mig_fail_next"] = reason
            tx.dirty = True

    def mig_failure(self, name: str) -> str | None:
        """Why MIG Manager last failed on this node (what its log would say), or None."""
        with self._store.transaction() as tx:
            return (tx.state["hw"].get(name) or {}).get("mig_failure")

    def _scenario_dict(self, stored: dict[str, Any] | None = None) -> dict[str, Any]:
        """The scenario given at construction; without one, the one the existing state was built from."""
        if self._scenario_source is None and stored is not None:
            return clone(stored)
        if self._scenario is None:
            self._scenario = load_scenario(self._scenario_source)
        return clone(self._scenario)
