"""kube-scheduler: filter, score and bind pending pods (v1.20 plugin order and messages).

Reads pending pods (no ``spec.nodeName``, phase Pending), Nodes (allocatable, taints, labels, cordon), the
pods already bound to each node (their requests) and PersistentVolumeClaims. Filters, in v1.20's order:
NodeUnschedulable, TaintToleration (every NoSchedule/NoExecute taint needs a matching toleration), NodeAffinity
(nodeSelector and required node affinity), NodeResourcesFit (cpu, memory, pods and extended resources such as
``nvidia.com/gpu`` and MIG devices), InterPodAffinity (the incoming pod's required pod anti-affinity);
VolumeBinding for missing or unbound claims; DynamicResources (resource.k8s.io, after the v1.20 set) for pods with
``spec.resourceClaims``: the claims must exist, and those not yet allocated must be allocatable together from the
node's ResourceSlices (cluster.sim.dra_allocator), else "cannot allocate all claims"; at the bind the allocation is
written to each claim's ``status.allocation`` and the pod added to its ``status.reservedFor``.
Scores with NodeResourcesLeastAllocated. Writes the binding (``spec.nodeName``, the pod's ``podsim`` stage
``bound`` and bind time), the ``Scheduled`` event, and for a pod that fits nowhere the ``PodScheduled=False``
condition and an aggregated ``FailedScheduling`` event. What happens on the node after a bind is the kubelet's.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from fractions import Fraction
from typing import Any

from vocab.names import (
    CPU_RESOURCE,
    EPHEMERAL_STORAGE_RESOURCE,
    MEMORY_RESOURCE,
    NO_EXECUTE,
    NO_SCHEDULE,
    PODS_RESOURCE,
    UNSCHEDULABLE_TAINT_KEY,
)

from ..base import KubeObject
from .constants import TERMINAL
from .dra_allocator import CANNOT_ALLOCATE, AllocationError, allocate, in_use, inventories, new_matcher
from .events import record_event
from .pod_resources import decode_quantity, pod_requests
from .selectors import (
    anti_affinity_conflict,
    node_affinity_matches,
    preferred_anti_affinity_weight,
    preferred_node_affinity_weight,
    tolerated,
)
from .store import Txn, object_key, timestamp, touch

#: How much a step down a claim's prioritized list (firstAvailable) costs a node's score: more than any other
#: score adds up to, so the node with the better alternative always wins.
PRIORITIZED_LIST_WEIGHT = 1000
#: The resources NodeResourcesFit reports before the extended ones (each group in name order).
_LISTED_FIRST = (CPU_RESOURCE, MEMORY_RESOURCE, EPHEMERAL_STORAGE_RESOURCE)


def _scheduling_signature(spec: dict[str, Any]) -> str:
    """Everything in a pod spec the scheduler's filters look at, hashed: equal signatures, equal verdicts."""
    fields = (
        "containers",
        "initContainers",
        "overhead",
        "tolerations",
        "nodeSelector",
        "affinity",
        "priority",
        "resourceClaims",
    )
    text = json.dumps([spec.get(field) for field in fields], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def reconcile(tx: Txn) -> None:
    # Like kube-scheduler's unschedulable queue: a pod that fitted nowhere is tried again at the next moment
    # (the next call, or the next thing due), not in every round while the clock settles this one.
    tried: set[str] = tx.memo.setdefault("scheduler.unschedulable", set())
    pending = [
        (key, pod)
        for key, pod in tx.state["pods"].items()
        if not pod["spec"].get("nodeName") and pod["status"].get("phase") == "Pending" and key not in tried
    ]
    if not pending:
        return
    pending.sort(
        key=lambda item: (
            -int(item[1]["spec"].get("priority") or 0),
            int(tx.state["podsim"].get(item[0], {}).get("created_rv") or 0),
            item[1]["metadata"]["creationTimestamp"],
            item[0],
        )
    )
    usage = _node_usage(tx)
    nodes = sorted(tx.state["nodes"].items())
    allocatable = {
        name: {resource: decode_quantity(v) for resource, v in (node["status"].get("allocatable") or {}).items()}
        for name, node in nodes
    }
    # Pods that ask for the same thing get the same answer until a bind changes the picture; the cache keeps
    # a long queue of identical pending pods from costing pods x nodes on every call.
    verdicts: dict[str, str] = {}
    node_index = dict(nodes)
    placed = [
        (p["spec"]["nodeName"], p["metadata"]["namespace"], p["metadata"].get("labels") or {})
        for p in tx.state["pods"].values()
        if p["spec"].get("nodeName") and p["status"].get("phase") not in TERMINAL
    ]
    dra = _DynamicResources(tx)
    for key, pod in pending:
        spec = pod["spec"]
        sim = tx.state["podsim"].setdefault(key, {})
        claims = tx.state.get("pvcs", {})
        wanted = [
            claim
            for volume in spec.get("volumes") or []
            if (claim := (volume.get("persistentVolumeClaim") or {}).get("claimName"))
        ]
        missing = [c for c in wanted if object_key(pod["metadata"]["namespace"], c) not in claims]
        if missing:
            # As kube-scheduler's VolumeBinding plugin: a pod whose claim does not exist waits, unscheduled.
            tried.add(key)
            _mark_unschedulable(
                tx, pod, f'0/{len(nodes)} nodes are available: persistentvolumeclaim "{missing[0]}" not found.'
            )
            continue
        unbound = [
            c
            for c in wanted
            if claims[object_key(pod["metadata"]["namespace"], c)].get("status", {}).get("phase") != "Bound"
        ]
        if unbound:
            # VolumeBinding's PreFilter (v1.20): claims of Immediate binding mode must be bound before the pod is
            # placed; every node gets the same answer, UnschedulableAndUnresolvable until the PV controller binds.
            tried.add(key)
            _mark_unschedulable(
                tx,
                pod,
                f"0/{len(nodes)} nodes are available: {len(nodes)} pod has unbound immediate PersistentVolumeClaims.",
            )
            continue
        pod_claims, unresolved = _pod_claims(tx, pod)
        if unresolved:
            # DynamicResources' PreFilter: a claim that does not exist (yet) keeps the pod off every node.
            tried.add(key)
            _mark_unschedulable(tx, pod, f"0/{len(nodes)} nodes are available: {unresolved}.")
            continue
        signature = sim.get("signature") or sim.setdefault("signature", _scheduling_signature(spec))
        if signature in verdicts and not pod_claims:
            tried.add(key)
            _mark_unschedulable(tx, pod, verdicts[signature])
            continue
        requests = pod_requests(spec)
        reasons: Counter[str] = Counter()
        best: tuple[Fraction, str] | None = None
        feasible: list[tuple[Fraction, str, int]] = []
        allocations: dict[str, tuple[list, int]] = {}
        unresolvable = None
        for node_name, node in nodes:
            failed = _filter_node(node, allocatable[node_name], spec, requests, usage[node_name])
            if not failed and anti_affinity_conflict(spec, pod["metadata"]["namespace"], node, node_index, placed):
                # InterPodAffinity (required anti-affinity of the incoming pod), v1.20's two reasons.
                failed = [
                    "node(s) didn't match pod affinity/anti-affinity",
                    "node(s) didn't match pod anti-affinity rules",
                ]
            if not failed and pod_claims:
                try:
                    failed = _dynamic_resources(dra, pod_claims, node_name, allocations)
                except AllocationError as error:
                    unresolvable = str(error)
                    break
            if failed:
                reasons.update(failed)
                continue
            score = _score_node(allocatable[node_name], requests, usage[node_name])
            score -= _spreading_penalty(tx, pod, node)
            if node_name in allocations:
                # DynamicResources' score: a node that satisfies earlier alternatives of a prioritized list wins.
                score -= PRIORITIZED_LIST_WEIGHT * allocations[node_name][1]
            feasible.append((score, node_name, preferred_node_affinity_weight(spec, node)))
        # NodeAffinity's score: the preferred terms' weights, normalised to 0-100 over the feasible nodes.
        top = max((weight for *_, weight in feasible), default=0)
        for score, node_name, weight in feasible:
            score += Fraction(weight * 100, top) if top else 0
            if best is None or score > best[0]:
                best = (score, node_name)
        if unresolvable is not None:
            tried.add(key)
            _mark_unschedulable(tx, pod, f"0/{len(nodes)} nodes are available: {unresolvable}.")
            continue
        if best is not None:
            if pod_claims:
                _reserve_claims(tx, pod, pod_claims, allocations[best[1]][0])
                dra.refresh(tx)
            _bind(tx, key, best[1])
            placed.append((best[1], pod["metadata"]["namespace"], pod["metadata"].get("labels") or {}))
            usage[best[1]].update(requests)
            usage[best[1]][PODS_RESOURCE] += 1
            verdicts.clear()
            continue
        histogram = sorted(f"{count} {reason}" for reason, count in reasons.items())
        message = f"0/{len(nodes)} nodes are available: {', '.join(histogram)}."
        verdicts[signature] = message
        tried.add(key)
        _mark_unschedulable(tx, pod, message)


class _DynamicResources:
    """What the DynamicResources plugin knows during one pass: classes, each node's devices, what is allocated."""

    def __init__(self, tx: Txn) -> None:
        self.classes = tx.state.get("deviceclasses") or {}
        self.inventories = inventories(tx.state.get("resourceslices") or {})
        self.matcher = new_matcher()
        self.refresh(tx)

    def refresh(self, tx: Txn) -> None:
        self.used = in_use(tx.state.get("resourceclaims") or {}, tx.state.get("resourceslices") or {})


def _pod_claims(tx: Txn, pod: KubeObject) -> tuple[list[KubeObject], str | None]:
    """The ResourceClaims a pod uses, or why they cannot be had yet (kube-scheduler's DynamicResources PreFilter)."""
    pod_claims = pod["spec"].get("resourceClaims") or []
    if not pod_claims:
        return [], None
    namespace = pod["metadata"]["namespace"]
    generated = {e["name"]: e.get("resourceClaimName") for e in pod["status"].get("resourceClaimStatuses") or []}
    stored = tx.state.get("resourceclaims") or {}
    claims = []
    for pod_claim in pod_claims:
        name = pod_claim.get("resourceClaimName") or generated.get(pod_claim["name"])
        if not name:
            template = pod_claim.get("resourceClaimTemplateName")
            if object_key(namespace, str(template)) not in (tx.state.get("resourceclaimtemplates") or {}):
                return [], f'resourceclaimtemplate "{template}" not found'
            return [], f'waiting for resource claim of "{pod_claim["name"]}" to be created'
        claim = stored.get(object_key(namespace, name))
        if claim is None:
            return [], f'resourceclaim "{name}" not found'
        claims.append(claim)
    return claims, None


def _dynamic_resources(
    dra: _DynamicResources, claims: list[KubeObject], node_name: str, allocations: dict[str, list[dict[str, Any]]]
) -> list[str]:
    """DynamicResources' Filter on one node: claims already allocated must be usable there, the others must all
    be allocatable together from the node's devices. The allocation found is kept for the bind."""
    pending = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if allocation is None:
            pending.append(claim)
            continue
        terms = (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []
        names = [v for t in terms for f in t.get("matchFields") or [] for v in f.get("values") or []]
        if terms and node_name not in names:
            return ["resourceclaim not available on the node"]
    if not pending:
        allocations[node_name] = ([], 0)
        return []
    inventory = dra.inventories.get(node_name)
    found = allocate(pending, dra.classes, inventory, dra.used, node_name, dra.matcher) if inventory else None
    if found is None:
        return [CANNOT_ALLOCATE]
    allocations[node_name] = (
        list(zip([c["metadata"]["name"] for c in pending], found.allocations, strict=True)),
        found.rank,
    )
    return []


def _reserve_claims(tx: Txn, pod: KubeObject, claims: list[KubeObject], allocations: list) -> None:
    """Write the allocations found for the chosen node and reserve every claim for the pod (before the bind)."""
    found = dict(allocations)
    for claim in claims:
        status = claim.setdefault("status", {})
        if claim["metadata"]["name"] in found:
            status["allocation"] = found[claim["metadata"]["name"]]
        consumer = {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        reserved = status.setdefault("reservedFor", [])
        if not any(entry.get("uid") == consumer["uid"] for entry in reserved):
            reserved.append(consumer)
        touch(tx, claim)


def next_due(tx: Txn) -> None:
    """The scheduler only reacts to pods and nodes; nothing is due by itself (its retries ride on other calls)."""
    return None


def _node_usage(tx: Txn) -> dict[str, Counter[str]]:
    usage: dict[str, Counter[str]] = {name: Counter() for name in tx.state["nodes"]}
    for pod in tx.state["pods"].values():
        node_name = pod["spec"].get("nodeName")
        if node_name in usage and pod["status"].get("phase") not in TERMINAL:
            usage[node_name].update(pod_requests(pod["spec"]))
            usage[node_name][PODS_RESOURCE] += 1
    return usage


def _filter_node(
    node: KubeObject,
    allocatable: dict[str, Fraction],
    pod_spec: dict[str, Any],
    requests: dict[str, Fraction],
    used: Counter[str],
) -> list[str]:
    """kube-scheduler v1.20 filter plugins, in their order (pkg/scheduler/algorithmprovider/registry.go:
    NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts, NodeResourcesFit, ...); the first failing
    plugin's reasons, as the framework stops at it."""
    tolerations = pod_spec.get("tolerations") or []
    taints = node["spec"].get("taints") or []
    # NodeUnschedulable
    if node["spec"].get("unschedulable") and not tolerated(
        tolerations, {"key": UNSCHEDULABLE_TAINT_KEY, "effect": NO_SCHEDULE}
    ):
        return ["node(s) were unschedulable"]
    # TaintToleration: the first NoSchedule/NoExecute taint the pod does not tolerate (PreferNoSchedule only scores)
    for taint in taints:
        if taint.get("effect") in (NO_SCHEDULE, NO_EXECUTE) and not tolerated(tolerations, taint):
            return [f"node(s) had taint {{{taint.get('key')}: {taint.get('value', '')}}}, that the pod didn't tolerate"]
    # NodeAffinity (nodeSelector + required node affinity)
    if not node_affinity_matches(pod_spec, node):
        return ["node(s) didn't match node selector"]
    # NodeResourcesFit
    reasons = []
    if used[PODS_RESOURCE] + 1 > allocatable.get(PODS_RESOURCE, 110):
        reasons.append("Too many pods")
    for resource in sorted(
        requests, key=lambda r: (r not in (CPU_RESOURCE, MEMORY_RESOURCE, EPHEMERAL_STORAGE_RESOURCE), r)
    ):
        wanted = requests[resource]
        if wanted <= 0 or resource == PODS_RESOURCE:
            continue
        available = allocatable.get(resource, 0)
        if available < wanted + used[resource]:
            reasons.append(f"Insufficient {resource}")
    return reasons


def _score_node(allocatable: dict[str, Fraction], requests: dict[str, Fraction], used: Counter[str]) -> Fraction:
    """NodeResourcesLeastAllocated over cpu and memory (non-zero defaults for pods that request nothing)."""
    score = Fraction(0)
    for resource, default in ((CPU_RESOURCE, Fraction(1, 10)), (MEMORY_RESOURCE, Fraction(200 * 2**20))):
        capacity = allocatable.get(resource, Fraction(0))
        wanted = used[resource] + (requests.get(resource) or default)
        if capacity > 0 and wanted <= capacity:
            score += (capacity - wanted) * 100 / capacity
    return score / 2


def _spreading_penalty(tx: Txn, pod: KubeObject, node: KubeObject) -> int:
    """InterPodAffinity (preferred anti-affinity only): the weight of the pod's terms that pods already on the
    node's topology domain match. 0 for a pod without such terms, which is every Job pod."""
    if not ((pod["spec"].get("affinity") or {}).get("podAntiAffinity")):
        return 0
    placed = [p for p in tx.state["pods"].values() if p["spec"].get("nodeName") and p["status"].get("phase")
              not in TERMINAL]  # fmt: skip
    return preferred_anti_affinity_weight(pod, node, tx.state["nodes"], placed)


def _mark_unschedulable(tx: Txn, pod: KubeObject, message: str) -> None:
    conditions = pod["status"].get("conditions") or []
    current = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    if current is not None and current.get("message") == message:
        # The scheduler retries with backoff; the aggregated event counts up at most once a minute.
        _bump_failed_scheduling(tx, pod, message)
        return
    pod["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "lastProbeTime": None,
            "lastTransitionTime": timestamp(tx.now),
            "reason": "Unschedulable",
            "message": message,
        }
    ]
    touch(tx, pod)
    event = record_event(tx, pod, "Warning", "FailedScheduling", message, "default-scheduler")
    sim = tx.state["podsim"].get(object_key(pod["metadata"]["namespace"], pod["metadata"]["name"]))
    if sim is not None:
        sim.update(sched_event=object_key(event["metadata"]["namespace"], event["metadata"]["name"]), sched_at=tx.now)


def _bump_failed_scheduling(tx: Txn, pod: KubeObject, message: str) -> None:
    sim = tx.state["podsim"].get(object_key(pod["metadata"]["namespace"], pod["metadata"]["name"])) or {}
    event = tx.state["events"].get(sim.get("sched_event") or "")
    if event is not None and event["message"] == message and tx.now - sim.get("sched_at", tx.now) >= 60:
        event["count"] += 1
        event["lastTimestamp"] = timestamp(tx.now)
        sim["sched_at"] = tx.now
        touch(tx, event)


def _bind(tx: Txn, key: str, node_name: str) -> None:
    """The Binding: the pod is the node's now; its kubelet takes it from here."""
    pod, sim = tx.state["pods"][key], tx.state["podsim"][key]
    pod["spec"]["nodeName"] = node_name
    touch(tx, pod)
    sim.update(stage="bound", bound=tx.now, bound_rv=int(pod["metadata"]["resourceVersion"]))
    record_event(
        tx,
        pod,
        "Normal",
        "Scheduled",
        f"Successfully assigned {pod['metadata']['namespace']}/{pod['metadata']['name']} to {node_name}",
        "default-scheduler",
    )
