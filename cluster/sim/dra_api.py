"""The simulated API server's Dynamic Resource Allocation objects: ``resource.k8s.io/v1`` and ComputeDomains.

A part of ``SimulatedCluster`` (cluster/sim/api.py), like storage_api: the same transactions on the store and
the same settling of the clock after a write. Served as a real API server serves them:

* ``resource.k8s.io/v1`` (DeviceClass cluster-scoped; ResourceSlice cluster-scoped, written by the DRA driver;
  ResourceClaim and ResourceClaimTemplate namespaced) only from Kubernetes 1.34 on (the scenario's
  ``server_version``); an older server answers "the server could not find the requested resource" to a get or a
  write, and its lists are empty (the ClusterBackend contract: ``resource_api_versions`` then says it is not served).
* ``resource.nvidia.com/v1beta1`` ComputeDomain only where NVIDIA's DRA driver is installed (a DRA node).

Claims and templates are validated as kube-apiserver does the parts the portal writes (request names, exactly one
of ``exactly`` / ``firstAvailable``, a class name, count and allocation mode, CEL selectors that compile, config
and constraints naming requests that exist), every problem at once. Specs are immutable: applying an object that
exists returns it unchanged, except a DeviceClass, whose spec is replaced.
"""

from __future__ import annotations

from typing import Any

from vocab.dra import (
    ALLOCATION_MODE_ALL,
    ALLOCATION_MODE_EXACT_COUNT,
    COMPUTE_DOMAIN_ALLOCATION_MODES,
    COMPUTE_DOMAIN_KIND,
    DEVICE_CLASS_KIND,
    NVIDIA_CONFIG_API_VERSION,
    RESOURCE_API_VERSION,
    RESOURCE_CLAIM_KIND,
    RESOURCE_CLAIM_TEMPLATE_KIND,
    RESOURCE_V1_SINCE,
)

from ..base import Invalid, KubeObject, NotFound, parse_server_version
from ..dra_cel import compile_problem
from .clock import settle
from .store import Store, Txn, bump_rv, clone, new_metadata, object_key, touch
from .validation import DNS1123_LABEL, DNS1123_SUBDOMAIN, LABEL_HELP, SUBDOMAIN_HELP, server_version

#: kind -> (state key, namespaced, apiVersion, resource name as errors spell it)
KINDS = {
    DEVICE_CLASS_KIND: ("deviceclasses", False, RESOURCE_API_VERSION, "deviceclasses.resource.k8s.io"),
    "ResourceSlice": ("resourceslices", False, RESOURCE_API_VERSION, "resourceslices.resource.k8s.io"),
    RESOURCE_CLAIM_KIND: ("resourceclaims", True, RESOURCE_API_VERSION, "resourceclaims.resource.k8s.io"),
    RESOURCE_CLAIM_TEMPLATE_KIND: (
        "resourceclaimtemplates", True, RESOURCE_API_VERSION, "resourceclaimtemplates.resource.k8s.io"),
    COMPUTE_DOMAIN_KIND: ("computedomains", True, NVIDIA_CONFIG_API_VERSION, "computedomains.resource.nvidia.com"),
}  # fmt: skip


def resource_api_served(tx: Txn) -> bool:
    return parse_server_version(server_version(tx)) >= RESOURCE_V1_SINCE


def nvidia_driver_installed(tx: Txn) -> bool:
    return any(hw.get("dra") for hw in tx.state["hw"].values())


def _served(tx: Txn, kind: str) -> None:
    api_version = KINDS[kind][2]
    if not resource_api_served(tx) or (kind == COMPUTE_DOMAIN_KIND and not nvidia_driver_installed(tx)):
        raise NotFound(
            f'the server could not find the requested resource: no matches for kind "{kind}" in version "{api_version}"'
        )


def _selector_errors(path: str, selectors: Any) -> list[str]:
    errors = []
    for index, selector in enumerate(selectors or []):
        expression = (selector.get("cel") or {}).get("expression") if isinstance(selector, dict) else None
        if not expression:
            errors.append(f"{path}[{index}].cel.expression: Required value")
            continue
        problem = compile_problem(str(expression))
        if problem:
            errors.append(f'{path}[{index}].cel.expression: Invalid value: "{expression}": {problem}')
    return errors


def _exact_errors(path: str, exact: dict[str, Any]) -> list[str]:
    errors = []
    if not exact.get("deviceClassName"):
        errors.append(f"{path}.deviceClassName: Required value")
    mode = exact.get("allocationMode") or ALLOCATION_MODE_EXACT_COUNT
    if mode not in (ALLOCATION_MODE_EXACT_COUNT, ALLOCATION_MODE_ALL):
        errors.append(f'{path}.allocationMode: Unsupported value: "{mode}": supported values: "All", "ExactCount"')
    count = exact.get("count")
    if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count <= 0):
        errors.append(f"{path}.count: Invalid value: {count}: must be greater than zero")
    if count is not None and mode == ALLOCATION_MODE_ALL:
        errors.append(f"{path}.count: Invalid value: {count}: must not be specified when allocationMode is All")
    errors.extend(_selector_errors(f"{path}.selectors", exact.get("selectors")))
    return errors


def claim_spec_errors(spec: Any, path: str = "spec") -> list[str]:
    """What kube-apiserver refuses in a ResourceClaimSpec, every problem at once."""
    if not isinstance(spec, dict):
        return [f"{path}: Required value"]
    devices = spec.get("devices") or {}
    requests = devices.get("requests") or []
    errors: list[str] = []
    names: list[str] = []
    sub_names: list[str] = []
    for index, request in enumerate(requests):
        where = f"{path}.devices.requests[{index}]"
        name = str(request.get("name") or "")
        if not name:
            errors.append(f"{where}.name: Required value")
        elif not DNS1123_LABEL.fullmatch(name) or len(name) > 63:
            errors.append(f'{where}.name: Invalid value: "{name}": {LABEL_HELP}')
        elif name in names:
            errors.append(f'{where}.name: Duplicate value: "{name}"')
        names.append(name)
        exact, alternatives = request.get("exactly"), request.get("firstAvailable")
        if (exact is None) == (not alternatives):
            errors.append(f"{where}: Invalid value: exactly one of `exactly` or `firstAvailable` is required")
        if exact is not None:
            errors.extend(_exact_errors(f"{where}.exactly", exact))
        for sub_index, sub in enumerate(alternatives or []):
            sub_where = f"{where}.firstAvailable[{sub_index}]"
            sub_name = str(sub.get("name") or "")
            if not sub_name or not DNS1123_LABEL.fullmatch(sub_name):
                errors.append(f'{sub_where}.name: Invalid value: "{sub_name}": {LABEL_HELP}')
            sub_names.append(f"{name}/{sub_name}")
            errors.extend(_exact_errors(sub_where, sub))
    known = set(names) | set(sub_names)
    for index, entry in enumerate(devices.get("config") or []):
        for name in entry.get("requests") or []:
            if name not in known:
                errors.append(
                    f'{path}.devices.config[{index}].requests: Invalid value: "{name}": must be the name of a request '
                    "in the claim or the name of a request and a subrequest separated by '/'"
                )
        opaque = entry.get("opaque")
        if not opaque or not opaque.get("driver") or not isinstance(opaque.get("parameters"), dict):
            errors.append(f"{path}.devices.config[{index}].opaque: Required value: driver and parameters")
    for index, constraint in enumerate(devices.get("constraints") or []):
        for name in constraint.get("requests") or []:
            if name not in known:
                errors.append(f'{path}.devices.constraints[{index}].requests: Invalid value: "{name}": must be the '
                              "name of a request in the claim")  # fmt: skip
    return errors


def _compute_domain_errors(domain: KubeObject) -> list[str]:
    spec = domain.get("spec") or {}
    channel = spec.get("channel")
    errors = []
    if not isinstance(channel, dict) or not (channel.get("resourceClaimTemplate") or {}).get("name"):
        errors.append("spec.channel.resourceClaimTemplate.name: Required value")
    elif channel.get("allocationMode", "Single") not in COMPUTE_DOMAIN_ALLOCATION_MODES:
        errors.append(f'spec.channel.allocationMode: Unsupported value: "{channel["allocationMode"]}": supported '
                      'values: "All", "Single"')  # fmt: skip
    nodes = spec.get("numNodes", 0)
    if not isinstance(nodes, int) or isinstance(nodes, bool) or nodes < 0:
        errors.append(f"spec.numNodes: Invalid value: {nodes}: should be greater than or equal to 0")
    return errors


class DraAPI:
    """DeviceClasses, ResourceSlices, ResourceClaims, ResourceClaimTemplates, ComputeDomains (mixed into
    SimulatedCluster)."""

    _store: Store

    def resource_api_versions(self) -> list[str]:
        """The ``resource.k8s.io`` versions the server serves, newest first (empty before 1.34)."""
        with self._store.transaction() as tx:
            return [RESOURCE_API_VERSION] if resource_api_served(tx) else []

    def _apply(self, manifest: KubeObject, kind: str) -> KubeObject:
        key_name, namespaced, api_version, _ = KINDS[kind]
        obj = clone(manifest)
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        namespace = (metadata.get("namespace") or "default") if namespaced else None
        if obj.get("apiVersion") != api_version or obj.get("kind") != kind:
            raise Invalid(f"Expected a {api_version} {kind}, not {obj.get('apiVersion')}/{obj.get('kind')}.")
        errors = []
        if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
            errors.append(f'metadata.name: Invalid value: "{name}": {SUBDOMAIN_HELP}')
        spec = obj.get("spec")
        if kind == RESOURCE_CLAIM_KIND:
            errors.extend(claim_spec_errors(spec))
        elif kind == RESOURCE_CLAIM_TEMPLATE_KIND:
            errors.extend(claim_spec_errors((spec or {}).get("spec"), "spec.spec"))
        elif kind == DEVICE_CLASS_KIND:
            errors.extend(_selector_errors("spec.selectors", (spec or {}).get("selectors")))
        elif kind == COMPUTE_DOMAIN_KIND:
            errors.extend(_compute_domain_errors(obj))
        if errors:
            detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            raise Invalid(f'{kind}.{api_version.split("/")[0]} "{name}" is invalid: {detail}')
        with self._store.transaction() as tx:
            _served(tx, kind)
            if namespace is not None and namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            stored = tx.state.setdefault(key_name, {})
            key = object_key(namespace, name) if namespace is not None else name
            existing = stored.get(key)
            if existing is not None:
                if kind == DEVICE_CLASS_KIND and existing.get("spec") != spec:
                    existing["spec"] = spec
                    touch(tx, existing)
                    settle(tx)
                return clone(existing)
            obj["metadata"] = {**metadata, **new_metadata(tx, name, namespace)}
            obj.pop("status", None)
            if kind == COMPUTE_DOMAIN_KIND:  # the CRD's defaults
                obj["spec"].setdefault("numNodes", 0)
                obj["spec"]["channel"].setdefault("allocationMode", "Single")
            if kind == RESOURCE_CLAIM_KIND:
                obj["status"] = {}
            stored[key] = obj
            settle(tx)  # the ComputeDomain controller makes its template; a waiting pod may now be scheduled
            return clone(stored[key])

    def _get(self, kind: str, name: str, namespace: str | None = None) -> KubeObject:
        key_name, namespaced, _, resource = KINDS[kind]
        with self._store.transaction() as tx:
            _served(tx, kind)
            key = object_key(namespace or "default", name) if namespaced else name
            obj = tx.state.get(key_name, {}).get(key)
            if obj is None:
                raise NotFound(f'{resource} "{name}" not found')
            return clone(obj)

    def _list(self, kind: str, namespace: str | None = None) -> list[KubeObject]:
        """The objects of ``kind``; [] where the server does not serve it (the ClusterBackend contract: a caller
        tells that from "none" by ``resource_api_versions``, as KubernetesBackend answers a 404 of the group)."""
        key_name, namespaced, _, _ = KINDS[kind]
        with self._store.transaction() as tx:
            try:
                _served(tx, kind)
            except NotFound:
                return []
            objects = tx.state.get(key_name, {})
            return [
                clone(objects[key])
                for key in sorted(objects)
                if namespace is None or not namespaced or objects[key]["metadata"].get("namespace") == namespace
            ]

    def _delete(self, kind: str, name: str, namespace: str | None = None) -> bool:
        """Delete one object; False when it was already gone, or the server does not serve its kind (nothing of it
        can exist there: the ClusterBackend contract for deleting what an attempt may have made)."""
        key_name, namespaced, _, _ = KINDS[kind]
        with self._store.transaction() as tx:
            try:
                _served(tx, kind)
            except NotFound:
                return False
            key = object_key(namespace or "default", name) if namespaced else name
            if tx.state.get(key_name, {}).pop(key, None) is None:
                return False
            bump_rv(tx)
            settle(tx)
            return True

    # DeviceClass (cluster-scoped) -----------------------------------------------------------------------------
    def apply_device_class(self, manifest: KubeObject) -> KubeObject:
        return self._apply(manifest, DEVICE_CLASS_KIND)

    def get_device_class(self, name: str) -> KubeObject:
        return self._get(DEVICE_CLASS_KIND, name)

    def list_device_classes(self) -> list[KubeObject]:
        return self._list(DEVICE_CLASS_KIND)

    def delete_device_class(self, name: str) -> bool:
        return self._delete(DEVICE_CLASS_KIND, name)

    # ResourceSlice (cluster-scoped, the drivers write them) -----------------------------------------------------
    def list_resource_slices(self, node_name: str | None = None, driver: str | None = None) -> list[KubeObject]:
        """The published slices, optionally only a node's or a driver's (the field selectors
        ``spec.nodeName`` and ``spec.driver``)."""
        return [
            s
            for s in self._list("ResourceSlice")
            if (node_name is None or s["spec"].get("nodeName") == node_name)
            and (driver is None or s["spec"]["driver"] == driver)
        ]

    # ResourceClaimTemplate and ResourceClaim (namespaced) -------------------------------------------------------
    def apply_resource_claim_template(self, manifest: KubeObject) -> KubeObject:
        return self._apply(manifest, RESOURCE_CLAIM_TEMPLATE_KIND)

    def get_resource_claim_template(self, namespace: str, name: str) -> KubeObject:
        return self._get(RESOURCE_CLAIM_TEMPLATE_KIND, name, namespace)

    def list_resource_claim_templates(self, namespace: str | None = None) -> list[KubeObject]:
        return self._list(RESOURCE_CLAIM_TEMPLATE_KIND, namespace)

    def delete_resource_claim_template(self, namespace: str, name: str) -> bool:
        return self._delete(RESOURCE_CLAIM_TEMPLATE_KIND, name, namespace)

    def apply_resource_claim(self, manifest: KubeObject) -> KubeObject:
        return self._apply(manifest, RESOURCE_CLAIM_KIND)

    def get_resource_claim(self, namespace: str, name: str) -> KubeObject:
        return self._get(RESOURCE_CLAIM_KIND, name, namespace)

    def list_resource_claims(self, namespace: str | None = None) -> list[KubeObject]:
        return self._list(RESOURCE_CLAIM_KIND, namespace)

    def delete_resource_claim(self, namespace: str, name: str) -> bool:
        return self._delete(RESOURCE_CLAIM_KIND, name, namespace)

    # ComputeDomain (resource.nvidia.com/v1beta1, namespaced) ----------------------------------------------------
    def apply_compute_domain(self, manifest: KubeObject) -> KubeObject:
        return self._apply(manifest, COMPUTE_DOMAIN_KIND)

    def get_compute_domain(self, namespace: str, name: str) -> KubeObject:
        return self._get(COMPUTE_DOMAIN_KIND, name, namespace)

    def list_compute_domains(self, namespace: str | None = None) -> list[KubeObject]:
        return self._list(COMPUTE_DOMAIN_KIND, namespace)

    def delete_compute_domain(self, namespace: str, name: str) -> bool:
        return self._delete(COMPUTE_DOMAIN_KIND, name, namespace)
