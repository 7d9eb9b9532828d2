"""The node lifecycle controller (with its taint manager) and the pod garbage collector for nodes.

Reads each Node's ``hw`` record (whether its kubelet is healthy: ``ready``, ``not_ready_since``), the Node's
Ready condition, and the pods bound to it with their tolerations. Writes the Node's conditions and the
``node.kubernetes.io/not-ready`` NoSchedule/NoExecute taints when readiness changes, deletes pods from a node
NotReady for longer than the pod tolerates (``tolerationSeconds``, 300 s by default; TaintManagerEviction and
the owning Job's SuccessfulDelete events), and deletes pods bound to a node that no longer exists.
"""

from __future__ import annotations

import math

from vocab.names import (
    NO_EXECUTE,
    NOT_READY_TAINT_KEY,
)

from ..base import KubeObject
from .constants import TERMINAL
from .events import record_event
from .nodes import ready_condition_status, set_ready_status
from .selectors import toleration_matches
from .store import Txn, delete_pod, touch


def reconcile(tx: Txn) -> None:
    """One round: node conditions and taints, pods of deleted nodes, then evictions that are due."""
    state = tx.state
    for name, hw in state["hw"].items():
        node = state["nodes"].get(name)
        if node is None:
            continue
        if "ready_posted" not in hw:
            hw["ready_posted"] = ready_condition_status(node)  # what the Node said when this controller met it
        ready = hw.get("ready", True)
        if hw["ready_posted"] != ready:
            hw["ready_posted"] = ready
            set_ready_status(node, ready, tx.now, pressure=hw.get("pressure"))
            touch(tx, node)
    for key, pod in list(state["pods"].items()):
        node_name = pod["spec"].get("nodeName")
        if node_name and node_name not in state["nodes"]:
            delete_pod(tx, key)
    # Taint-based eviction: pods on nodes NotReady for longer than their toleration.
    for node_name, hw in state["hw"].items():
        since = hw.get("not_ready_since")
        if since is None or hw.get("ready", True):
            continue
        for key, pod in list(state["pods"].items()):
            if pod["spec"].get("nodeName") != node_name or pod["status"].get("phase") in TERMINAL:
                continue
            if tx.now >= _eviction_time(tx, key, pod, since):
                job = state["jobs"].get(state["podsim"].get(key, {}).get("job") or "")
                if job is not None:
                    message = f"Deleted pod: {pod['metadata']['name']}"
                    record_event(tx, job, "Normal", "SuccessfulDelete", message, "job-controller")
                message = f"Marking for deletion Pod {key}"
                record_event(tx, pod, "Normal", "TaintManagerEviction", message, "taint-controller")
                delete_pod(tx, key)


def next_due(tx: Txn) -> float | None:
    """The next eviction from a NotReady node."""
    state = tx.state
    times: list[float] = []
    for node_name, hw in state["hw"].items():
        if hw.get("not_ready_since") is not None and not hw.get("ready", True):
            for key, pod in state["pods"].items():
                if pod["spec"].get("nodeName") == node_name and pod["status"].get("phase") not in TERMINAL:
                    evict_at = _eviction_time(tx, key, pod, hw["not_ready_since"])
                    if evict_at != math.inf:
                        times.append(evict_at)
    return min(times) if times else None


def _toleration_seconds(pod: KubeObject) -> float:
    """How long the pod may stay on a NotReady node: 0 if it does not tolerate the NoExecute taint at all."""
    taint = {"key": NOT_READY_TAINT_KEY, "effect": NO_EXECUTE}
    seconds = [
        float(t["tolerationSeconds"]) if t.get("tolerationSeconds") is not None else math.inf
        for t in pod["spec"].get("tolerations") or []
        if toleration_matches(t, taint)
    ]
    return max(0.0, min(seconds)) if seconds else 0.0


def _eviction_time(tx: Txn, key: str, pod: KubeObject, not_ready_since: float) -> float:
    """The taint manager evicts tolerationSeconds after it saw both the NoExecute taint and the pod there."""
    bound = tx.state["podsim"].get(key, {}).get("bound") or not_ready_since
    return max(not_ready_since, bound) + _toleration_seconds(pod)
