"""The simulated API server's apps/v1 Deployments and ReplicaSets and its HorizontalPodAutoscalers.

A part of ``SimulatedCluster`` (cluster/sim/api.py), as storage_api.py is: the same transactions, validation as
kube-apiserver does it (with its messages, every problem at once), the API server's defaults, and the clock
settled after a write (the deployment controller makes ReplicaSets, the ReplicaSet controller pods, the
scheduler binds them, the HPA controller looks at a new autoscaler). ``rollback_deployment`` does what
``kubectl rollout undo`` does on the client side: it copies an earlier ReplicaSet's template into the Deployment.

The HPA API versions follow the server version: autoscaling/v2 from v1.23, autoscaling/v2beta2 up to v1.25.
"""

from __future__ import annotations

import re
from typing import Any

from vocab.dra import NVIDIA_CONFIG_API_GROUP, RESOURCE_API_GROUP, RESOURCE_V1_SINCE
from vocab.names import DEPLOYMENT_REVISION_ANNOTATION, POD_TEMPLATE_HASH_LABEL

from ..base import (
    AUTOSCALING_V2,
    AUTOSCALING_V2BETA2,
    MANAGED_SELECTOR,
    METRICS_APIS,
    Invalid,
    KubeObject,
    NotFound,
    parse_server_version,
)
from ..label_selectors import parse_label_selector, requirements_match
from .clock import settle
from .deployments import DEFAULT_HISTORY_LIMIT, DEFAULT_PROGRESS_DEADLINE, owned_replicasets, revision_of, without_hash
from .store import Store, Txn, bump_rv, clone, new_metadata, object_key, touch
from .validation import (
    DNS1123_SUBDOMAIN,
    SUBDOMAIN_HELP,
    _resource_errors,
    label_problem,
    secret_reference_errors,
    server_version,
)

_INT_OR_PERCENT = re.compile(r"^(\d+)%$")


def _minor(tx: Txn) -> tuple[int, int]:
    """The API server's (major, minor): the scenario's ``server_version``, the one version the simulated server
    reports (the kubelets' ``kubernetes_version`` is the nodes' own and may be older, as in real clusters)."""
    return parse_server_version(server_version(tx))


def served_autoscaling_versions(version: tuple[int, int]) -> list[str]:
    served = []
    if version >= (1, 23):
        served.append(AUTOSCALING_V2)
    if version < (1, 26):
        served.append(AUTOSCALING_V2BETA2)
    return served


def _joined(kind: str, name: str, errors: list[str]) -> Invalid:
    detail = errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"
    return Invalid(f'{kind} "{name}" is invalid: {detail}')


def deployment_errors(deployment: KubeObject) -> list[str]:
    """What kube-apiserver v1.20's apps validation says about a Deployment (the parts the portal can get wrong)."""
    errors: list[str] = []
    metadata = deployment.get("metadata") or {}
    name = str(metadata.get("name") or "")
    if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f"metadata.name: {SUBDOMAIN_HELP}")
    for key, value in (metadata.get("labels") or {}).items():
        if problem := label_problem(key, value):
            errors.append(f"metadata.labels: {problem}")
    spec = deployment.get("spec") or {}
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or replicas < 0:
        errors.append(f"spec.replicas: Invalid value: {replicas}: must be greater than or equal to 0")
    match_labels = (spec.get("selector") or {}).get("matchLabels") or {}
    if not match_labels and not (spec.get("selector") or {}).get("matchExpressions"):
        errors.append("spec.selector: Required value")
    template = spec.get("template") or {}
    template_labels = (template.get("metadata") or {}).get("labels") or {}
    if any(template_labels.get(k) != v for k, v in match_labels.items()):
        errors.append(
            f"spec.template.metadata.labels: Invalid value: {template_labels!r}: `selector` does not match template "
            "`labels`"
        )
    pod_spec = template.get("spec") or {}
    if pod_spec.get("restartPolicy", "Always") != "Always":
        errors.append(f'spec.template.spec.restartPolicy: Unsupported value: "{pod_spec["restartPolicy"]}": '
                      'supported values: "Always"')  # fmt: skip
    containers = pod_spec.get("containers") or []
    if not containers:
        errors.append("spec.template.spec.containers: Required value")
    for index, container in enumerate(containers):
        path = f"spec.template.spec.containers[{index}]"
        if not container.get("name"):
            errors.append(f"{path}.name: Required value")
        if not container.get("image"):
            errors.append(f"{path}.image: Required value")
        errors.extend(_resource_errors(path, container.get("resources") or {}))
    errors.extend(secret_reference_errors(pod_spec))
    strategy = spec.get("strategy") or {}
    kind = strategy.get("type", "RollingUpdate")
    if kind not in ("RollingUpdate", "Recreate"):
        errors.append(f'spec.strategy.type: Unsupported value: "{kind}": supported values: "Recreate", '
                      '"RollingUpdate"')  # fmt: skip
    rolling = strategy.get("rollingUpdate") or {}
    if kind == "Recreate" and rolling:
        errors.append("spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` is "
                      "'Recreate'")  # fmt: skip
    amounts = {}
    for field in ("maxSurge", "maxUnavailable"):
        value = rolling.get(field)
        if value is None:
            amounts[field] = None
            continue
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            amounts[field] = value
        elif isinstance(value, str) and (m := _INT_OR_PERCENT.fullmatch(value)):
            amounts[field] = int(m.group(1))
            if field == "maxUnavailable" and amounts[field] > 100:
                errors.append(f'spec.strategy.rollingUpdate.{field}: Invalid value: "{value}": must not be greater '
                              "than 100%")  # fmt: skip
        else:
            errors.append(f"spec.strategy.rollingUpdate.{field}: Invalid value: {value!r}: must be a non-negative "
                          "integer or a percentage such as '25%'")  # fmt: skip
    if amounts.get("maxSurge") == 0 and amounts.get("maxUnavailable") == 0:
        errors.append("spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when `maxSurge` "
                      "is 0")  # fmt: skip
    for field in ("revisionHistoryLimit", "minReadySeconds", "progressDeadlineSeconds"):
        value = spec.get(field)
        if value is not None and (not isinstance(value, int) or value < 0):
            errors.append(f"spec.{field}: Invalid value: {value}: must be greater than or equal to 0")
    return errors


def hpa_errors(hpa: KubeObject, served: list[str]) -> list[str]:
    errors: list[str] = []
    name = str((hpa.get("metadata") or {}).get("name") or "")
    if not name or len(name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(name):
        errors.append(f"metadata.name: {SUBDOMAIN_HELP}")
    spec = hpa.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    if not ref.get("kind"):
        errors.append("spec.scaleTargetRef.kind: Required value")
    if not ref.get("name"):
        errors.append("spec.scaleTargetRef.name: Required value")
    minimum, maximum = spec.get("minReplicas", 1), spec.get("maxReplicas")
    if not isinstance(minimum, int) or minimum < 1:
        errors.append(f"spec.minReplicas: Invalid value: {minimum}: must be greater than or equal to 1")
    if not isinstance(maximum, int) or maximum < 1:
        errors.append(f"spec.maxReplicas: Invalid value: {maximum}: must be greater than 0")
    elif isinstance(minimum, int) and maximum < minimum:
        errors.append(f"spec.maxReplicas: Invalid value: {maximum}: must be greater than or equal to `minReplicas`")
    for index, metric in enumerate(spec.get("metrics") or []):
        kind = metric.get("type")
        path = f"spec.metrics[{index}]"
        if kind not in ("Resource", "Pods", "External", "Object", "ContainerResource"):
            errors.append(f'{path}.type: Unsupported value: "{kind}": supported values: "ContainerResource", '
                          '"External", "Object", "Pods", "Resource"')  # fmt: skip
            continue
        body = metric.get(kind[0].lower() + kind[1:]) or {}
        if not body:
            errors.append(f"{path}.{kind[0].lower() + kind[1:]}: Required value: must populate information for the "
                          "given metric source")  # fmt: skip
            continue
        target = body.get("target") or {}
        if target.get("type") not in ("Utilization", "Value", "AverageValue"):
            errors.append(f"{path}.{kind[0].lower() + kind[1:]}.target.type: Required value: must specify a metric "
                          "target type")  # fmt: skip
        if kind in ("Pods", "External") and not (body.get("metric") or {}).get("name"):
            errors.append(f"{path}.{kind.lower()}.metric.name: Required value: must specify a metric name")
    return errors


class AppsAPI:
    """Deployments, ReplicaSets and HorizontalPodAutoscalers of the simulated API server (mixed into
    SimulatedCluster)."""

    _store: Store

    # Deployments --------------------------------------------------------------------------------------------------
    def apply_deployment(self, manifest: KubeObject) -> KubeObject:
        deployment = clone(manifest)
        if deployment.get("apiVersion") != "apps/v1" or deployment.get("kind") != "Deployment":
            raise Invalid(
                f"Expected an apps/v1 Deployment, not {deployment.get('apiVersion')}/{deployment.get('kind')}."
            )
        metadata = deployment.setdefault("metadata", {})
        namespace, name = metadata.get("namespace") or "default", str(metadata.get("name") or "")
        errors = deployment_errors(deployment)
        if errors:
            raise _joined("Deployment.apps", name, errors)
        spec = deployment["spec"]
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", DEFAULT_HISTORY_LIMIT)
        spec.setdefault("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE)
        strategy = spec.setdefault("strategy", {"type": "RollingUpdate"})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxSurge", "25%")
            rolling.setdefault("maxUnavailable", "25%")
        pod_spec = spec["template"]["spec"]
        pod_spec.setdefault("restartPolicy", "Always")
        pod_spec.setdefault("dnsPolicy", "ClusterFirst")
        pod_spec.setdefault("schedulerName", "default-scheduler")
        pod_spec.setdefault("securityContext", {})
        pod_spec.setdefault("terminationGracePeriodSeconds", 30)
        for container in pod_spec["containers"]:
            resources = container.setdefault("resources", {})
            for resource, value in (resources.get("limits") or {}).items():
                resources.setdefault("requests", {}).setdefault(resource, value)  # requests default to limits
            container.setdefault("terminationMessagePath", "/dev/termination-log")
            container.setdefault("terminationMessagePolicy", "File")
        with self._store.transaction() as tx:
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            stored = tx.state.setdefault("deployments", {})
            key = object_key(namespace, name)
            existing = stored.get(key)
            if existing is None:
                deployment["metadata"] = {**metadata, **new_metadata(tx, name, namespace), "generation": 1}
                deployment["status"] = {}
                stored[key] = deployment
            else:
                if existing["spec"]["selector"] != spec["selector"]:
                    raise _joined("Deployment.apps", name, [
                        f"spec.selector: Invalid value: {spec['selector']!r}: field is immutable"])  # fmt: skip
                kept = existing["metadata"]
                annotations = {**(metadata.get("annotations") or {})}
                if DEPLOYMENT_REVISION_ANNOTATION in (kept.get("annotations") or {}):
                    # The controller's revision annotation stays (kubectl apply merges it in the same way).
                    annotations.setdefault(
                        DEPLOYMENT_REVISION_ANNOTATION, kept["annotations"][DEPLOYMENT_REVISION_ANNOTATION]
                    )
                kept.update(labels=metadata.get("labels") or {}, annotations=annotations)
                if existing["spec"] != spec:
                    existing["spec"] = spec
                    kept["generation"] = kept.get("generation", 1) + 1
                touch(tx, existing)
            settle(tx)  # ReplicaSets, pods, binds
            return clone(stored[key])

    def get_deployment(self, namespace: str, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            return clone(self._deployment(tx, namespace, name))

    def list_deployments(self, namespace: str | None = None, label_selector: str | None = MANAGED_SELECTOR) -> list[
            KubeObject]:  # fmt: skip
        requirements = parse_label_selector(label_selector)
        with self._store.transaction() as tx:
            return [
                clone(d)
                for _, d in sorted(tx.state.get("deployments", {}).items())
                if (namespace is None or d["metadata"]["namespace"] == namespace)
                and requirements_match(requirements, d["metadata"].get("labels"))
            ]

    def delete_deployment(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            if tx.state.setdefault("deployments", {}).pop(object_key(namespace, name), None) is None:
                return False
            bump_rv(tx)
            settle(tx)  # the garbage collector removes its ReplicaSets and their pods (background propagation)
            return True

    def scale_deployment(self, namespace: str, name: str, replicas: int) -> KubeObject:
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise Invalid(f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: {replicas}: must be '
                          "greater than or equal to 0")  # fmt: skip
        return self._update_spec(namespace, name, lambda spec: spec.update(replicas=replicas))

    def set_deployment_paused(self, namespace: str, name: str, paused: bool) -> KubeObject:
        def change(spec: dict[str, Any]) -> None:
            if paused:
                spec["paused"] = True
            else:
                spec.pop("paused", None)

        return self._update_spec(namespace, name, change)

    def rollback_deployment(self, namespace: str, name: str, to_revision: int = 0) -> KubeObject:
        with self._store.transaction() as tx:
            deployment = self._deployment(tx, namespace, name)
            history = sorted(
                (revision_of(rs), rs) for _, rs in owned_replicasets(tx.state, deployment) if revision_of(rs) > 0
            )  # fmt: skip
            current = revision_of(deployment)
            if to_revision:
                chosen = next((rs for revision, rs in history if revision == to_revision), None)
                if chosen is None:
                    raise NotFound(f"unable to find specified revision {to_revision} in history")
            else:
                older = [rs for revision, rs in history if revision < current]
                if not older:
                    raise NotFound("no rollout history found for deployment "
                                   f'"{name}": there is no previous revision to roll back to')  # fmt: skip
                chosen = older[-1]
            template = without_hash(chosen["spec"]["template"])
            labels = template.get("metadata", {}).get("labels")
            if isinstance(labels, dict):
                labels.pop(POD_TEMPLATE_HASH_LABEL, None)
            if deployment["spec"]["template"] != template:
                deployment["spec"]["template"] = template
                deployment["metadata"]["generation"] = deployment["metadata"].get("generation", 1) + 1
                touch(tx, deployment)
                settle(tx)
            return clone(deployment)

    def list_replica_sets(self, namespace: str, deployment_name: str) -> list[KubeObject]:
        with self._store.transaction() as tx:
            deployment = self._deployment(tx, namespace, deployment_name)
            return [clone(rs) for _, rs in owned_replicasets(tx.state, deployment)]

    def _deployment(self, tx: Txn, namespace: str, name: str) -> KubeObject:
        deployment = tx.state.get("deployments", {}).get(object_key(namespace, name))
        if deployment is None:
            raise NotFound(f'deployments.apps "{name}" not found')
        return deployment

    def _update_spec(self, namespace: str, name: str, change) -> KubeObject:
        with self._store.transaction() as tx:
            deployment = self._deployment(tx, namespace, name)
            before = clone(deployment["spec"])
            change(deployment["spec"])
            if deployment["spec"] != before:
                deployment["metadata"]["generation"] = deployment["metadata"].get("generation", 1) + 1
                touch(tx, deployment)
                settle(tx)
            return clone(deployment)

    # HorizontalPodAutoscalers -------------------------------------------------------------------------------------
    def autoscaling_api(self) -> str:
        with self._store.transaction() as tx:
            served = served_autoscaling_versions(_minor(tx))
        return served[0]

    def metrics_apis(self) -> frozenset[str]:
        """The scenario's ``metrics_apis`` (which adapters the simulated cluster has); all of them by default."""
        with self._store.transaction() as tx:
            listed = (tx.state.get("scenario") or {}).get("metrics_apis")
        return frozenset(METRICS_APIS if listed is None else [g for g in listed if g in METRICS_APIS])

    def api_groups(self) -> frozenset[str]:
        """The groups every simulated server serves (apps, batch, autoscaling, networking.k8s.io), its metrics APIs,
        and the scenario's ``api_groups`` (for example ``nvidia.com`` where the GPU Operator's ClusterPolicy is
        installed), ``resource.k8s.io`` from Kubernetes 1.34 on (DRA's stable API) and ``resource.nvidia.com`` where
        NVIDIA's DRA driver is installed (its ComputeDomain CRD)."""
        with self._store.transaction() as tx:
            extra = list((tx.state.get("scenario") or {}).get("api_groups") or [])
            if _minor(tx) >= RESOURCE_V1_SINCE:
                extra.append(RESOURCE_API_GROUP)
            if any(hw.get("dra") for hw in tx.state["hw"].values()):
                extra.append(NVIDIA_CONFIG_API_GROUP)
        return frozenset({"apps", "batch", "autoscaling", "networking.k8s.io", *self.metrics_apis(), *extra})

    def apply_hpa(self, manifest: KubeObject) -> KubeObject:
        hpa = clone(manifest)
        metadata = hpa.setdefault("metadata", {})
        namespace, name = metadata.get("namespace") or "default", str(metadata.get("name") or "")
        with self._store.transaction() as tx:
            served = served_autoscaling_versions(_minor(tx))
            if hpa.get("kind") != "HorizontalPodAutoscaler" or hpa.get("apiVersion") not in served:
                raise NotFound(f'the server could not find the requested resource: no matches for kind '
                               f'"{hpa.get("kind")}" in version "{hpa.get("apiVersion")}"')  # fmt: skip
            errors = hpa_errors(hpa, served)
            if errors:
                raise _joined("HorizontalPodAutoscaler.autoscaling", name, errors)
            if namespace not in tx.state["namespaces"]:
                raise NotFound(f'namespaces "{namespace}" not found')
            hpa["spec"].setdefault("minReplicas", 1)
            stored = tx.state.setdefault("hpas", {})
            key = object_key(namespace, name)
            existing = stored.get(key)
            if existing is None:
                hpa["metadata"] = {**metadata, **new_metadata(tx, name, namespace)}
                hpa["status"] = {"currentReplicas": 0, "desiredReplicas": 0}
                stored[key] = hpa
            else:
                existing["apiVersion"] = hpa["apiVersion"]
                existing["metadata"].update(labels=metadata.get("labels") or {},
                                            annotations=metadata.get("annotations") or {})  # fmt: skip
                existing["spec"] = hpa["spec"]
                touch(tx, existing)
            settle(tx)
            return clone(stored[key])

    def get_hpa(self, namespace: str, name: str) -> KubeObject:
        with self._store.transaction() as tx:
            hpa = tx.state.get("hpas", {}).get(object_key(namespace, name))
            if hpa is None:
                raise NotFound(f'horizontalpodautoscalers.autoscaling "{name}" not found')
            return clone(hpa)

    def delete_hpa(self, namespace: str, name: str) -> bool:
        with self._store.transaction() as tx:
            if tx.state.setdefault("hpas", {}).pop(object_key(namespace, name), None) is None:
                return False
            bump_rv(tx)
            return True
