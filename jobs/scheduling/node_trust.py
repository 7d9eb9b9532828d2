"""Why the nodes placement leaves out are not used, in a wait's words (issue 16, "Node operations"): a node whose
GPU stack cannot take work now (gpus.diagnosis.blocking_reason: not Ready, a failed MIG configuration or driver
upgrade, a diagnosis error ...) is no placement input for any kind; a job that waits says which nodes of its
class are kept off and why. Pure Python over admission's NodeViews.

The taint gate (issue 31, item 16): the portal never places work on a node with a NoSchedule or NoExecute taint
that the pod it would render there does not tolerate (``untolerated``), since the scheduler would leave that pod
Pending for ever. The tolerations are the ones rendering gives the pod on that node (the GPU-keeping taints of its
pool, vocab.taints); the controllers' own taints (cordon, not-ready, pressure) are left to the node's conditions."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from vocab.taints import Taint, repelling, tolerates


def untolerated(taints: Iterable[Taint], tolerations: Iterable[dict]) -> list[Taint]:
    """The node's NoSchedule/NoExecute taints that no toleration of the pod matches (Kubernetes' rule), in order."""
    tolerations = list(tolerations)
    return [t for t in repelling(taints) if not any(tolerates(toleration, t) for toleration in tolerations)]


def taint_reason(taints: list[Taint], pool: str) -> str:
    """Why placement keeps work off a node with taints its pods do not tolerate, in a wait's words ("" for none)."""
    if not taints:
        return ""
    shown = ("the taint " if len(taints) == 1 else "the taints ") + ", ".join(str(t) for t in taints)
    where = f"node pool {pool}" if pool else "the nodes without a pool label"
    return (
        f"it has {shown}, which the portal's pods do not tolerate, so they would never be scheduled "
        f"there (an admin can declare the taint for {where} under Admin, Node pools, if GPU work belongs there)"
    )


def kept_off(nodes, team: int) -> dict[str, list[str]]:
    """Reason → the names of the nodes of ``nodes`` the team may use that placement keeps work off."""
    out: dict[str, list[str]] = defaultdict(list)
    for node in nodes:
        if node.kept_off and (node.team is None or node.team == team):
            out[node.kept_off].append(node.name)
    return dict(out)


def kept_off_sentence(reasons: dict[str, list[str]], limit: int = 5) -> str:
    """ " The portal keeps work off gpu-a, gpu-b: <reason>." per reason ("" when none), at most ``limit`` names
    per reason."""
    parts = []
    for reason, names in sorted(reasons.items()):
        shown = ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
        parts.append(f" The portal keeps work off {shown}: {reason}.")
    return "".join(parts)
