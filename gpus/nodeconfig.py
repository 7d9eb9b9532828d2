"""Carving a node's GPUs: MIG layouts, time-slicing and MPS sharing, applied the GPU Operator way.

The request is checked and planned in ``gpus.nodeconfig_plan`` (re-exported here). An admin's request becomes a
``NodeConfigOperation`` row; ``advance_operations`` (run by beat, and kicked when an operation is saved) moves
every operation in progress one step at a time:

    pending → draining → applying → waiting → refreshing → done        (or failed, with the reason)

- draining: the job cycle places nothing new on the node while the operation is in progress
  (``reconfiguring_nodes``); running GPU work may finish by itself; once the grace period is over the node
  is listed by ``nodes_draining`` and the job cycle preempts and requeues the portal's preemptible jobs on it
  (the inventory publishes state only and never imports jobs). This step waits until the cluster shows no GPU
  pods on the node; at the drain timeout the operation fails and says which workloads held it up.
- applying: the mig-parted config is written into the portal's ConfigMap (MIG Manager's format, key
  ``config.yaml``) or a named entry into the device plugin's ConfigMap, then the node label selecting it is set
  (``nvidia.com/mig.config`` or ``nvidia.com/device-plugin.config``).
- waiting: follows ``nvidia.com/mig.config.state`` (pending, rebooting, success, failed) until the node
  advertises what the layout should give; a timeout or ``failed`` ends the operation.
- refreshing: the inventory and resource classes are read back from the cluster.

Each operation runs against its node's own cluster (``advance_operations`` takes one cluster's backend and moves that
cluster's operations; gpus.tasks runs the cluster configured in settings and queues one task per registered cluster),
so its drain reads that cluster's pods and its ConfigMaps and labels go to that cluster. Nodes are known by (cluster
id, node name) throughout: names are unique per cluster only.

Every step is a conditional UPDATE on the state it was read in and the cluster writes are idempotent (the same
ConfigMap data and label again change nothing), so two workers advancing the same operation at once, or a worker
that crashed half-way, leave it in one consistent state.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import yaml
from celery import current_app
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Q
from django.utils import timezone

from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE, ClusterBackend, ClusterError, NotFound
from core import audit
from vocab import mig
from vocab.names import GPU_PRODUCT_LABEL, MIG_CONFIG_FAILED, MIG_CONFIG_SUCCESS, MIG_PARTED_CONFIG_KEY, NVIDIA_PREFIX

from . import seams, webhook_events
from .choices import ACTIVE_CONFIG_STATES, InventoryAuditAction, NodeConfigKind, NodeConfigState
from .dra_carving import carve_refusal
from .models import Cluster, Node, NodeConfigOperation, settings_cluster_pk
from .nodeconfig_plan import (
    DEVICE_PLUGIN_CONFIG_LABEL,
    GPU_RESOURCE,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    SHARED_GPU_RESOURCE,
    ConfigRefused,
    Plan,
    _short,
    current_mig_layout,
    current_mig_placements,
    node_geometry,
    orphaned_class_warnings,
    plan_time_slicing,
    vanishing_class_warnings,
    vanishing_classes,
)
from .reconcile import sync_inventory
from .resources import pod_gpu_requests

log = logging.getLogger(__name__)

#: The job cycle's Celery task, sent by name when a drain's grace period ends (the inventory never imports jobs).
JOB_CYCLE_TASK = "jobs.tasks.run_cycle"
#: This module's own Celery task, sent by name (gpus.tasks imports this module).
ADVANCE_TASK = "gpus.tasks.advance_node_config_operations"


# -- requests --------------------------------------------------------------------------------------------------


def request_operation(user, node: Node, plan: Plan, revert_of: NodeConfigOperation | None = None):
    """Save the operation (refused if one is already in progress on the node, or if the node's DRA driver carves its
    GPUs itself: gpus.dra_carving) and kick the worker."""
    if problem := node.operated_here():
        raise ConfigRefused([problem])
    if refusal := carve_refusal(node):
        raise ConfigRefused([refusal])
    previous = describe_current(node, plan.kind)
    now = timezone.now()
    try:
        with transaction.atomic():
            if NodeConfigOperation.objects.filter(node=node, state__in=ACTIVE_CONFIG_STATES).exists():
                raise ConfigRefused([f"{node.name} is already being reconfigured; wait for that to finish."])
            op = NodeConfigOperation.objects.create(
                node=node,
                kind=plan.kind,
                requested=plan.requested,
                previous=previous,
                expected_resources=plan.expected_resources,
                expected_product_label=plan.expected_product_label,
                warnings=plan.warnings,
                requested_by=user if getattr(user, "is_authenticated", False) else None,
                revert_of=revert_of,
                state_changed_at=now,
                log=[_entry(now, "Requested; no new work is placed on the node from now on.", NodeConfigState.PENDING)],
            )
            if plan.kind == NodeConfigKind.MIG and not plan.requested.get("config"):
                op.requested = {**plan.requested, "config": _short(f"custom-{node.name}-{op.pk}")}
                op.save(update_fields=["requested"])
            audit.record(
                user,
                InventoryAuditAction.NODE_CONFIG_REVERT if revert_of else InventoryAuditAction.NODE_CONFIG_REQUEST,
                op,
                before=previous,
                after=op.requested,
            )
            webhook_events.operation(op, f"node_operation.{'reverted' if revert_of else 'started'}", actor=user)
    except IntegrityError:  # the unique constraint caught a concurrent request
        raise ConfigRefused([f"{node.name} is already being reconfigured; wait for that to finish."]) from None
    transaction.on_commit(kick)
    return op


def describe_current(node: Node, kind: str) -> dict:
    """The node's configuration now, in the shape of ``requested`` (what a revert asks for)."""
    labels = node.labels or {}
    if kind == NodeConfigKind.MIG:
        name = labels.get(MIG_CONFIG_LABEL, "")
        # The inventory only knows node-wide counts from the labels; the operation that applied the current config
        # knows the exact per-GPU layout, so a revert gets back precisely that.
        applied = (
            NodeConfigOperation.objects.filter(node=node, kind=kind, state=NodeConfigState.DONE).order_by("-pk").first()
        )
        if applied is not None and applied.config_name == name:
            return dict(applied.requested)
        geometry = node_geometry(node)
        return {
            "config": name,
            "preset": bool(geometry and name in mig.preset_layouts(geometry)),
            "gpus": current_mig_layout(node),
            "placements": current_mig_placements(node),
        }
    return {
        "config": labels.get(DEVICE_PLUGIN_CONFIG_LABEL, ""),
        "replicas": node.replicas if node.sharing_strategy in ("time-slicing", "mps") else 1,
        **({"mps": True} if node.sharing_strategy == "mps" and node.replicas > 1 else {}),
        "rename": SHARED_GPU_RESOURCE in (node.capacity or {}) and int(node.capacity[SHARED_GPU_RESOURCE] or 0) > 0,
        "strategy": node.mig_strategy or "none",
    }


def request_revert(user, op: NodeConfigOperation) -> NodeConfigOperation:
    """Ask for the configuration the node had before ``op`` (offered once ``op`` failed, or when ``op`` is the
    node's latest finished operation)."""
    op.refresh_from_db()
    if not op.can_revert:
        raise ConfigRefused(["Only the node's latest reconfiguration, once it failed or finished, can be reverted."])
    node = op.node
    previous = op.previous
    if op.kind == NodeConfigKind.MIG:
        resources, label, _ = mig.advertised_after(
            node_geometry(node), previous.get("gpus") or [], node.mig_strategy, node.product_label or node.product
        )
        plan = Plan(NodeConfigKind.MIG, dict(previous), resources, label)
    else:
        plan = plan_time_slicing(
            node,
            replicas=int(previous.get("replicas") or 1),
            rename=bool(previous.get("rename")),
            mps=bool(previous.get("mps")),
        )
        if previous.get("config"):
            plan.requested["config"] = previous["config"]
    plan.warnings = vanishing_class_warnings(node, plan.expected_resources, plan.expected_product_label)
    return request_operation(user, node, plan, revert_of=op)


def kick() -> None:
    """Ask a worker to advance operations now (beat does it anyway every PORTAL_NODE_CONFIG_INTERVAL)."""
    try:
        current_app.send_task(ADVANCE_TASK, expires=60)
    except Exception:  # a broker outage must not fail the request; beat picks the operation up
        log.warning("could not queue a node-config step; beat will run it", exc_info=True)


#: A node of the fleet: (cluster id, node name).
NodeKey = tuple[int, str]


def reconfiguring_nodes() -> set[NodeKey]:
    """(cluster id, node name) of the nodes the job cycle must not place new work on."""
    active = NodeConfigOperation.objects.filter(state__in=ACTIVE_CONFIG_STATES)
    return set(active.values_list("node__cluster_id", "node__name"))


def nodes_draining(now: datetime) -> dict[NodeKey, int]:
    """(cluster id, node name) → operation id, for nodes being drained whose grace period is over: the job cycle
    preempts and requeues the preemptible work on them (gpus publishes the state; it never touches jobs)."""
    rows = (
        NodeConfigOperation.objects.filter(state=NodeConfigState.DRAINING)
        .filter(Q(drain_grace_until__lte=now) | Q(forced_at__isnull=False))
        .values_list("node__cluster_id", "node__name", "pk")
    )
    return {(cluster_id, name): pk for cluster_id, name, pk in rows}


def classes_leaving(nodes) -> dict[NodeKey, dict[int, str]]:
    """(cluster id, node name) → the resource classes (id → name) its reconfiguration in progress takes out of the
    fleet: the node is the only one offering them and its new layout does not. Work of these classes stopped by the
    drain cannot run again as it is, and the jobs floor says so to its owners."""
    wanted = set(nodes)
    ops = NodeConfigOperation.objects.filter(
        node__name__in={name for _, name in wanted}, state__in=ACTIVE_CONFIG_STATES
    ).select_related("node")
    return {
        (op.node.cluster_id, op.node.name): {
            rc.pk: rc.display_name
            for rc in vanishing_classes(op.node, op.expected_resources or {}, op.expected_product_label)
        }
        for op in ops
        if (op.node.cluster_id, op.node.name) in wanted
    }


# -- the state machine -----------------------------------------------------------------------------------------


def _entry(at: datetime, message: str, state: str) -> dict:
    return {"at": at.isoformat(), "message": message, "state": state}


def _move(op: NodeConfigOperation, expected: str, new: str, now: datetime, message: str, **changes) -> bool:
    """Conditional transition: only if the row is still in ``expected``; False if someone else moved it."""
    log_entries = [*op.log, _entry(now, message, new)]
    updated = NodeConfigOperation.objects.filter(pk=op.pk, state=expected).update(
        state=new, state_changed_at=now, log=log_entries, **changes
    )
    if updated:
        op.state, op.state_changed_at, op.log = new, now, log_entries
        for name, value in changes.items():
            setattr(op, name, value)
    return bool(updated)


def _note(op: NodeConfigOperation, now: datetime, message: str, **changes) -> None:
    """Add a log line (and field changes) without changing the state, if the row is still in its state."""
    if op.log and op.log[-1].get("message") == message and not changes:
        return
    log_entries = [*op.log, _entry(now, message, op.state)]
    if NodeConfigOperation.objects.filter(pk=op.pk, state=op.state).update(log=log_entries, **changes):
        op.log = log_entries
        for name, value in changes.items():
            setattr(op, name, value)


def _fail(op: NodeConfigOperation, now: datetime, reason: str) -> bool:
    expected = op.state
    if _move(op, expected, NodeConfigState.FAILED, now, reason, reason=reason, finished_at=now):
        # The progress bar shows where it failed: the log entry before this one carries that state.
        op.log[-1]["state"] = expected
        NodeConfigOperation.objects.filter(pk=op.pk).update(log=op.log)
        audit.record(None, InventoryAuditAction.NODE_CONFIG_FAIL, op, after={"reason": reason, "state": expected})
        webhook_events.operation(op, "node_operation.failed", reason=reason)
        return True
    return False


@dataclass
class AdvanceResult:
    advanced: int = 0
    done: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def advance_operations(
    backend: ClusterBackend, now: datetime | None = None, cluster: Cluster | None = None
) -> AdvanceResult:
    """Move every operation in progress on the nodes of ``cluster`` (None: the cluster configured in settings), whose
    backend ``backend`` is, as far as it can go now. Safe to run concurrently and repeatedly."""
    result = AdvanceResult()
    cluster_id = cluster.pk if cluster is not None else settings_cluster_pk()
    active = NodeConfigOperation.objects.filter(state__in=ACTIVE_CONFIG_STATES, node__cluster_id=cluster_id)
    ids = list(active.values_list("pk", flat=True))
    for pk in ids:
        try:
            advance_operation(pk, backend, now, result)
        except ClusterError as error:
            # Transient cluster trouble: the operation stays where it is and the next run tries again.
            result.errors.append(f"operation {pk}: {error}")
            log.warning("node config operation %s: %s", pk, error)
    return result


def advance_operation(pk: int, backend: ClusterBackend, now: datetime | None = None, result=None) -> None:
    result = result or AdvanceResult()
    for _ in range(len(ACTIVE_CONFIG_STATES) + 1):  # at most one pass per step
        now_ = now or timezone.now()
        with transaction.atomic():
            # skip_locked: another worker on this operation right now owns this step (PostgreSQL); on SQLite the
            # write lock serialises, and every move is conditional on the state anyway.
            op = (
                NodeConfigOperation.objects.select_for_update(skip_locked=True)
                .select_related("node")
                .filter(pk=pk, state__in=ACTIVE_CONFIG_STATES)
                .first()
            )
            if op is None:
                return
            before = op.state
            STEPS[op.state](op, backend, now_)
            if op.state == before:
                return  # waiting on the world; the next run looks again
            result.advanced += 1
            if op.state == NodeConfigState.DONE:
                result.done += 1
            elif op.state == NodeConfigState.FAILED:
                result.failed += 1


def _step_pending(op: NodeConfigOperation, backend: ClusterBackend, now: datetime) -> None:
    grace = settings.PORTAL_NODE_CONFIG_DRAIN_GRACE
    _move(
        op,
        NodeConfigState.PENDING,
        NodeConfigState.DRAINING,
        now,
        f"Draining: running GPU work may finish by itself for {grace} s; then preemptible jobs are requeued.",
        drain_grace_until=now + timedelta(seconds=grace),
        deadline=now + timedelta(seconds=settings.PORTAL_NODE_CONFIG_DRAIN_TIMEOUT),
    )


def _gpu_pods_on(backend: ClusterBackend, node_name: str) -> list[dict]:
    """Unfinished pods bound to the node that hold NVIDIA resources (anyone's, not only the portal's)."""
    busy = []
    for pod in backend.list_pods(label_selector=None):
        if (pod.get("spec") or {}).get("nodeName") != node_name:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if pod_gpu_requests(pod):
            busy.append(pod)
    return sorted(busy, key=seams.pod_key)


def _named(pods: list[dict]) -> list[str]:
    """How a person knows each workload on the node, once each: the portal's job ("#12 train", from the jobs app)
    or the pod's namespace/name, with how many of its pods run there when more than one ("#3 chat × 4 pods")."""
    known = seams.describe_pods(pods)
    counts = Counter(known.get(seams.pod_key(pod)) or seams.pod_key(pod) for pod in pods)
    return [name if n == 1 else f"{name} × {n} pods" for name, n in counts.items()]


def _kick_job_cycle() -> None:
    try:
        current_app.send_task(JOB_CYCLE_TASK, expires=120)
    except Exception:  # a broker outage must not stop the drain; the periodic job cycle requeues the work
        log.warning("could not queue a job cycle for a drain; the periodic one will requeue the work", exc_info=True)


def _step_draining(op: NodeConfigOperation, backend: ClusterBackend, now: datetime) -> None:
    """Wait until the node runs no GPU pods. The job side is level-triggered: once the grace period is over the
    node is listed by ``nodes_draining`` and every job cycle preempts and requeues the portal's preemptible
    work on it (jobs.cycle.draining); this step only watches the cluster."""
    node = op.node
    pods = _gpu_pods_on(backend, node.name)
    if not pods:
        _move(op, NodeConfigState.DRAINING, NodeConfigState.APPLYING, now, f"{node.name} runs no GPU work.")
        audit.record(None, InventoryAuditAction.NODE_CONFIG_DRAIN, op, after={"node": node.name})
        return
    if op.drain_grace_until and now >= op.drain_grace_until:
        notice = "Grace period over: the job cycle now stops and requeues the preemptible jobs on the node."
        if not any(entry.get("message") == notice for entry in op.log):
            _note(op, now, notice)
            transaction.on_commit(_kick_job_cycle)
    if op.deadline and now >= op.deadline:
        holding = _named(pods)
        _fail(
            op,
            now,
            f"{node.name} still runs GPU work after {settings.PORTAL_NODE_CONFIG_DRAIN_TIMEOUT} s "
            f"({', '.join(holding[:10])}); nothing was changed on the node. Stop that work or wait for it to "
            "finish, then request the layout again.",
        )
        return
    waiting = _named(pods)
    _note(op, now, f"Waiting for {len(waiting)} workload(s) to finish: {', '.join(waiting[:10])}.")


def _merge_config_map(backend: ClusterBackend, name: str, key: str, change) -> None:
    """Read-modify-write one key of a ConfigMap in the operator namespace; ``change`` maps old text to new."""
    namespace = settings.PORTAL_GPU_OPERATOR_NAMESPACE
    try:
        data = dict(backend.get_config_map(namespace, name).get("data") or {})
    except NotFound:
        data = {}
    new = change(data.get(key))
    if data.get(key) != new:
        data[key] = new
        backend.apply_config_map(namespace, name, data, labels={MANAGED_BY_LABEL: MANAGED_BY_VALUE})


def _mig_parted_text(existing: str | None, requested: dict) -> str:
    configs: dict[str, list] = {}
    if existing:
        try:
            document = yaml.safe_load(existing) or {}
            configs = dict(document.get("mig-configs") or {})
        except yaml.YAMLError:
            configs = {}
    name = requested["config"]
    if requested.get("preset"):
        entries = mig.preset_entries(name)
        # Every preset a node may select must be in the ConfigMap MIG Manager reads: the portal's replaces the
        # operator's default config, so presets are written with the same device-filters the default has.
        configs.setdefault(mig.ALL_DISABLED, mig.preset_entries(mig.ALL_DISABLED))
    else:
        entries = mig.custom_entries(requested["gpus"])
    configs[name] = entries
    return mig.render_mig_parted(configs)


def _device_plugin_text(requested: dict) -> str:
    config: dict = {"version": "v1", "flags": {"migStrategy": requested.get("strategy") or "none"}}
    if int(requested.get("replicas") or 1) > 1:
        # sharing.timeSlicing or sharing.mps: the same shape (k8s-device-plugin README, "Shared Access to GPUs").
        config["sharing"] = {
            ("mps" if requested.get("mps") else "timeSlicing"): {
                "renameByDefault": bool(requested.get("rename")),
                "resources": [{"name": GPU_RESOURCE, "replicas": int(requested["replicas"])}],
            }
        }
    return yaml.safe_dump(config, sort_keys=False)


def _step_applying(op: NodeConfigOperation, backend: ClusterBackend, now: datetime) -> None:
    node, requested = op.node, op.requested
    if op.kind == NodeConfigKind.MIG:
        if requested.get("preset") or requested.get("gpus") is not None:
            _merge_config_map(
                backend,
                settings.PORTAL_MIG_CONFIG_MAP,
                MIG_PARTED_CONFIG_KEY,
                lambda text: _mig_parted_text(text, requested),
            )
        label = {MIG_CONFIG_LABEL: requested["config"]}
        where = f"ConfigMap {settings.PORTAL_GPU_OPERATOR_NAMESPACE}/{settings.PORTAL_MIG_CONFIG_MAP}"
    else:
        _merge_config_map(
            backend,
            settings.PORTAL_DEVICE_PLUGIN_CONFIG_MAP,
            requested["config"],
            lambda _: _device_plugin_text(requested),
        )
        label = {DEVICE_PLUGIN_CONFIG_LABEL: requested["config"]}
        where = f"ConfigMap {settings.PORTAL_GPU_OPERATOR_NAMESPACE}/{settings.PORTAL_DEVICE_PLUGIN_CONFIG_MAP}"
    before = (backend.get_node(node.name).get("metadata") or {}).get("labels") or {}
    backend.patch_node_labels(node.name, label)
    (key, value) = next(iter(label.items()))
    if _move(
        op,
        NodeConfigState.APPLYING,
        NodeConfigState.WAITING,
        now,
        f"Wrote {requested['config']} to {where} and labelled {node.name} {key}={value}.",
        deadline=now + timedelta(seconds=settings.PORTAL_NODE_CONFIG_APPLY_TIMEOUT),
        cluster_state_at_apply=before.get(MIG_STATE_LABEL, ""),
        cluster_state=before.get(MIG_STATE_LABEL, ""),
    ):
        audit.record(None, InventoryAuditAction.NODE_CONFIG_APPLY, op, after={"labels": label, "config_map": where})


def _advertises(raw: dict, expected: dict[str, int], product_label: str) -> bool:
    status = raw.get("status") or {}
    capacity, allocatable = status.get("capacity") or {}, status.get("allocatable") or {}
    labels = (raw.get("metadata") or {}).get("labels") or {}
    for resource, amount in expected.items():
        if str(capacity.get(resource, "0")) != str(amount) or str(allocatable.get(resource, "0")) != str(amount):
            return False
    for resource, amount in capacity.items():
        if resource.startswith(NVIDIA_PREFIX) and resource not in expected and str(amount) not in ("0", ""):
            return False
    return not product_label or labels.get(GPU_PRODUCT_LABEL) == product_label


def _step_waiting(op: NodeConfigOperation, backend: ClusterBackend, now: datetime) -> None:
    node, requested = op.node, op.requested
    raw = backend.get_node(node.name)
    labels = (raw.get("metadata") or {}).get("labels") or {}
    if op.kind == NodeConfigKind.MIG:
        state = labels.get(MIG_STATE_LABEL, "")
        if state != op.cluster_state or not any(e["message"].startswith(f"{MIG_STATE_LABEL}=") for e in op.log):
            _note(op, now, f"{MIG_STATE_LABEL}={state or '(none)'}", cluster_state=state)
        if labels.get(MIG_CONFIG_LABEL) != requested["config"]:
            _fail(
                op,
                now,
                f"The {MIG_CONFIG_LABEL} label of {node.name} was changed to {labels.get(MIG_CONFIG_LABEL)!r} by "
                "someone else while MIG Manager was applying this layout.",
            )
            return
        # Right after the label is set, the state label may still tell of the previous attempt (a "failed" one
        # before a revert, say); it counts once MIG Manager has moved it.
        moved = state != op.cluster_state_at_apply or any(
            e["message"].startswith(f"{MIG_STATE_LABEL}=") and e["message"] != f"{MIG_STATE_LABEL}={state}"
            for e in op.log[-20:]
        )
        if state == MIG_CONFIG_FAILED and moved:
            _fail(
                op,
                now,
                f"MIG Manager could not apply {requested['config']} on {node.name} ({MIG_STATE_LABEL}=failed). "
                "Its log (kubectl logs -n gpu-operator -l app=nvidia-mig-manager) says why; common causes are "
                "processes still using the GPUs outside Kubernetes or a driver that needs a reboot. Revert to the "
                "previous layout to bring the node back.",
            )
            return
        done = state == MIG_CONFIG_SUCCESS and _advertises(raw, op.expected_resources, op.expected_product_label)
    else:
        if labels.get(DEVICE_PLUGIN_CONFIG_LABEL) != requested["config"]:
            _fail(op, now, f"The {DEVICE_PLUGIN_CONFIG_LABEL} label of {node.name} was changed by someone else.")
            return
        done = _advertises(raw, op.expected_resources, op.expected_product_label)
    if done:
        resources = ", ".join(f"{r}: {n}" for r, n in op.expected_resources.items()) or "nothing"
        _move(op, NodeConfigState.WAITING, NodeConfigState.REFRESHING, now, f"{node.name} advertises {resources}.")
        return
    if op.deadline and now >= op.deadline:
        _fail(
            op,
            now,
            f"The GPU Operator did not finish within {settings.PORTAL_NODE_CONFIG_APPLY_TIMEOUT} s "
            f"({MIG_STATE_LABEL}={labels.get(MIG_STATE_LABEL, 'unset')}); the node does not advertise the new "
            "resources. Check the MIG Manager / device plugin pods on the node, or revert to the previous layout.",
        )


def _step_refreshing(op: NodeConfigOperation, backend: ClusterBackend, now: datetime) -> None:
    sync_inventory(backend, op.node.cluster)
    orphaned = orphaned_class_warnings()
    if _move(
        op,
        NodeConfigState.REFRESHING,
        NodeConfigState.DONE,
        now,
        "Inventory and resource classes refreshed.",
        finished_at=now,
        warnings=list(dict.fromkeys([*op.warnings, *orphaned])),
    ):
        audit.record(None, InventoryAuditAction.NODE_CONFIG_DONE, op, after={"advertised": op.expected_resources})
        webhook_events.operation(op, "node_operation.applied")


STEPS = {
    NodeConfigState.PENDING: _step_pending,
    NodeConfigState.DRAINING: _step_draining,
    NodeConfigState.APPLYING: _step_applying,
    NodeConfigState.WAITING: _step_waiting,
    NodeConfigState.REFRESHING: _step_refreshing,
}
