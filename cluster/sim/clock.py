"""The clock: the one place that runs the components, in a fixed order, until nothing more is due.

Time is lazy: nothing runs in the background. Every API call first brings the world up to ``clock()``
(``advance``), and a call that wrote something lets the components react to it (``settle``). The components
never call one another; each reads and writes stored objects in the transaction's state, and the clock runs
them in this order, round after round, until none has a change it has not seen:

1. node lifecycle (Node conditions and not-ready taints, pods of deleted nodes, taint-based eviction)
2. GPU Operator (GFD labels, device plugin config and resources, MIG Manager)
3. NVIDIA's DRA driver (DeviceClasses, ResourceSlices of DRA nodes), then its ComputeDomain controller (channel
   ResourceClaimTemplates, domain status)
4. PersistentVolume controller (binds claims to volumes, provisions, releases)
5. kubelet (starts newly bound pods, moves pods through their phases), then its prober (readiness and liveness
   of running containers, so no controller ever sees a probed container ready before its probe passed)
6. Job controller (garbage-collects pods of deleted Jobs, counts ended pods, creates pods, Job status)
7. deployment and ReplicaSet controllers (ReplicaSets per template, rolling updates, pods, status)
8. HPA controller (every sync period: metrics from the traffic curve, Deployment replicas, HPA status)
9. resourceclaim controller (ResourceClaims from pods' templates; releases claims of ended and deleted pods)
10. scheduler (binds pending pods, allocating their ResourceClaims)

So a Job created by a call has its pod created, bound and ContainerCreating before the call returns, and a pod
that ends hands its GPU to a waiting pod at the moment it ends. Moments at which something happens by itself
(a container exits, a MIG reconfiguration finishes, a deadline passes, an eviction is due) are replayed one by
one in time order, because nothing runs between calls. Last, the API server expires old Events.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from types import ModuleType

from . import (
    compute_domains,
    deployments,
    dra_driver,
    gpu_operator,
    hpa,
    job_controller,
    kubelet,
    node_lifecycle,
    prober,
    resource_claims,
    scheduler,
    volume_binder,
)
from .events import expire_events
from .store import Txn

#: The components, in the order they run within a round.
COMPONENTS = (
    node_lifecycle,
    gpu_operator,
    dra_driver,  # Dynamic Resource Allocation (issue 33): NVIDIA's DRA driver publishes slices
    compute_domains,
    volume_binder,
    kubelet,
    prober,
    job_controller,
    deployments,  # inference services (issue 13): after the Job controller
    hpa,
    resource_claims,  # claims from templates for new pods, released for ended ones, before the scheduler looks
    scheduler,
)
#: Rounds at one moment before the clock gives up (a round that changes nothing ends it; a few suffice).
MAX_ROUNDS = 50
#: Due moments replayed in one call at most: a bound, not an expected count (each step retires what was due).
MAX_STEPS = 10_000


def settle(tx: Txn) -> None:
    """Run the components at ``tx.now`` until none has a change it has not seen.

    A component runs at least once per settle, and again in a later round only if something changed after its
    last run (a component that ran over unchanged state at the same moment would change nothing).
    """
    tx.memo.clear()
    seen: dict[ModuleType, int] = {}
    for _ in range(MAX_ROUNDS):
        for component in COMPONENTS:
            if seen.get(component) != tx.changes:
                component.reconcile(tx)
                seen[component] = tx.changes
        if all(seen[component] == tx.changes for component in COMPONENTS):
            return
    raise RuntimeError(f"The simulated cluster did not settle after {MAX_ROUNDS} rounds at t={tx.now}.")


def next_due(tx: Txn) -> float | None:
    """The earliest moment at which something changes by itself (None: nothing is scheduled to)."""
    times = [due for component in COMPONENTS if (due := component.next_due(tx)) is not None]
    return min(times) if times else None


def advance(tx: Txn) -> None:
    """Play everything that became due since the last call, in time order, then settle at ``clock()``.

    Nothing runs between calls, so a pod that finished at t=60 and a pod waiting for its GPU must still see
    the GPU handed over at t=60, not when somebody next looks: due moments are replayed one by one.
    """
    target = tx.now
    cursor = None
    for _ in range(MAX_STEPS):
        due = next_due(tx)
        if due is None or due > target:
            break
        cursor = due if cursor is None else max(cursor, due)
        tx.now = cursor
        settle(tx)
    tx.now = target
    settle(tx)
    expire_events(tx)


def quiet_until(tx: Txn) -> float:
    """Until when, if no call writes meanwhile, an ``advance`` would change nothing in a state just settled at
    ``tx.now`` (the store then lets read-only calls skip it): the next due moment and the next Event to expire.
    ``tx.now`` (no quiet at all) while something changes with time that no component schedules: a pod waiting for
    the scheduler (FailedScheduling is repeated), a pull back-off or a probe counting its Events up, claims,
    Deployments and autoscalers (their controllers follow readiness and traffic over time)."""
    state = tx.state
    if any(state.get(kind) for kind in ("deployments", "replicasets", "hpas", "pvcs")):
        return tx.now
    podsim = state["podsim"]
    for key, pod in state["pods"].items():
        sim = podsim.get(key) or {}
        if not pod["spec"].get("nodeName") or sim.get("stage") == "backoff" or sim.get("probe") is not None:
            return tx.now
    due = next_due(tx)
    until = math.inf if due is None else due
    if state["events"]:
        oldest = min(event["lastTimestamp"] for event in state["events"].values())
        stamped = datetime.strptime(oldest, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
        until = min(until, stamped + state["timing"]["event_ttl_seconds"])
    return until
