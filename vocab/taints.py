"""Node taints: their syntax, the toleration rule, the node pool a node belongs to, and which taints keep general
work off GPU nodes (the GPU Operator's, GKE's, EKS's and AKS's conventions).

A GPU workload must tolerate exactly the GPU-keeping taints of the node pools it may land on, and nothing else: a
taint the portal does not know (a team's dedicated pool, a spot pool) keeps the portal's work off that node unless an
admin declares it for the pool (gpus.models.NodePool). The conventions, each with its source:

- NVIDIA GPU Operator / device plugin: ``nvidia.com/gpu`` with the effect NoSchedule, the value usually ``present``
  (GPU Operator "Getting Started" and k8s-device-plugin README recommend tainting GPU nodes with the resource
  name; the same key is what Kubernetes' ExtendedResourceToleration admission plugin tolerates for pods asking for
  the resource: Kubernetes "Taints and Tolerations", "Example use cases: nodes with special hardware").
- GKE: when a GPU node pool is added to a cluster that also has non-GPU pools, GKE taints its nodes
  ``nvidia.com/gpu=present:NoSchedule`` itself (GKE "About GPUs in GKE" / "Run GPUs in Standard node pools",
  https://cloud.google.com/kubernetes-engine/docs/how-to/gpus; the same fact is restated in KServe's
  docs/samples/accelerators: "GKE automatically taints the GPU nodes ... Key: nvidia.com/gpu, Effect: NoSchedule").
  The pool label is ``cloud.google.com/gke-nodepool`` (vocab.names).
- EKS: EKS adds no GPU taint of its own; managed node groups take taints through the EKS API (EKS "Recipe: Prevent
  pods from being scheduled on specific nodes", https://docs.aws.amazon.com/eks/latest/userguide/
  node-taints-managed-node-groups.html, which names GPU nodes as the case; taint keys and values up to 63
  characters, effects NO_SCHEDULE / NO_EXECUTE / PREFER_NO_SCHEDULE: EKS API reference "Taint"). The convention
  on NVIDIA AMIs and in Karpenter GPU NodePools is the NVIDIA one, ``nvidia.com/gpu:NoSchedule`` (any value).
  The pool label is ``eks.amazonaws.com/nodegroup`` (EKS "Managed node groups").
- AKS: AKS adds no GPU taint either; its docs create GPU node pools with ``--node-taints sku=gpu:NoSchedule``
  ("Use GPUs on AKS"; "Best practices for advanced scheduler features", https://learn.microsoft.com/azure/aks/
  operator-best-practices-advanced-scheduler; "Use node taints", https://learn.microsoft.com/azure/aks/
  use-node-taints). The pool label is ``kubernetes.azure.com/agentpool``, and the older ``agentpool``.

Taints Kubernetes' own controllers put on nodes (cordon, not-ready, unreachable, pressure) are not pool taints:
they come with conditions the portal reads directly (Ready, spec.unschedulable, pressure), so placement and the
diagnosis use those instead.

Pure Python; no Django, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vocab.names import (
    AKS_AGENTPOOL_LABEL,
    AKS_GPU_TAINT_KEY,
    AKS_GPU_TAINT_VALUE,
    AKS_LEGACY_AGENTPOOL_LABEL,
    EKS_NODEGROUP_LABEL,
    GKE_NODEPOOL_LABEL,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    NO_EXECUTE,
    NO_SCHEDULE,
    NOT_READY_TAINT_KEY,
    PREFER_NO_SCHEDULE,
    PRESSURE_CONDITION_TAINTS,
    UNREACHABLE_TAINT_KEY,
    UNSCHEDULABLE_TAINT_KEY,
    is_label_value,
    is_qualified_name,
)

#: Every taint effect Kubernetes knows.
EFFECTS = (NO_SCHEDULE, PREFER_NO_SCHEDULE, NO_EXECUTE)
#: The effects that keep a pod off a node it does not tolerate (PreferNoSchedule only steers).
REPELLING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})
#: Taints the node controllers add and remove with the node's conditions and cordon.
CONTROLLER_TAINT_KEYS = frozenset(
    {UNSCHEDULABLE_TAINT_KEY, NOT_READY_TAINT_KEY, UNREACHABLE_TAINT_KEY, *PRESSURE_CONDITION_TAINTS.values()}
)
#: The node labels that name a node's pool, most specific first: GKE, EKS managed node groups, AKS (both spellings).
POOL_LABELS = (GKE_NODEPOOL_LABEL, EKS_NODEGROUP_LABEL, AKS_AGENTPOOL_LABEL, AKS_LEGACY_AGENTPOOL_LABEL)


@dataclass(frozen=True, order=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"

    @classmethod
    def of(cls, taint: dict[str, Any]) -> Taint:
        """From a Node's ``spec.taints`` entry (or a stored one)."""
        return cls(str(taint.get("key") or ""), str(taint.get("value") or ""), str(taint.get("effect") or ""))

    def as_dict(self) -> dict[str, str]:
        out = {"key": self.key, "effect": self.effect}
        if self.value:
            out["value"] = self.value
        return out

    @property
    def repels(self) -> bool:
        """Whether a pod that does not tolerate it is kept off the node."""
        return self.effect in REPELLING_EFFECTS


@dataclass(frozen=True)
class Convention:
    """A GPU-keeping taint a GPU stack or a cloud puts on GPU nodes: ``key``, and ``value`` ("" for any value)."""

    key: str
    value: str
    owner: str

    def matches(self, taint: Taint) -> bool:
        return taint.key == self.key and (not self.value or taint.value == self.value) and taint.repels


#: The conventions, in the module docstring's order (GKE and EKS use the NVIDIA key; their rows say where it comes
#: from).
CONVENTIONS = (
    Convention(GPU_TAINT_KEY, "", "NVIDIA GPU Operator / device plugin (GKE sets it as "
               f"{GPU_TAINT_KEY}={GPU_TAINT_VALUE}:{NO_SCHEDULE}; EKS node groups and Karpenter GPU pools use it)"),
    Convention(AKS_GPU_TAINT_KEY, AKS_GPU_TAINT_VALUE, "AKS GPU node pools"),
)  # fmt: skip


def convention_of(taint: Taint) -> Convention | None:
    """The convention that makes ``taint`` a GPU-keeping taint, or None."""
    return next((c for c in CONVENTIONS if c.matches(taint)), None)


def gpu_keeping(taints: Iterable[Taint]) -> list[Taint]:
    """The taints among ``taints`` that keep general work off a GPU node by one of the conventions."""
    return [t for t in taints if convention_of(t) is not None]


def pool_of(labels: dict[str, str]) -> str:
    """The node's pool from its provider's label ("" when it carries none of POOL_LABELS)."""
    return next((str(labels[key]) for key in POOL_LABELS if labels.get(key)), "")


def repelling(taints: Iterable[Taint]) -> list[Taint]:
    """The taints that keep an untolerating pod off the node, leaving out the controllers' condition taints."""
    return [t for t in taints if t.repels and t.key not in CONTROLLER_TAINT_KEYS]


def toleration(taint: Taint) -> dict[str, str]:
    """The toleration of exactly this taint (key, value and effect), never of the key's other values."""
    return {"key": taint.key, "operator": "Equal", "value": taint.value, "effect": taint.effect}


def tolerations_for(taints: Iterable[Taint]) -> list[dict[str, str]]:
    """The tolerations of exactly these taints, each once, in a stable order (never a blanket toleration)."""
    return [toleration(t) for t in sorted(set(taints))]


def tolerates(toleration: dict[str, Any], taint: Taint) -> bool:
    """Kubernetes' rule (core/v1 Toleration.ToleratesTaint): an empty effect matches every effect; an empty key with
    Exists matches every taint; Exists matches any value of the key; Equal (the default) needs the same value."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if not key:
        return operator == "Exists"
    if key != taint.key:
        return False
    return operator == "Exists" or (toleration.get("value") or "") == taint.value


def parse_taint(text: str) -> tuple[Taint | None, list[str]]:
    """``key[=value]:Effect`` (kubectl's spelling) → the taint, or None and every problem, each saying what to fix."""
    text = text.strip()
    body, colon, effect = text.rpartition(":")
    if not colon:
        return None, [f"{text!r} has no effect: write it as key=value:NoSchedule (or key:NoSchedule)."]
    key, _, value = body.partition("=")
    problems = []
    if not key:
        problems.append(f"{text!r} has no key before the '=' or ':'.")
    elif not is_qualified_name(key):
        problems.append(
            f"{text!r}: the key {key!r} is not a Kubernetes qualified name (an optional DNS prefix and '/', then at "
            "most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)."
        )
    if not is_label_value(value):
        problems.append(
            f"{text!r}: the value {value!r} is not a valid taint value (at most 63 letters, digits, '-', '_' and '.', "
            "starting and ending with a letter or digit)."
        )
    if effect not in EFFECTS:
        problems.append(f"{text!r}: the effect {effect!r} is not one of {', '.join(EFFECTS)}.")
    return (None, problems) if problems else (Taint(key, value, effect), [])


def parse_taints(lines: Iterable[str]) -> tuple[list[Taint], list[str]]:
    """One taint per non-empty line → the taints (sorted, without repeats), and every problem of every line."""
    taints: set[Taint] = set()
    problems = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        taint, found = parse_taint(line)
        problems += [f"Line {number}: {problem}" for problem in found]
        if taint is not None:
            taints.add(taint)
    return sorted(taints), problems
