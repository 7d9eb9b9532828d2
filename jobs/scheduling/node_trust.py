"""Why the nodes placement leaves out are not used, in a wait's words (issue 16, "Node operations"): a node whose
GPU stack cannot take work now (gpus.diagnosis.blocking_reason: not Ready, a failed MIG configuration or driver
upgrade, a diagnosis error ...) is no placement input for any kind; a job that waits says which nodes of its
class are kept off and why. Pure Python over admission's NodeViews."""

from __future__ import annotations

from collections import defaultdict


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
