"""``KubernetesStorageMixin``: the storage calls of ``KubernetesBackend`` (cluster/kubernetes.py), kept in a module
of their own so the backend stays readable, as cluster/sim/storage_api.py does for the simulated cluster:
PersistentVolumeClaims, PersistentVolumes and Secrets.

The mixin uses the backend's plumbing (``core``, ``_call``, ``_list``, ``_plain``, ``_ensure``, ``_delete``), so the
same error mapping and retries apply; it is only ever used as a base of ``KubernetesBackend``.
"""

from __future__ import annotations

import base64
import copy
from typing import Any

from vocab.names import OPAQUE_SECRET_TYPE

from .base import (
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_SELECTOR,
    Conflict,
    Invalid,
    KubeObject,
    NotFound,
    redacted_secret,
)

#: How often apply_config_map and apply_secret re-read and retry when someone else changes the object in between.
APPLY_CONFLICT_ATTEMPTS = 5


class KubernetesStorageMixin:
    """PersistentVolumeClaims, PersistentVolumes and Secrets through ``kubernetes.client``'s CoreV1Api."""

    def ensure_pvc(self, manifest: KubeObject) -> KubeObject:
        return self._ensure(
            "PersistentVolumeClaim",
            manifest,
            self.core.create_namespaced_persistent_volume_claim,
            self.core.read_namespaced_persistent_volume_claim,
        )

    def delete_pvc(self, namespace: str, name: str) -> bool:
        return self._delete(
            "PersistentVolumeClaim", namespace, name, self.core.delete_namespaced_persistent_volume_claim
        )

    # Volumes: claims and PersistentVolumes ---------------------------------------------------------------------
    def list_pvcs(self, namespace: str | None = None) -> list[KubeObject]:
        if namespace:
            func, kwargs = self.core.list_namespaced_persistent_volume_claim, {"namespace": namespace}
        else:
            func, kwargs = self.core.list_persistent_volume_claim_for_all_namespaces, {}
        where = f"in namespace {namespace}" if namespace else "in all namespaces"
        items, _ = self._list(f"List PersistentVolumeClaims {where}", func, "v1", "PersistentVolumeClaim", **kwargs)
        return items

    def ensure_pv(self, manifest: KubeObject) -> KubeObject:
        body = copy.deepcopy(manifest)
        metadata = body.setdefault("metadata", {})
        name = metadata.get("name")
        if not name:
            raise Invalid("A PersistentVolume manifest needs metadata.name.")
        metadata.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        try:
            volume = self._call(f"Create PersistentVolume {name}", self.core.create_persistent_volume, body)
        except Conflict:
            volume = self._call(f"Get PersistentVolume {name}", self.core.read_persistent_volume, name)
        return {"apiVersion": "v1", "kind": "PersistentVolume", **self._plain(volume)}

    def list_pvs(self, label_selector: str | None = None) -> list[KubeObject]:
        kwargs = {"label_selector": label_selector} if label_selector else {}
        items, _ = self._list(
            "List PersistentVolumes", self.core.list_persistent_volume, "v1", "PersistentVolume", **kwargs
        )
        return items

    def delete_pv(self, name: str) -> bool:
        try:
            self._call(f"Delete PersistentVolume {name}", self.core.delete_persistent_volume, name)
        except NotFound:
            return False
        return True

    # Secrets --------------------------------------------------------------------------------------
    def _secret(self, obj: Any) -> KubeObject:
        return redacted_secret({"apiVersion": "v1", "kind": "Secret", **self._plain(obj)})

    def apply_secret(
        self,
        namespace: str,
        name: str,
        data: dict[str, str],
        secret_type: str = OPAQUE_SECRET_TYPE,
        labels: dict[str, str] | None = None,
        owners: list[dict[str, Any]] | None = None,
    ) -> KubeObject:
        what = f"Apply Secret {namespace}/{name}"
        encoded = {key: base64.b64encode(value.encode()).decode() for key, value in data.items()}
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY_VALUE, **(labels or {})},
            },
            "type": secret_type,
            "data": encoded,
        }
        if owners is not None:
            body["metadata"]["ownerReferences"] = [dict(owner) for owner in owners]
        for _ in range(APPLY_CONFLICT_ATTEMPTS):
            try:
                current = self._call(
                    f"Get Secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace
                )
            except NotFound:
                try:
                    return self._secret(self._call(what, self.core.create_namespaced_secret, namespace, body))
                except Conflict:
                    continue  # created concurrently; replace it on the next round
            if (current.type or OPAQUE_SECRET_TYPE) != secret_type:
                # A Secret's type is immutable; the portal never changes one it did not create with this type.
                raise Conflict(
                    f"{what}: a Secret of that name exists with type {current.type}, not {secret_type}. "
                    "Delete it or pick another name."
                )
            body["metadata"]["resourceVersion"] = current.metadata.resource_version
            body["metadata"]["labels"] = {**(current.metadata.labels or {}), **body["metadata"]["labels"]}
            if owners is None and current.metadata.owner_references:
                body["metadata"]["ownerReferences"] = self._plain(current.metadata.owner_references)
            try:
                # The body carries the resourceVersion just read: a concurrent change answers 409 and we retry.
                return self._secret(self._call(what, self.core.replace_namespaced_secret, name, namespace, body))
            except Conflict:
                continue
        raise Conflict(f"{what}: it kept changing underneath us ({APPLY_CONFLICT_ATTEMPTS} conflicts); try again.")

    def get_secret(self, namespace: str, name: str) -> KubeObject:
        return self._secret(
            self._call(f"Get Secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace)
        )

    def secret_values(self, namespace: str, name: str) -> tuple[str, dict[str, str]]:
        secret = self._call(f"Get Secret {namespace}/{name}", self.core.read_namespaced_secret, name, namespace)
        data = {key: base64.b64decode(value).decode() for key, value in (secret.data or {}).items()}
        return secret.type or OPAQUE_SECRET_TYPE, data

    def list_secrets(self, namespace: str, label_selector: str | None = MANAGED_SELECTOR) -> list[KubeObject]:
        kwargs: dict[str, Any] = {"namespace": namespace}
        if label_selector:
            kwargs["label_selector"] = label_selector
        items, _ = self._list(
            f"List Secrets in namespace {namespace}", self.core.list_namespaced_secret, "v1", "Secret", **kwargs
        )
        return [redacted_secret(item) for item in items]

    def delete_secret(self, namespace: str, name: str) -> bool:
        return self._delete("Secret", namespace, name, self.core.delete_namespaced_secret)
