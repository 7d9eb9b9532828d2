"""How a Node object's status and taints look for a given Ready state and cordon (spec.unschedulable).

Not a component: object-shaping helpers shared by node registration (scenario), ``kubectl cordon`` (the API)
and the node lifecycle controller (conditions and the not-ready taints it maintains).
"""

from __future__ import annotations

from vocab.names import (
    NO_EXECUTE,
    NO_SCHEDULE,
    NOT_READY_TAINT_KEY,
    UNSCHEDULABLE_TAINT_KEY,
)

from ..base import KubeObject
from .store import timestamp


def set_unschedulable(node: KubeObject, unschedulable: bool) -> None:
    spec = node["spec"]
    taints = [t for t in spec.get("taints") or [] if t.get("key") != UNSCHEDULABLE_TAINT_KEY]
    if unschedulable:
        spec["unschedulable"] = True
        taints.append({"key": UNSCHEDULABLE_TAINT_KEY, "effect": NO_SCHEDULE})
    else:
        spec.pop("unschedulable", None)
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)


def set_ready_status(node: KubeObject, ready: bool, now: float, since: float | None = None) -> None:
    stamp = timestamp(now)
    since_stamp = timestamp(since if since is not None else now)
    ready_condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status"
        if ready
        else "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
        "message:Network plugin returns error: cni plugin not initialized",
    }
    pressure = [
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions = node["status"].get("conditions") or []
    previous = {c["type"]: c for c in conditions}
    node["status"]["conditions"] = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": previous.get(kind, {}).get("lastTransitionTime", since_stamp),
            "reason": reason,
            "message": message,
        }
        for kind, reason, message in pressure
    ] + [ready_condition]
    # The node lifecycle controller taints NotReady nodes (TaintNodesByCondition / taint-based eviction).
    spec = node["spec"]
    taints = [t for t in spec.get("taints") or [] if t.get("key") != NOT_READY_TAINT_KEY]
    if not ready:
        taints.append({"key": NOT_READY_TAINT_KEY, "effect": NO_SCHEDULE})
        taints.append({"key": NOT_READY_TAINT_KEY, "effect": NO_EXECUTE, "timeAdded": stamp})
    if taints:
        spec["taints"] = taints
    else:
        spec.pop("taints", None)


def ready_condition_status(node: KubeObject) -> bool:
    """Whether the node's Ready condition says True (a node without one counts as Ready)."""
    conditions = node.get("status", {}).get("conditions") or []
    condition = next((c for c in conditions if c.get("type") == "Ready"), None)
    return condition is None or condition.get("status") == "True"
