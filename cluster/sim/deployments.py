"""The deployment and ReplicaSet controllers (and the garbage collector's part for them): apps/v1 Deployment ->
ReplicaSets -> Pods -> status, after kube-controller-manager v1.20 (pkg/controller/deployment, replicaset).

Reads Deployments, ReplicaSets (each owned by its Deployment: ``ownerReferences``) and their Pods (the pod's
``podsim`` record names its ReplicaSet), with the pods' readiness as the kubelet and its prober wrote it.
Writes ReplicaSets and Pods and the status of both kinds, and the controllers' Events:

* A Deployment's pod template is hashed (``pod-template-hash``, the label the ReplicaSet and its pods carry); the
  ReplicaSet whose template equals the Deployment's (hash label aside) is the *new* one, the others are *old*.
  A template change makes a new ReplicaSet with the next revision (``deployment.kubernetes.io/revision``); going
  back to an earlier template (``kubectl rollout undo``) reuses that ReplicaSet and gives it the next revision.
* RollingUpdate: the new ReplicaSet grows while all pods stay within ``replicas + maxSurge`` and the old ones
  shrink while ``replicas - maxUnavailable`` pods stay available (defaults 25 %/25 %, surge rounded up,
  unavailability down, never both 0); unhealthy old pods go first. Recreate: all old pods go, then the new
  ReplicaSet is scaled up.
* ``spec.paused`` stops rollouts (no new ReplicaSet; scaling still applies to the current one).
* Old ReplicaSets scaled to 0 beyond ``revisionHistoryLimit`` (default 10) are deleted, oldest revision first.
* Status: replicas, updatedReplicas, readyReplicas, availableReplicas (ready for ``minReadySeconds``),
  unavailableReplicas, observedGeneration, and the Available and Progressing conditions (NewReplicaSetCreated,
  ReplicaSetUpdated, NewReplicaSetAvailable, DeploymentPaused/Resumed, ProgressDeadlineExceeded).
* The ReplicaSet controller keeps ``spec.replicas`` pods that have not ended, deleting the least useful first
  (unscheduled, then not running, then not ready, then the newest); ReplicaSets of a deleted Deployment and pods
  of a deleted ReplicaSet are garbage-collected.
"""

from __future__ import annotations

import copy
import json
import math
import random
from typing import Any

from vocab.names import (
    DEPLOYMENT_DESIRED_REPLICAS_ANNOTATION,
    DEPLOYMENT_MAX_REPLICAS_ANNOTATION,
    DEPLOYMENT_REVISION_ANNOTATION,
    POD_TEMPLATE_HASH_LABEL,
)

from ..base import KubeObject
from .constants import TERMINAL
from .events import record_event
from .pod_resources import store_new_pod
from .store import Txn, bump_rv, delete_pod, mark_changed, new_metadata, object_key, timestamp, touch

#: k8s.io/apimachinery/pkg/util/rand's alphabet (no vowels, no 0/1/3): pod name suffixes and template hashes.
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_RANDOM = random.Random()  # pod name suffixes only
DEFAULT_MAX_SURGE = "25%"
DEFAULT_MAX_UNAVAILABLE = "25%"
DEFAULT_PROGRESS_DEADLINE = 600
DEFAULT_HISTORY_LIMIT = 10
#: Passes of the two controllers within one round, at most (a rollout step takes two or three).
MAX_PASSES = 20
#: The most pods a ReplicaSet creates or deletes in one sync (kube-controller-manager's burstReplicas).
BURST_REPLICAS = 500


def deployments(state: dict[str, Any]) -> dict[str, KubeObject]:
    return state.setdefault("deployments", {})


def replicasets(state: dict[str, Any]) -> dict[str, KubeObject]:
    return state.setdefault("replicasets", {})


# -- Pure helpers (the API facade uses them too) --------------------------------------------------------------------


def template_hash(template: dict[str, Any], collision_count: int = 0) -> str:
    """FNV-32a over the template (and the collision count), written with the safe alphabet as Kubernetes does."""
    value = 0x811C9DC5
    for byte in (json.dumps(template, sort_keys=True) + str(collision_count or "")).encode():
        value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return "".join(SAFE_ALPHABET[ord(digit) % len(SAFE_ALPHABET)] for digit in str(value))


def without_hash(template: dict[str, Any]) -> dict[str, Any]:
    """The template as the Deployment holds it: the ReplicaSet's ``pod-template-hash`` label taken out."""
    bare = copy.deepcopy(template)
    labels = (bare.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(POD_TEMPLATE_HASH_LABEL, None)
    return bare


def revision_of(obj: KubeObject) -> int:
    try:
        return int((obj["metadata"].get("annotations") or {}).get(DEPLOYMENT_REVISION_ANNOTATION) or 0)
    except ValueError:
        return 0


def resolve_fenceposts(deployment: KubeObject) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as pod counts: percentages of spec.replicas, surge up and unavailability down."""
    spec = deployment["spec"]
    replicas = int(spec.get("replicas", 1))
    if (spec.get("strategy") or {}).get("type") == "Recreate":
        return 0, replicas
    rolling = (spec.get("strategy") or {}).get("rollingUpdate") or {}

    def scaled(value: Any, default: str, round_up: bool) -> int:
        value = default if value is None else value
        if isinstance(value, str) and value.endswith("%"):
            share = int(value[:-1]) * replicas / 100
            return math.ceil(share) if round_up else math.floor(share)
        return int(value)

    surge = scaled(rolling.get("maxSurge"), DEFAULT_MAX_SURGE, True)
    unavailable = scaled(rolling.get("maxUnavailable"), DEFAULT_MAX_UNAVAILABLE, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1  # a rollout must be able to make progress
    return surge, min(unavailable, replicas)


def owned_replicasets(state: dict[str, Any], deployment: KubeObject) -> list[tuple[str, KubeObject]]:
    uid = deployment["metadata"]["uid"]
    owned = [
        (key, rs)
        for key, rs in replicasets(state).items()
        if any(o.get("uid") == uid and o.get("controller") for o in rs["metadata"].get("ownerReferences") or [])
    ]
    return sorted(owned, key=lambda item: (revision_of(item[1]), item[1]["metadata"]["creationTimestamp"], item[0]))


# -- The controllers ---------------------------------------------------------------------------------------------


def reconcile(tx: Txn) -> None:
    """One round: collect what lost its owner, sync every ReplicaSet, then every Deployment."""
    _collect_orphans(tx)
    # The two controllers answer each other (a scaled ReplicaSet makes pods, its status moves the rollout on):
    # the clock reruns a component only for others' changes, so they go round here until they agree.
    for _ in range(MAX_PASSES):
        before = tx.changes
        pods = _pods_by_replicaset(tx)
        for key in sorted(replicasets(tx.state)):
            _sync_replicaset(tx, key, pods.get(key, []))
        for key in sorted(deployments(tx.state)):
            _sync_deployment(tx, key)
        if tx.changes == before:
            return


def next_due(tx: Txn) -> float | None:
    """When a ready pod becomes available (minReadySeconds) or a stalled rollout passes its progress deadline."""
    times: list[float] = []
    pods = _pods_by_replicaset(tx)
    for deployment in deployments(tx.state).values():
        spec = deployment["spec"]
        sim = tx.state.get("deploysim", {}).get(object_key(deployment["metadata"]["namespace"],
                                                            deployment["metadata"]["name"])) or {}  # fmt: skip
        min_ready = int(spec.get("minReadySeconds") or 0)
        if min_ready:
            for rs_key, _ in owned_replicasets(tx.state, deployment):
                for pod_key, pod in pods.get(rs_key, []):
                    since = _ready_since(pod, tx.state["podsim"].get(pod_key) or {})
                    if since is not None and since + min_ready > tx.now:
                        times.append(since + min_ready)
        if not spec.get("paused") and not sim.get("complete") and sim.get("last_progress") is not None:
            deadline = sim["last_progress"] + int(spec.get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE))
            if not sim.get("timed_out"):
                times.append(deadline)
    return min(times) if times else None


def _sim(tx: Txn, deployment: KubeObject) -> dict[str, Any]:
    key = object_key(deployment["metadata"]["namespace"], deployment["metadata"]["name"])
    return tx.state.setdefault("deploysim", {}).setdefault(key, {})


def _pods_by_replicaset(tx: Txn) -> dict[str, list[tuple[str, KubeObject]]]:
    index: dict[str, list[tuple[str, KubeObject]]] = {}
    for key, sim in tx.state["podsim"].items():
        if sim.get("replicaset") and key in tx.state["pods"]:
            index.setdefault(sim["replicaset"], []).append((key, tx.state["pods"][key]))
    return index


def _collect_orphans(tx: Txn) -> None:
    live = {d["metadata"]["uid"] for d in deployments(tx.state).values()}
    for key, rs in list(replicasets(tx.state).items()):
        owners = [o for o in rs["metadata"].get("ownerReferences") or [] if o.get("controller")]
        if owners and owners[0].get("uid") not in live:
            del replicasets(tx.state)[key]
            bump_rv(tx)
    for key in [k for k, d in tx.state.get("deploysim", {}).items() if k not in deployments(tx.state)]:
        del tx.state["deploysim"][key]
        mark_changed(tx)
    for pod_key, sim in list(tx.state["podsim"].items()):
        if sim.get("replicaset") and sim["replicaset"] not in replicasets(tx.state):
            delete_pod(tx, pod_key)


def _ready_since(pod: KubeObject, sim: dict[str, Any]) -> float | None:
    """When the pod became Ready (the prober's record, else the container start), or None if it is not Ready."""
    if pod["status"].get("phase") in TERMINAL:
        return None
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in pod["status"].get("conditions") or [])
    if not ready:
        return None
    return sim.get("ready_at", sim.get("running", 0.0))


def _write_status(tx: Txn, obj: KubeObject, status: dict[str, Any]) -> None:
    if obj.get("status") != status:
        obj["status"] = status
        touch(tx, obj)


# -- ReplicaSet controller ------------------------------------------------------------------------------------------


def _sync_replicaset(tx: Txn, key: str, pods: list[tuple[str, KubeObject]]) -> None:
    rs = replicasets(tx.state)[key]
    wanted = int(rs["spec"].get("replicas", 1))
    active = [(k, p) for k, p in pods if p["status"].get("phase") not in TERMINAL]
    if len(active) < wanted:
        for _ in range(min(BURST_REPLICAS, wanted - len(active))):
            active.append(_create_pod(tx, key))
    elif len(active) > wanted:
        for pod_key, pod in sorted(active, key=lambda item: _deletion_rank(tx, *item))[: len(active) - wanted]:
            record_event(tx, rs, "Normal", "SuccessfulDelete", f"Deleted pod: {pod['metadata']['name']}",
                         "replicaset-controller")  # fmt: skip
            delete_pod(tx, pod_key)
            active.remove((pod_key, pod))
    min_ready = int(rs["spec"].get("minReadySeconds") or 0)
    ready = available = 0
    for pod_key, pod in active:
        since = _ready_since(pod, tx.state["podsim"].get(pod_key) or {})
        if since is not None:
            ready += 1
            available += since + min_ready <= tx.now
    status: dict[str, Any] = {
        "replicas": len(active),
        "fullyLabeledReplicas": len(active),
        "observedGeneration": rs["metadata"].get("generation", 1),
    }
    if ready:
        status["readyReplicas"] = ready
    if available:
        status["availableReplicas"] = available
    _write_status(tx, rs, status)


def _deletion_rank(tx: Txn, key: str, pod: KubeObject) -> tuple:
    """controller.ActivePods' order: unassigned < assigned, Pending < Running, not ready < ready, newer first."""
    sim = tx.state["podsim"].get(key) or {}
    phase_rank = {"Pending": 0, "Unknown": 1, "Running": 2}.get(pod["status"].get("phase", "Pending"), 0)
    ready = _ready_since(pod, sim) is not None
    return (bool(pod["spec"].get("nodeName")), phase_rank, ready, -float(sim.get("created", 0.0)), key)


def _create_pod(tx: Txn, rs_key: str) -> tuple[str, KubeObject]:
    """A pod from the ReplicaSet's template, with the API server's pod defaults (as the Job controller's)."""
    rs = replicasets(tx.state)[rs_key]
    rs_meta = rs["metadata"]
    namespace = rs_meta["namespace"]
    template = copy.deepcopy(rs["spec"]["template"])
    while True:
        name = f"{rs_meta['name']}-" + "".join(_RANDOM.choice(SAFE_ALPHABET) for _ in range(5))
        if object_key(namespace, name) not in tx.state["pods"]:
            break
    metadata = {"generateName": f"{rs_meta['name']}-", **new_metadata(tx, name, namespace)}
    metadata["labels"] = dict((template.get("metadata") or {}).get("labels") or {})
    if (template.get("metadata") or {}).get("annotations"):
        metadata["annotations"] = dict(template["metadata"]["annotations"])
    metadata["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_meta["name"], "uid": rs_meta["uid"],
         "controller": True, "blockOwnerDeletion": True}
    ]  # fmt: skip
    key = object_key(namespace, name)
    pod = store_new_pod(tx, namespace, name, metadata, template["spec"], {"replicaset": rs_key})
    record_event(tx, rs, "Normal", "SuccessfulCreate", f"Created pod: {name}", "replicaset-controller")
    return key, pod


# -- Deployment controller ------------------------------------------------------------------------------------------


def _sync_deployment(tx: Txn, key: str) -> None:
    deployment = deployments(tx.state)[key]
    spec = deployment["spec"]
    sim = _sim(tx, deployment)
    owned = owned_replicasets(tx.state, deployment)
    new_key = next((k for k, rs in owned if without_hash(rs["spec"]["template"]) == spec["template"]), None)
    if spec.get("paused"):
        _scale_paused(tx, deployment, owned, new_key)
    else:
        if new_key is None:
            new_key = _create_replicaset(tx, deployment, owned)
            owned = owned_replicasets(tx.state, deployment)
        else:
            _adopt_revision(tx, deployment, owned, new_key)
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            _recreate(tx, deployment, owned, new_key)
        else:
            _rolling_update(tx, deployment, owned, new_key)
        _cleanup_history(tx, deployment, new_key)
    _update_status(tx, deployment, sim, owned_replicasets(tx.state, deployment), new_key)


def _set_replicas(tx: Txn, deployment: KubeObject, rs: KubeObject, replicas: int) -> None:
    """Scale a ReplicaSet (and note the Deployment's size on it), with the deployment controller's Event."""
    replicas = max(0, replicas)
    surge, _ = resolve_fenceposts(deployment)
    desired = int(deployment["spec"].get("replicas", 1))
    annotations = rs["metadata"].setdefault("annotations", {})
    wanted_annotations = {
        DEPLOYMENT_DESIRED_REPLICAS_ANNOTATION: str(desired),
        DEPLOYMENT_MAX_REPLICAS_ANNOTATION: str(desired + surge),
    }
    current = int(rs["spec"].get("replicas", 0))
    if current == replicas and all(annotations.get(k) == v for k, v in wanted_annotations.items()):
        return
    annotations.update(wanted_annotations)
    if current != replicas:
        rs["spec"]["replicas"] = replicas
        rs["metadata"]["generation"] = rs["metadata"].get("generation", 1) + 1
        direction = "up" if replicas > current else "down"
        record_event(tx, deployment, "Normal", "ScalingReplicaSet",
                     f"Scaled {direction} replica set {rs['metadata']['name']} to {replicas}",
                     "deployment-controller")  # fmt: skip
    touch(tx, rs)


def _create_replicaset(tx: Txn, deployment: KubeObject, owned: list[tuple[str, KubeObject]]) -> str:
    meta = deployment["metadata"]
    namespace = meta["namespace"]
    collisions = int((deployment.get("status") or {}).get("collisionCount") or 0)
    while True:
        pod_hash = template_hash(deployment["spec"]["template"], collisions)
        name = f"{meta['name']}-{pod_hash}"
        if object_key(namespace, name) not in replicasets(tx.state):
            break
        collisions += 1  # a ReplicaSet of that name with another template: the collision count moves the hash
    template = copy.deepcopy(deployment["spec"]["template"])
    template.setdefault("metadata", {}).setdefault("labels", {})[POD_TEMPLATE_HASH_LABEL] = pod_hash
    selector = copy.deepcopy(deployment["spec"]["selector"])
    selector.setdefault("matchLabels", {})[POD_TEMPLATE_HASH_LABEL] = pod_hash
    revision = max((revision_of(rs) for _, rs in owned), default=0) + 1
    metadata = new_metadata(tx, name, namespace)
    metadata.update(
        generation=1,
        labels=dict(template["metadata"]["labels"]),
        annotations={DEPLOYMENT_REVISION_ANNOTATION: str(revision)},
        ownerReferences=[
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"], "uid": meta["uid"],
             "controller": True, "blockOwnerDeletion": True}
        ],
    )  # fmt: skip
    rs = {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": metadata,
        "spec": {
            "replicas": 0,
            "minReadySeconds": int(deployment["spec"].get("minReadySeconds") or 0),
            "selector": selector,
            "template": template,
        },
        "status": {"replicas": 0},
    }
    key = object_key(namespace, name)
    replicasets(tx.state)[key] = rs
    if collisions:
        deployment.setdefault("status", {})["collisionCount"] = collisions
    _set_revision(tx, deployment, revision)
    sim = _sim(tx, deployment)
    sim.update(progress_reason="NewReplicaSetCreated", progress_message=f'Created new replica set "{name}"')
    sim.update(last_progress=tx.now, complete=False, timed_out=False)
    return key


def _adopt_revision(tx: Txn, deployment: KubeObject, owned: list[tuple[str, KubeObject]], new_key: str) -> None:
    """A rollback to an old template: its ReplicaSet becomes the newest revision again."""
    new = replicasets(tx.state)[new_key]
    highest = max(revision_of(rs) for _, rs in owned)
    tied = sum(1 for _, rs in owned if revision_of(rs) == highest) > 1
    if revision_of(new) < highest or (revision_of(new) == highest and tied):
        new["metadata"].setdefault("annotations", {})[DEPLOYMENT_REVISION_ANNOTATION] = str(highest + 1)
        touch(tx, new)
        sim = _sim(tx, deployment)
        sim.update(progress_reason="FoundNewReplicaSet", progress_message=f'Found new replica set '
                   f'"{new["metadata"]["name"]}"', last_progress=tx.now, complete=False, timed_out=False)  # fmt: skip
    _set_revision(tx, deployment, revision_of(new))


def _set_revision(tx: Txn, deployment: KubeObject, revision: int) -> None:
    annotations = deployment["metadata"].setdefault("annotations", {})
    if annotations.get(DEPLOYMENT_REVISION_ANNOTATION) != str(revision):
        annotations[DEPLOYMENT_REVISION_ANNOTATION] = str(revision)
        touch(tx, deployment)


def _scale_paused(tx: Txn, deployment: KubeObject, owned: list[tuple[str, KubeObject]], new_key: str | None) -> None:
    """A paused Deployment still scales: the difference goes to the current ReplicaSet (the new one, else the
    newest that has pods)."""
    if not owned:
        return
    desired = int(deployment["spec"].get("replicas", 1))
    total = sum(int(rs["spec"].get("replicas", 0)) for _, rs in owned)
    if total == desired:
        return
    target_key = new_key or next((k for k, rs in reversed(owned) if rs["spec"].get("replicas")), owned[-1][0])
    target = replicasets(tx.state)[target_key]
    _set_replicas(tx, deployment, target, int(target["spec"].get("replicas", 0)) + desired - total)


def _recreate(tx: Txn, deployment: KubeObject, owned: list[tuple[str, KubeObject]], new_key: str) -> None:
    old = [rs for key, rs in owned if key != new_key]
    for rs in old:
        _set_replicas(tx, deployment, rs, 0)
    if any(int(rs.get("status", {}).get("replicas", 0)) for rs in old):
        return  # wait until every old pod is gone
    _set_replicas(tx, deployment, replicasets(tx.state)[new_key], int(deployment["spec"].get("replicas", 1)))


def _rolling_update(tx: Txn, deployment: KubeObject, owned: list[tuple[str, KubeObject]], new_key: str) -> None:
    desired = int(deployment["spec"].get("replicas", 1))
    surge, max_unavailable = resolve_fenceposts(deployment)
    new = replicasets(tx.state)[new_key]
    old = [rs for key, rs in owned if key != new_key]  # oldest revision first
    new_replicas = int(new["spec"].get("replicas", 0))
    # reconcileNewReplicaSet
    if new_replicas > desired:
        _set_replicas(tx, deployment, new, desired)
        return
    if new_replicas < desired:
        all_pods = sum(int(rs["spec"].get("replicas", 0)) for _, rs in owned)
        room = desired + surge - all_pods
        if room > 0:
            _set_replicas(tx, deployment, new, new_replicas + min(room, desired - new_replicas))
            return
    # reconcileOldReplicaSets
    if not sum(int(rs["spec"].get("replicas", 0)) for rs in old):
        _set_replicas(tx, deployment, new, int(new["spec"].get("replicas", 0)))  # refresh its annotations
        return
    all_pods = sum(int(rs["spec"].get("replicas", 0)) for _, rs in owned)
    min_available = desired - max_unavailable
    new_unavailable = int(new["spec"].get("replicas", 0)) - int(new["status"].get("availableReplicas", 0))
    max_scaled_down = all_pods - min_available - new_unavailable
    if max_scaled_down <= 0:
        return
    scaled = 0
    for rs in old:  # cleanupUnhealthyReplicas: old pods that are not available go first
        if scaled >= max_scaled_down:
            break
        replicas = int(rs["spec"].get("replicas", 0))
        unhealthy = replicas - int(rs["status"].get("availableReplicas", 0))
        if replicas and unhealthy > 0:
            step = min(max_scaled_down - scaled, unhealthy)
            _set_replicas(tx, deployment, rs, replicas - step)
            scaled += step
    available = sum(int(rs["status"].get("availableReplicas", 0)) for _, rs in owned)
    budget = available - min_available
    for rs in old:  # scaleDownOldReplicaSetsForRollingUpdate
        if budget <= 0:
            break
        replicas = int(rs["spec"].get("replicas", 0))
        if replicas:
            step = min(replicas, budget)
            _set_replicas(tx, deployment, rs, replicas - step)
            budget -= step


def _cleanup_history(tx: Txn, deployment: KubeObject, new_key: str) -> None:
    limit = int(deployment["spec"].get("revisionHistoryLimit", DEFAULT_HISTORY_LIMIT))
    idle = [
        (key, rs)
        for key, rs in owned_replicasets(tx.state, deployment)
        if key != new_key and not rs["spec"].get("replicas") and not rs["status"].get("replicas")
    ]
    for key, _ in idle[: max(0, len(idle) - limit)]:
        del replicasets(tx.state)[key]
        bump_rv(tx)


def _condition(kind: str, status: str, reason: str, message: str, now: float, previous: dict | None) -> dict:
    stamp = timestamp(now)
    if previous and previous.get("status") == status and previous.get("reason") == reason:
        if previous.get("message") == message:
            return previous
        return {**previous, "message": message, "lastUpdateTime": stamp}
    transition = previous["lastTransitionTime"] if previous and previous.get("status") == status else stamp
    return {"type": kind, "status": status, "lastUpdateTime": stamp, "lastTransitionTime": transition,
            "reason": reason, "message": message}  # fmt: skip


def _update_status(
    tx: Txn, deployment: KubeObject, sim: dict[str, Any], owned: list[tuple[str, KubeObject]], new_key: str | None
) -> None:
    spec = deployment["spec"]
    desired = int(spec.get("replicas", 1))
    _, max_unavailable = resolve_fenceposts(deployment)
    new = replicasets(tx.state).get(new_key or "")
    totals = {
        field: sum(int(rs["status"].get(field, 0)) for _, rs in owned)
        for field in ("replicas", "readyReplicas", "availableReplicas")
    }
    updated = int(new["status"].get("replicas", 0)) if new else 0
    previous = deployment.get("status") or {}
    status: dict[str, Any] = {"observedGeneration": deployment["metadata"].get("generation", 1)}
    if totals["replicas"]:
        status["replicas"] = totals["replicas"]
    if updated:
        status["updatedReplicas"] = updated
    if totals["readyReplicas"]:
        status["readyReplicas"] = totals["readyReplicas"]
    if totals["availableReplicas"]:
        status["availableReplicas"] = totals["availableReplicas"]
    if desired - totals["availableReplicas"] > 0:
        status["unavailableReplicas"] = desired - totals["availableReplicas"]
    if previous.get("collisionCount"):
        status["collisionCount"] = previous["collisionCount"]
    conditions = {c["type"]: c for c in previous.get("conditions") or []}
    if totals["availableReplicas"] >= desired - max_unavailable:
        available = ("True", "MinimumReplicasAvailable", "Deployment has minimum availability.")
    else:
        available = ("False", "MinimumReplicasUnavailable", "Deployment does not have minimum availability.")
    conditions["Available"] = _condition("Available", *available, tx.now, conditions.get("Available"))
    name = new["metadata"]["name"] if new else ""
    progress_signature = [updated, totals["replicas"], totals["readyReplicas"], totals["availableReplicas"], name]
    complete = bool(new) and updated == desired and totals["availableReplicas"] == desired == totals["replicas"]
    if spec.get("paused"):
        progressing = ("Unknown", "DeploymentPaused", "Deployment is paused")
        sim["was_paused"] = True
    elif sim.pop("was_paused", False):
        progressing = ("Unknown", "DeploymentResumed", "Deployment is resumed")
        sim.update(last_progress=tx.now, progress_signature=progress_signature, complete=False, timed_out=False)
        sim["progress_reason"] = "DeploymentResumed"
    elif complete:
        progressing = ("True", "NewReplicaSetAvailable", f'ReplicaSet "{name}" has successfully progressed.')
    elif sim.get("progress_signature") != progress_signature:
        sim.update(last_progress=tx.now, progress_signature=progress_signature, timed_out=False)
        reason = sim.pop("progress_reason", None)
        message = sim.pop("progress_message", None)
        if reason in ("NewReplicaSetCreated", "FoundNewReplicaSet") and message:
            progressing = ("True", reason, message)
        else:
            progressing = ("True", "ReplicaSetUpdated", f'ReplicaSet "{name}" is progressing.')
    else:
        current = conditions.get("Progressing") or {}
        deadline = int(spec.get("progressDeadlineSeconds", DEFAULT_PROGRESS_DEADLINE))
        if sim.get("last_progress") is not None and tx.now >= sim["last_progress"] + deadline:
            sim["timed_out"] = True
            progressing = ("False", "ProgressDeadlineExceeded", f'ReplicaSet "{name}" has timed out progressing.')
        else:
            progressing = (current.get("status", "True"), current.get("reason", "ReplicaSetUpdated"),
                           current.get("message", f'ReplicaSet "{name}" is progressing.'))  # fmt: skip
    if sim.get("complete") != complete:
        sim["complete"] = complete
        mark_changed(tx)
    progressing_condition = _condition("Progressing", *progressing, tx.now, conditions.get("Progressing"))
    if progressing[1] == "ReplicaSetUpdated" and sim.get("last_progress") == tx.now:
        progressing_condition = {**progressing_condition, "lastUpdateTime": timestamp(tx.now)}
    conditions["Progressing"] = progressing_condition
    status["conditions"] = [conditions["Available"], conditions["Progressing"]]
    _write_status(tx, deployment, status)
