"""The simulated API server's storage objects: PersistentVolumeClaims, PersistentVolumes and Secrets.

A part of ``SimulatedCluster`` (cluster/sim/api.py), kept in a module of its own so the facade stays readable:
the same transactions on the store, the same validation as kube-apiserver, and the same settling of the clock
after a write the components react to (the PersistentVolume controller binds or provisions claims; the kubelet
starts a pod whose Secret appears).
"""

from __future__ import annotations

import base64
from typing import Any

from vocab.names import (
    DOCKERCONFIGJSON_ITEM,
    DOCKERCONFIGJSON_SECRET_TYPE,
    OPAQUE_SECRET_TYPE,
)

from ..base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_SELECTOR,
    Invalid,
    KubeObject,
    NotFound,
    redacted_secret,
)
from ..label_selectors import parse_label_selector, requirements_match
from .clock import settle
from .pod_resources import decode_quantity
from .store import (
    Store,
    bump_rv,
    clone,
    new_metadata,
    object_key,
    touch,
)
from .validation import (
    DNS1123_SUBDOMAIN,
    SUBDOMAIN_HELP,
    label_problem,
    secret_errors,
)
from .volume_binder import default_class

#: PersistentVolume access modes (v1.20; ReadWriteOncePod came in v1.22).
ACCESS_MODES = ("ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce")
#: The volume sources a PersistentVolume may have that the simulator accepts (exactly one per volume).
PV_SOURCES = ("nfs", "csi", "hostPath", "local", "iscsi", "cephfs", "rbd", "fc", "glusterfs")


class StorageAPI:
    """Claims, volumes and Secrets of the simulated API server (mixed into SimulatedCluster)."""

    _store: Store

    def ensure_pvc(self, manifest: KubeObject) -> KubeObject:
        claim = clone(manifest)
        metadata = claim.get("metadata") or {}
        namespace, name = metadata.get("namespace") or "default", str(metadata.get("name") or "")
        if claim.get("apiVersion") != "v1" or claim.get("kind") != "PersistentVolumeClaim":
            raise Invalid(f"Expected a v1 PersistentVolumeClaim, not {claim.get('apiVersion')}/{claim.get('kind')}.")
        problems = []
        if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
            problems.append(f"metadata.name: {SUBDOMAIN_HELP}")
        spec = claim.setdefault("spec", {})
        storage = (spec.get("resources") or {}).get("requests", {}).get("storage")
        try:
            decode_quantity(storage)
        except (ValueError, TypeError):
            problems.append("spec.resources.requests.storage: Required value")
        modes = spec.get("accessModes") or []
        if not modes:
            problems.append("spec.accessModes: Required value: at least 1 access mode is required")
        for mode in modes:
            if mode not in ACCESS_MODES:
                problems.append(f'spec.accessModes: Unsupported value: "{mode}": supported values: "ReadOnlyMany", '
                                '"ReadWriteMany", "ReadWriteOnce"')  # fmt: skip
        if problems:
            detail = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            raise Invalid(f'PersistentVolumeClaim "{name}" is invalid: {detail}')
        with self._store.transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            claims = tx.state.setdefault("pvcs", {})
            existing = claims.get(object_key(namespace, name))
            if existing is not None:
                return clone(existing)
            claim["metadata"] = {**metadata, **new_metadata(tx, name, namespace)}
            spec.setdefault("volumeMode", "Filesystem")
            if "storageClassName" not in spec and not spec.get("volumeName"):
                # The DefaultStorageClass admission plugin: a claim that names no class gets the default one.
                default = default_class(tx.state)
                if default:
                    spec["storageClassName"] = default
            claim["status"] = {"phase": "Pending"}
            claims[object_key(namespace, name)] = claim
            settle(tx)  # the PersistentVolume controller binds or provisions
            return clone(claims[object_key(namespace, name)])

    def delete_pvc(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            if tx.state.setdefault("pvcs", {}).pop(object_key(namespace, name), None) is None:
                return False
            bump_rv(tx)
            settle(tx)  # its volume is released or deleted by its reclaim policy
            return True

    def get_pvc(self, namespace: str, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            claim = tx.state.get("pvcs", {}).get(object_key(namespace, name))
            if claim is None:
                raise NotFound(f'persistentvolumeclaims "{name}" not found')
            return clone(claim)

    def list_pvcs(self, namespace: str | None = None) -> list[KubeObject]:
        with self._store.transaction() as tx:
            return [
                clone(claim)
                for _, claim in sorted(tx.state.get("pvcs", {}).items())
                if namespace is None or claim["metadata"]["namespace"] == namespace
            ]

    def ensure_pv(self, manifest: KubeObject) -> KubeObject:
        volume = clone(manifest)
        metadata = volume.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if volume.get("apiVersion") != "v1" or volume.get("kind") != "PersistentVolume":
            raise Invalid(f"Expected a v1 PersistentVolume, not {volume.get('apiVersion')}/{volume.get('kind')}.")
        spec = volume.setdefault("spec", {})
        problems = []
        if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
            problems.append(f"metadata.name: {SUBDOMAIN_HELP}")
        try:
            decode_quantity((spec.get("capacity") or {}).get("storage"))
        except (ValueError, TypeError):
            problems.append("spec.capacity: Required value")
        if not spec.get("accessModes") or any(mode not in ACCESS_MODES for mode in spec["accessModes"]):
            problems.append("spec.accessModes: Required value")
        sources = [key for key in PV_SOURCES if spec.get(key)]
        if len(sources) != 1:
            problems.append("spec: Required value: must specify a volume type" if not sources
                            else "spec: Forbidden: may not specify more than 1 volume type")  # fmt: skip
        if problems:
            detail = problems[0] if len(problems) == 1 else "[" + ", ".join(problems) + "]"
            raise Invalid(f'PersistentVolume "{name}" is invalid: {detail}')
        with self._store.transaction() as tx:
            volumes = tx.state.setdefault("pvs", {})
            if name in volumes:
                return clone(volumes[name])
            volume["metadata"] = {**metadata, **new_metadata(tx, name)}
            spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
            spec.setdefault("volumeMode", "Filesystem")
            volume["status"] = {"phase": "Available"}
            volumes[name] = volume
            settle(tx)  # a claim waiting for it is bound
            return clone(volumes[name])

    def list_pvs(self, label_selector: str | None = None) -> list[KubeObject]:
        requirements = parse_label_selector(label_selector)
        with self._store.transaction() as tx:
            return [
                clone(volume)
                for _, volume in sorted(tx.state.get("pvs", {}).items())
                if requirements_match(requirements, volume["metadata"].get("labels"))
            ]

    def delete_pv(self, name: str) -> bool:
        with self._store.transaction() as tx:
            if tx.state.setdefault("pvs", {}).pop(name, None) is None:
                return False
            bump_rv(tx)
            settle(tx)  # a claim bound to it is Lost
            return True

    # Secrets: stored base64-encoded, as the API server keeps them in etcd; handed out redacted. -------------
    def apply_secret(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        secret_type: str = OPAQUE_SECRET_TYPE,
        labels: dict[str, str] | None = None,
        owners: list[dict[str, Any]] | None = None,
    ) -> KubeObject:
        errors = secret_errors(name, data, secret_type, DOCKERCONFIGJSON_ITEM, DOCKERCONFIGJSON_SECRET_TYPE)
        for key, value in (labels or {}).items():
            problem = label_problem(key, value)
            if problem:
                errors.append(f"metadata.labels: {problem}")
        if errors:
            detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
            raise Invalid(f'Secret "{name}" is invalid: {detail}')
        encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
        with self._store.transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            secrets = tx.state.setdefault("secrets", {})
            key = object_key(namespace, name)
            secret = secrets.get(key)
            if secret is None:
                metadata = new_metadata(tx, name, namespace)
                metadata["labels"] = {MANAGED_BY_LABEL: MANAGED_BY_VALUE, **(labels or {})}
                secret = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": secret_type}
                secrets[key] = secret
            elif secret.get("type", OPAQUE_SECRET_TYPE) != secret_type:
                raise Invalid(f'Secret "{name}" is invalid: type: Invalid value: "{secret_type}": field is immutable')
            else:
                secret["metadata"]["labels"] = {**(secret["metadata"].get("labels") or {}), **(labels or {})}
                touch(tx, secret)
            secret["data"] = encoded
            if owners is not None:
                secret["metadata"]["ownerReferences"] = [dict(owner) for owner in owners]
            settle(tx)  # a kubelet waiting for this Secret (a pod in CreateContainerConfigError) starts the pod
            return redacted_secret(clone(secret))

    def get_secret(self, namespace: str, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            secret = tx.state.get("secrets", {}).get(object_key(namespace, name))
            if secret is None:
                raise NotFound(f'secrets "{name}" not found')
            return redacted_secret(clone(secret))

    def secret_values(self, namespace: str, name: str) -> tuple[str, dict[str, str]]:
        with self._store.transaction() as tx:
            secret = tx.state.get("secrets", {}).get(object_key(namespace, name))
            if secret is None:
                raise NotFound(f'secrets "{name}" not found')
            data = {key: base64.b64decode(value).decode() for key, value in (secret.get("data") or {}).items()}
            return secret.get("type", OPAQUE_SECRET_TYPE), data

    def list_secrets(self, namespace: str, label_selector: str | None = MANAGED_SELECTOR) -> list[KubeObject]:
        requirements = parse_label_selector(label_selector)
        with self._store.transaction() as tx:
            return [
                redacted_secret(clone(secret))
                for key, secret in sorted(tx.state.get("secrets", {}).items())
                if secret["metadata"]["namespace"] == namespace
                and requirements_match(requirements, secret["metadata"].get("labels"))
            ]

    def delete_secret(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            if tx.state.setdefault("secrets", {}).pop(object_key(namespace, name), None) is None:
                return False
            bump_rv(tx)
            return True
