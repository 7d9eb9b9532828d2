"""A pod's effective requests and QoS class, as the API server and scheduler read them, and its rank in a
distributed job.

Not a component: pure functions over values, shared by admission, the scheduler, the kubelet and the GPU
Operator. Quantities are parsed by ``vocab.quantity``; ``decode_quantity`` only adds what the API server does
while decoding a manifest.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction
from typing import Any

from vocab.names import (
    CPU_RESOURCE,
    HUGEPAGES_RESOURCE_PREFIX,
    JOB_COMPLETION_INDEX_ANNOTATION,
    KUBERNETES_IO_PREFIX,
    MEMORY_RESOURCE,
    NO_EXECUTE,
    NOT_READY_TAINT_KEY,
    UNREACHABLE_TAINT_KEY,
)
from vocab.quantity import parse_quantity

from ..base import KubeObject
from .store import object_key


def decode_quantity(value: Any) -> Fraction:
    """A quantity as the API server decodes it from a manifest: ``Quantity.UnmarshalJSON`` trims surrounding
    whitespace before parsing, so " 2" is 2. Raises ``vocab.quantity.InvalidQuantity`` (a ValueError)."""
    return parse_quantity(value.strip() if isinstance(value, str) else value)


def pod_requests(spec: dict[str, Any]) -> dict[str, Fraction]:
    """Effective requests as the scheduler sums them: containers added, init containers as a maximum."""
    total: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        for name, value in container_requests(container).items():
            total[name] += value
    for container in spec.get("initContainers") or []:
        for name, value in container_requests(container).items():
            total[name] = max(total[name], value)
    for name, value in (spec.get("overhead") or {}).items():
        total[name] += decode_quantity(value)
    return dict(total)


def container_requests(container: dict[str, Any]) -> dict[str, Fraction]:
    resources = container.get("resources") or {}
    merged = dict(resources.get("limits") or {})
    merged.update(resources.get("requests") or {})
    return {name: decode_quantity(value) for name, value in merged.items()}


def is_extended(resource: str) -> bool:
    return (
        "/" in resource
        and not resource.startswith((KUBERNETES_IO_PREFIX, "requests."))
        and not resource.startswith(HUGEPAGES_RESOURCE_PREFIX)
    )


def qos_class(spec: dict[str, Any]) -> str:
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    guaranteed, any_set = True, False
    for container in containers:
        resources = container.get("resources") or {}
        requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in (CPU_RESOURCE, MEMORY_RESOURCE):
            if name not in limits or decode_quantity(requests.get(name, limits[name])) != decode_quantity(limits[name]):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def pod_rank(pod: KubeObject) -> int | None:
    """The pod's rank in a distributed job: its Indexed Job completion index, else the NODE_RANK its container
    is given (torchrun's variable; one Job per rank on older servers), else None."""
    index = (pod["metadata"].get("annotations") or {}).get(JOB_COMPLETION_INDEX_ANNOTATION)
    if index is None:
        container = pod["spec"]["containers"][0]
        index = next((e.get("value") for e in container.get("env") or [] if e.get("name") == "NODE_RANK"), None)
    try:
        return int(index) if index is not None else None
    except ValueError:
        return None


def store_new_pod(tx, namespace: str, name: str, metadata: dict, spec: dict, owner: dict[str, Any]) -> KubeObject:
    """A controller's new Pod as the API server stores it: the defaults it fills in (service account, priority,
    service links, preemption policy, and the DefaultTolerationSeconds admission plugin's tolerations of the
    not-ready and unreachable taints), Pending with its QoS class; plus the simulator's bookkeeping, ``owner``
    naming the controller's object (``{"job": key}`` or ``{"replicaset": key}``)."""
    spec.setdefault("serviceAccountName", "default")
    spec.setdefault("serviceAccount", spec["serviceAccountName"])
    spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)
    spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
    tolerations = spec.setdefault("tolerations", [])
    for taint_key in (NOT_READY_TAINT_KEY, UNREACHABLE_TAINT_KEY):
        if not any(t.get("key") == taint_key and t.get("effect") == NO_EXECUTE for t in tolerations):
            tolerations.append({"key": taint_key, "operator": "Exists", "effect": NO_EXECUTE, "tolerationSeconds": 300})
    pod: KubeObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Pending", "qosClass": qos_class(spec)},
    }
    key = object_key(namespace, name)
    tx.state["pods"][key] = pod
    tx.state["podsim"][key] = {
        "created": tx.now,
        "created_rv": int(metadata["resourceVersion"]),
        "stage": "pending",
        "bound": None,
        **owner,
    }
    return pod
