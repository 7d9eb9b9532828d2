"""What node operations tell webhooks (core.webhooks). A node's reconfiguration is a cluster-wide fact, not
one team's: it is emitted with no team and reaches every team's webhooks that subscribed to node_operation.*. Its
data names the node and the cluster of the fleet the node belongs to (``cluster``)."""

from __future__ import annotations

from core import webhooks

EVENTS = {
    "node_operation.started": "A GPU reconfiguration of a node was requested (the node takes no new work)",
    "node_operation.applied": "A node's GPU reconfiguration finished",
    "node_operation.failed": "A node's GPU reconfiguration failed",
    "node_operation.reverted": "A revert of a GPU reconfiguration was requested",
    "node_operation.aborted": "An admin aborted a node's GPU reconfiguration before anything was written",
    "node_operation.forced": "An admin forced a node's drain: the portal's work on it is stopped now",
}


def operation(op, event_type: str, *, actor=None, reason: str = "") -> None:
    state, url = op.state, webhooks.absolute(op.get_absolute_url())

    def facts() -> dict:  # the node's and its cluster's names are read after commit, only when a webhook takes it
        name, cluster = op.node.name, op.node.cluster.name
        return {"operation": op.pk, "node": name, "cluster": cluster, "kind": op.kind, "state": state, "url": url,
                "name": f"{op.get_kind_display()} on {name}"}  # fmt: skip

    webhooks.emit(None, event_type, facts, actor=actor, reason=reason)
