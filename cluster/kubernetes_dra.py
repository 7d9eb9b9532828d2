"""``KubernetesDraMixin``: the Dynamic Resource Allocation calls of ``KubernetesBackend`` (cluster/kubernetes.py), as
cluster/sim/dra_api.py is for the simulated cluster: reads of DeviceClasses, ResourceSlices and ResourceClaims of
``resource.k8s.io/v1``, and the objects a workload claims its devices from, ResourceClaimTemplates and NVIDIA's
ComputeDomains (``resource.nvidia.com/v1beta1``), created unless they exist (their specs are immutable: a 409 is
answered with the object that exists) and deleted.

The pinned client (33.1.0) has no models for ``resource.k8s.io/v1`` (only v1alpha3 and v1beta1), so these go through
the generic ``CustomObjectsApi``, which lists any group-version-resource as plain JSON: exactly the camelCase shape
the simulator returns. Whether the server serves ``resource.k8s.io/v1`` is read from API discovery first (the same
remembered call ``api_groups`` makes); where it does not, every list is [] without a request, and
``resource_api_versions`` is empty: that is how the cluster says so.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from vocab.dra import (
    COMPUTE_DOMAIN_KIND,
    COMPUTE_DOMAIN_PLURAL,
    NVIDIA_CONFIG_API_VERSION,
    RESOURCE_API_GROUP,
    RESOURCE_API_VERSION,
    RESOURCE_CLAIM_KIND,
    RESOURCE_CLAIM_TEMPLATE_KIND,
)

from .base import Conflict, Invalid, KubeObject, NotFound

#: The group-versions of resource.k8s.io, newest first (v1 stable in 1.34; v1beta2 1.33; v1beta1 1.32; v1alpha3).
_VERSION_ORDER = ("v1", "v1beta2", "v1beta1", "v1alpha3")
_VERSION = RESOURCE_API_VERSION.split("/", 1)[1]
#: Page size of a DRA list (a large cluster has a slice per node and driver, a claim per GPU pod).
_PAGE = 500


def _newest_first(group_version: str) -> tuple[int, str]:
    version = group_version.split("/", 1)[-1]
    return (_VERSION_ORDER.index(version) if version in _VERSION_ORDER else len(_VERSION_ORDER), version)


class KubernetesDraMixin:
    """DeviceClasses, ResourceSlices and ResourceClaims through ``kubernetes.client.CustomObjectsApi``."""

    def resource_api_versions(self) -> list[str]:
        served = self._served_group_versions().get(RESOURCE_API_GROUP, set())
        return sorted(served, key=_newest_first)

    def _dra_list(self, what: str, plural: str, kind: str, **kwargs: Any) -> list[KubeObject]:
        """All pages of a cluster-wide list of ``plural`` in resource.k8s.io/v1; [] when v1 is not served."""
        if RESOURCE_API_VERSION not in self.resource_api_versions():
            return []
        api = client.CustomObjectsApi(self.api_client)
        items: list[KubeObject] = []
        continue_token: str | None = None
        while True:
            page_kwargs = dict(kwargs, limit=_PAGE)
            if continue_token:
                page_kwargs["_continue"] = continue_token
            namespace = page_kwargs.pop("namespace", None)
            try:
                if namespace:
                    page = self._call(what, api.list_namespaced_custom_object, RESOURCE_API_GROUP, _VERSION,
                                      namespace, plural, **page_kwargs)  # fmt: skip
                else:
                    page = self._call(what, api.list_cluster_custom_object, RESOURCE_API_GROUP, _VERSION, plural,
                                      **page_kwargs)  # fmt: skip
            except NotFound:
                return []  # discovery was remembered; the group went away since
            for item in page.get("items") or []:
                item.setdefault("apiVersion", RESOURCE_API_VERSION)
                item.setdefault("kind", kind)
                (item.get("metadata") or {}).pop("managedFields", None)
                items.append(item)
            continue_token = (page.get("metadata") or {}).get("continue")
            if not continue_token:
                return items

    def list_device_classes(self) -> list[KubeObject]:
        return self._dra_list("List DeviceClasses", "deviceclasses", "DeviceClass")

    def list_resource_slices(self, node_name: str | None = None, driver: str | None = None) -> list[KubeObject]:
        selectors = [f"spec.nodeName={node_name}"] if node_name else []
        selectors += [f"spec.driver={driver}"] if driver else []
        kwargs = {"field_selector": ",".join(selectors)} if selectors else {}
        return self._dra_list("List ResourceSlices", "resourceslices", "ResourceSlice", **kwargs)

    def list_resource_claims(self, namespace: str | None = None) -> list[KubeObject]:
        kwargs = {"namespace": namespace} if namespace else {}
        return self._dra_list("List ResourceClaims", "resourceclaims", "ResourceClaim", **kwargs)

    # Objects a workload claims from: ResourceClaimTemplates and ComputeDomains --------------------------------
    def _dra_create(self, manifest: KubeObject, api_version: str, kind: str, plural: str) -> KubeObject:
        """Create a namespaced custom object unless one of that name exists (then return it as stored)."""
        if manifest.get("apiVersion") != api_version or manifest.get("kind") != kind:
            raise Invalid(f"Expected a {api_version} {kind}, not {manifest.get('apiVersion')}/{manifest.get('kind')}.")
        metadata = manifest.get("metadata") or {}
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not namespace or not name:
            raise Invalid(f"A {kind} needs a name and a namespace (the team's).")
        group, version = api_version.split("/", 1)
        api = client.CustomObjectsApi(self.api_client)
        what = f"Create {kind} {namespace}/{name}"
        try:
            return self._call(what, api.create_namespaced_custom_object, group, version, namespace, plural, manifest)
        except Conflict:
            return self._call(f"Read {kind} {namespace}/{name}", api.get_namespaced_custom_object, group, version,
                              namespace, plural, name)  # fmt: skip

    def _dra_delete(self, api_version: str, kind: str, plural: str, namespace: str, name: str) -> bool:
        group, version = api_version.split("/", 1)
        api = client.CustomObjectsApi(self.api_client)
        try:
            self._call(f"Delete {kind} {namespace}/{name}", api.delete_namespaced_custom_object, group, version,
                       namespace, plural, name, propagation_policy="Background")  # fmt: skip
        except NotFound:
            return False  # gone already, or the server does not serve the kind (nothing of it can exist)
        return True

    def apply_resource_claim_template(self, manifest: KubeObject) -> KubeObject:
        return self._dra_create(manifest, RESOURCE_API_VERSION, RESOURCE_CLAIM_TEMPLATE_KIND, "resourceclaimtemplates")

    def delete_resource_claim_template(self, namespace: str, name: str) -> bool:
        return self._dra_delete(RESOURCE_API_VERSION, RESOURCE_CLAIM_TEMPLATE_KIND, "resourceclaimtemplates",
                                namespace, name)  # fmt: skip

    def apply_resource_claim(self, manifest: KubeObject) -> KubeObject:
        return self._dra_create(manifest, RESOURCE_API_VERSION, RESOURCE_CLAIM_KIND, "resourceclaims")

    def delete_resource_claim(self, namespace: str, name: str) -> bool:
        return self._dra_delete(RESOURCE_API_VERSION, RESOURCE_CLAIM_KIND, "resourceclaims", namespace, name)

    def apply_compute_domain(self, manifest: KubeObject) -> KubeObject:
        return self._dra_create(manifest, NVIDIA_CONFIG_API_VERSION, COMPUTE_DOMAIN_KIND, COMPUTE_DOMAIN_PLURAL)

    def delete_compute_domain(self, namespace: str, name: str) -> bool:
        return self._dra_delete(NVIDIA_CONFIG_API_VERSION, COMPUTE_DOMAIN_KIND, COMPUTE_DOMAIN_PLURAL, namespace, name)
