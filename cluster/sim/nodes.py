"""How a Node object's status and taints look for a given Ready state and cordon (spec.unschedulable).

Not a component: object-shaping helpers shared by node registration (scenario), ``kubectl cordon`` (the API)
and the node lifecycle controller (conditions and the not-ready taints it maintains).
"""

from __future__ import annotations

from vocab.names import (
    DISK_PRESSURE_CONDITION,
    MEMORY_PRESSURE_CONDITION,
    NETWORK_UNAVAILABLE_CONDITION,
    NO_EXECUTE,
    NO_SCHEDULE,
    NOT_READY_TAINT_KEY,
    PID_PRESSURE_CONDITION,
    PRESSURE_CONDITION_TAINTS,
    READY_CONDITION,
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


#: The kubelet's reasons and messages for a pressure condition that holds (pkg/kubelet/nodestatus/setters.go).
PRESSURE_TRUE = {
    MEMORY_PRESSURE_CONDITION: ("KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    DISK_PRESSURE_CONDITION: ("KubeletHasDiskPressure", "kubelet has disk pressure"),
    PID_PRESSURE_CONDITION: ("KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
    NETWORK_UNAVAILABLE_CONDITION: ("NoRouteCreated", "Node created without a route"),
}


def set_ready_status(
    node: KubeObject, ready: bool, now: float, since: float | None = None, pressure: list[str] | None = None
) -> None:
    """Conditions and condition taints of a node; ``pressure``: the conditions other than Ready that hold."""
    pressure = list(pressure or [])
    stamp = timestamp(now)
    since_stamp = timestamp(since if since is not None else now)
    ready_condition = {
        "type": READY_CONDITION,
        "status": "True" if ready else "False",
        "lastHeartbeatTime": stamp,
        "lastTransitionTime": stamp,
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status"
        if ready
        else "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady "
        "message:Network plugin returns error: cni plugin not initialized",
    }
    kinds = [
        (MEMORY_PRESSURE_CONDITION, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        (DISK_PRESSURE_CONDITION, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        (PID_PRESSURE_CONDITION, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ]
    conditions = node["status"].get("conditions") or []
    previous = {c["type"]: c for c in conditions}
    if NETWORK_UNAVAILABLE_CONDITION in pressure:
        kinds.insert(0, (NETWORK_UNAVAILABLE_CONDITION, "RouteCreated", "RouteController created a route"))
    node["status"]["conditions"] = [
        {
            "type": kind,
            "status": "True" if kind in pressure else "False",
            "lastHeartbeatTime": stamp,
            "lastTransitionTime": previous.get(kind, {}).get("lastTransitionTime", since_stamp),
            "reason": PRESSURE_TRUE[kind][0] if kind in pressure else reason,
            "message": PRESSURE_TRUE[kind][1] if kind in pressure else message,
        }
        for kind, reason, message in kinds
    ] + [ready_condition]
    # The node lifecycle controller taints NotReady nodes (TaintNodesByCondition / taint-based eviction).
    spec = node["spec"]
    condition_taints = {NOT_READY_TAINT_KEY, *PRESSURE_CONDITION_TAINTS.values()}
    taints = [t for t in spec.get("taints") or [] if t.get("key") not in condition_taints]
    for kind in pressure:
        taints.append({"key": PRESSURE_CONDITION_TAINTS[kind], "effect": NO_SCHEDULE})
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
