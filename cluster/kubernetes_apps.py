"""``KubernetesAppsMixin``: the inference-service calls of ``KubernetesBackend`` (cluster/kubernetes.py), as
cluster/sim/apps_api.py is for the simulated cluster: apps/v1 Deployments and ReplicaSets through ``AppsV1Api``,
and HorizontalPodAutoscalers of the version the server serves.

The pinned client (33) has ``AutoscalingV2Api`` but no v2beta2 class, and v1.20 servers serve only v2beta2, so HPAs
go through the generic ``ApiClient.call_api`` on the group-version path (the two versions share their shape).
``autoscaling_api()`` asks the server's API discovery once and remembers the answer. A service's Ingress
(networking.k8s.io/v1, served from v1.19) goes through ``NetworkingV1Api``. Rollback is what
``kubectl rollout undo`` does on the client side: the chosen ReplicaSet's template, without pod-template-hash,
replaces the Deployment's (with the resourceVersion read, so a concurrent change is retried).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from kubernetes import client

from vocab.names import DEPLOYMENT_REVISION_ANNOTATION, POD_TEMPLATE_HASH_LABEL

from .base import (
    AUTOSCALING_V2,
    AUTOSCALING_V2BETA2,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    MANAGED_SELECTOR,
    METRICS_APIS,
    NETWORKING_V1,
    Conflict,
    Invalid,
    KubeObject,
    NotFound,
)

#: Re-reads and retries when a Deployment or HPA changes between our read and our write.
APPLY_ATTEMPTS = 5

#: How long the API groups the server serves are remembered (an adapter installed later shows up after this).
DISCOVERY_SECONDS = 300.0


def _revision(obj: KubeObject) -> int:
    try:
        return int(((obj.get("metadata") or {}).get("annotations") or {}).get(DEPLOYMENT_REVISION_ANNOTATION) or 0)
    except ValueError:
        return 0


class KubernetesAppsMixin:
    """Deployments, ReplicaSets, HorizontalPodAutoscalers and Ingresses through ``kubernetes.client``."""

    #: (when, group → group-versions) of the last API discovery.
    _discovered: tuple[float, dict[str, set[str]]] | None = None

    @property
    def apps(self) -> client.AppsV1Api:
        return client.AppsV1Api(self.api_client)

    @property
    def networking(self) -> client.NetworkingV1Api:
        return client.NetworkingV1Api(self.api_client)

    # Deployments --------------------------------------------------------------------------------------------------
    def _deployment_dict(self, obj: Any) -> KubeObject:
        return {"apiVersion": "apps/v1", "kind": "Deployment", **self._plain(obj)}

    def apply_deployment(self, manifest: KubeObject) -> KubeObject:
        body = copy.deepcopy(manifest)
        metadata = body.setdefault("metadata", {})
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not namespace or not name:
            raise Invalid("A Deployment manifest needs metadata.name and metadata.namespace.")
        metadata.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        what = f"Apply Deployment {namespace}/{name}"
        for _ in range(APPLY_ATTEMPTS):
            try:
                created = self._call(what, self.apps.create_namespaced_deployment, namespace, body)
                return self._deployment_dict(created)
            except Conflict:
                pass
            current = self.get_deployment(namespace, name)
            owner = (current["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL)
            if owner != MANAGED_BY_VALUE:
                raise Conflict(f"{what}: a Deployment of that name exists and is not managed by the portal "
                               f"({MANAGED_BY_LABEL}={owner!r}). Delete or rename it.")  # fmt: skip
            replacement = copy.deepcopy(body)
            kept = current["metadata"]
            annotations = dict(replacement["metadata"].get("annotations") or {})
            if DEPLOYMENT_REVISION_ANNOTATION in (kept.get("annotations") or {}):
                annotations.setdefault(
                    DEPLOYMENT_REVISION_ANNOTATION, kept["annotations"][DEPLOYMENT_REVISION_ANNOTATION]
                )
            replacement["metadata"].update(annotations=annotations, resourceVersion=kept["resourceVersion"])
            try:
                replaced = self._call(what, self.apps.replace_namespaced_deployment, name, namespace, replacement)
            except Conflict:
                continue
            return self._deployment_dict(replaced)
        raise Conflict(f"{what}: it kept changing underneath us; try again.")

    def get_deployment(self, namespace: str, name: str) -> KubeObject:
        obj = self._call(f"Get Deployment {namespace}/{name}", self.apps.read_namespaced_deployment, name, namespace)
        return self._deployment_dict(obj)

    def list_deployments(
        self, namespace: str | None = None, label_selector: str | None = MANAGED_SELECTOR
    ) -> list[KubeObject]:
        kwargs: dict[str, Any] = {"label_selector": label_selector} if label_selector else {}
        if namespace:
            func, kwargs["namespace"] = self.apps.list_namespaced_deployment, namespace
        else:
            func = self.apps.list_deployment_for_all_namespaces
        items, _ = self._list(f"List Deployments in {namespace or 'all namespaces'}", func, "apps/v1", "Deployment",
                              **kwargs)  # fmt: skip
        return items

    def delete_deployment(self, namespace: str, name: str) -> bool:
        try:
            self._call(f"Delete Deployment {namespace}/{name}", self.apps.delete_namespaced_deployment, name,
                       namespace, propagation_policy="Background")  # fmt: skip
        except NotFound:
            return False
        return True

    def _patch_deployment(self, namespace: str, name: str, patch: dict[str, Any], what: str) -> KubeObject:
        obj = self._call(what, self.apps.patch_namespaced_deployment, name, namespace, patch)
        return self._deployment_dict(obj)

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> KubeObject:
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise Invalid(f"Scale Deployment {namespace}/{name}: replicas must be a whole number of 0 or more.")
        return self._patch_deployment(namespace, name, {"spec": {"replicas": replicas}},
                                      f"Scale Deployment {namespace}/{name} to {replicas}")  # fmt: skip

    def set_deployment_paused(self, namespace: str, name: str, paused: bool) -> KubeObject:
        verb = "Pause" if paused else "Resume"
        return self._patch_deployment(namespace, name, {"spec": {"paused": bool(paused)}},
                                      f"{verb} Deployment {namespace}/{name}")  # fmt: skip

    def list_replica_sets(self, namespace: str, deployment_name: str) -> list[KubeObject]:
        deployment = self.get_deployment(namespace, deployment_name)
        match_labels = (deployment["spec"].get("selector") or {}).get("matchLabels") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))
        items, _ = self._list(f"List ReplicaSets of Deployment {namespace}/{deployment_name}",
                              self.apps.list_namespaced_replica_set, "apps/v1", "ReplicaSet", namespace=namespace,
                              label_selector=selector)  # fmt: skip
        uid = deployment["metadata"]["uid"]
        owned = [
            rs for rs in items
            if any(o.get("uid") == uid and o.get("controller") for o in rs["metadata"].get("ownerReferences") or [])
        ]  # fmt: skip
        return sorted(owned, key=lambda rs: (_revision(rs), rs["metadata"].get("creationTimestamp") or ""))

    def rollback_deployment(self, namespace: str, name: str, to_revision: int = 0) -> KubeObject:
        what = f"Roll back Deployment {namespace}/{name}"
        for _ in range(APPLY_ATTEMPTS):
            deployment = self.get_deployment(namespace, name)
            history = [rs for rs in self.list_replica_sets(namespace, name) if _revision(rs) > 0]
            if to_revision:
                chosen = next((rs for rs in history if _revision(rs) == to_revision), None)
                if chosen is None:
                    raise NotFound(f"{what}: unable to find specified revision {to_revision} in history")
            else:
                older = [rs for rs in history if _revision(rs) < _revision(deployment)]
                if not older:
                    raise NotFound(f"{what}: there is no previous revision to roll back to")
                chosen = older[-1]
            template = copy.deepcopy(chosen["spec"]["template"])
            (template.get("metadata") or {}).get("labels", {}).pop(POD_TEMPLATE_HASH_LABEL, None)
            if template == deployment["spec"]["template"]:
                return deployment
            deployment["spec"]["template"] = template
            deployment.pop("status", None)
            try:
                replaced = self._call(what, self.apps.replace_namespaced_deployment, name, namespace, deployment)
            except Conflict:
                continue
            return self._deployment_dict(replaced)
        raise Conflict(f"{what}: it kept changing underneath us; try again.")

    # HorizontalPodAutoscalers -------------------------------------------------------------------------------------
    def _served_group_versions(self) -> dict[str, set[str]]:
        """API group → the group-versions the server serves: one discovery call, remembered for
        DISCOVERY_SECONDS (an adapter installed later shows up then). The autoscaling version and the metrics
        APIs both read it."""
        cached = self._discovered
        if cached is not None and time.monotonic() - cached[0] < DISCOVERY_SECONDS:
            return cached[1]
        groups = self._call("Discover the API groups", client.ApisApi(self.api_client).get_api_versions)
        served = {
            group.name: {version.group_version for version in group.versions or []} for group in groups.groups or []
        }
        self._discovered = (time.monotonic(), served)
        return served

    def autoscaling_api(self) -> str:
        versions = self._served_group_versions().get("autoscaling", set())
        return AUTOSCALING_V2 if AUTOSCALING_V2 in versions else AUTOSCALING_V2BETA2

    def metrics_apis(self) -> frozenset[str]:
        return frozenset(group for group in self._served_group_versions() if group in METRICS_APIS)

    def api_groups(self) -> frozenset[str]:
        return frozenset(self._served_group_versions())

    def _hpa_call(self, what: str, method: str, path: str, body: Any = None) -> KubeObject:
        return self._call(
            what,
            self.api_client.call_api,
            path,
            method,
            path_params={},
            query_params=[],
            header_params={"Accept": "application/json", "Content-Type": "application/json"},
            body=body,
            response_type="object",
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
        )

    def _hpa_path(self, api_version: str, namespace: str, name: str | None = None) -> str:
        path = f"/apis/{api_version}/namespaces/{namespace}/horizontalpodautoscalers"
        return f"{path}/{name}" if name else path

    def apply_hpa(self, manifest: KubeObject) -> KubeObject:
        body = copy.deepcopy(manifest)
        metadata = body.setdefault("metadata", {})
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not namespace or not name:
            raise Invalid("A HorizontalPodAutoscaler manifest needs metadata.name and metadata.namespace.")
        metadata.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        version = str(body.get("apiVersion") or self.autoscaling_api())
        what = f"Apply HorizontalPodAutoscaler {namespace}/{name}"
        for _ in range(APPLY_ATTEMPTS):
            try:
                return self._hpa_call(what, "POST", self._hpa_path(version, namespace), body)
            except Conflict:
                pass
            current = self._hpa_call(f"Get HorizontalPodAutoscaler {namespace}/{name}", "GET",
                                     self._hpa_path(version, namespace, name))  # fmt: skip
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                return self._hpa_call(what, "PUT", self._hpa_path(version, namespace, name), body)
            except Conflict:
                continue
        raise Conflict(f"{what}: it kept changing underneath us; try again.")

    def get_hpa(self, namespace: str, name: str) -> KubeObject:
        return self._hpa_call(f"Get HorizontalPodAutoscaler {namespace}/{name}", "GET",
                              self._hpa_path(self.autoscaling_api(), namespace, name))  # fmt: skip

    def delete_hpa(self, namespace: str, name: str) -> bool:
        try:
            self._hpa_call(f"Delete HorizontalPodAutoscaler {namespace}/{name}", "DELETE",
                           self._hpa_path(self.autoscaling_api(), namespace, name))  # fmt: skip
        except NotFound:
            return False
        return True

    # Ingresses ----------------------------------------------------------------------------------------------------
    def _ingress_dict(self, obj: Any) -> KubeObject:
        return {"apiVersion": NETWORKING_V1, "kind": "Ingress", **self._plain(obj)}

    def apply_ingress(self, manifest: KubeObject) -> KubeObject:
        body = copy.deepcopy(manifest)
        metadata = body.setdefault("metadata", {})
        namespace, name = metadata.get("namespace"), metadata.get("name")
        if not namespace or not name:
            raise Invalid("An Ingress manifest needs metadata.name and metadata.namespace.")
        metadata.setdefault("labels", {}).setdefault(MANAGED_BY_LABEL, MANAGED_BY_VALUE)
        what = f"Apply Ingress {namespace}/{name}"
        for _ in range(APPLY_ATTEMPTS):
            try:
                return self._ingress_dict(self._call(what, self.networking.create_namespaced_ingress, namespace, body))
            except Conflict:
                pass
            current = self.get_ingress(namespace, name)
            owner = (current["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL)
            if owner != MANAGED_BY_VALUE:
                raise Conflict(f"{what}: an Ingress of that name exists and is not managed by the portal "
                               f"({MANAGED_BY_LABEL}={owner!r}). Delete or rename it.")  # fmt: skip
            replacement = copy.deepcopy(body)
            replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            try:
                replaced = self._call(what, self.networking.replace_namespaced_ingress, name, namespace, replacement)
            except Conflict:
                continue
            return self._ingress_dict(replaced)
        raise Conflict(f"{what}: it kept changing underneath us; try again.")

    def get_ingress(self, namespace: str, name: str) -> KubeObject:
        obj = self._call(f"Get Ingress {namespace}/{name}", self.networking.read_namespaced_ingress, name, namespace)
        return self._ingress_dict(obj)

    def delete_ingress(self, namespace: str, name: str) -> bool:
        try:
            self._call(f"Delete Ingress {namespace}/{name}", self.networking.delete_namespaced_ingress, name,
                       namespace)  # fmt: skip
        except NotFound:
            return False
        return True
