"""Carving a node's GPUs: MIG layouts and time-slicing, applied the GPU Operator way.

An admin's request becomes a ``NodeConfigOperation`` row; ``advance_operations`` (run by beat, and kicked when an
operation is saved) moves every operation in progress one step at a time:

    pending → draining → applying → waiting → refreshing → done        (or failed, with the reason)

- draining: the job cycle places nothing new on the node while the operation is in progress
  (jobs.cycle.build_snapshot); running GPU work may finish by itself; after the grace period preemptible portal
  jobs are preempted (the job cycle deletes their workloads and requeues them); non-preemptible work is waited
  for until the drain timeout, then the operation fails and says which jobs held it up.
- applying: the mig-parted config is written into the portal's ConfigMap (MIG Manager's format, key
  ``config.yaml``) or a named entry into the device plugin's ConfigMap, then the node label selecting it is set
  (``nvidia.com/mig.config`` or ``nvidia.com/device-plugin.config``).
- waiting: follows ``nvidia.com/mig.config.state`` (pending, rebooting, success, failed) until the node
  advertises what the layout should give; a timeout or ``failed`` ends the operation.
- refreshing: the inventory and resource classes are read back from the cluster.

Every step is a conditional UPDATE on the state it was read in and the cluster writes are idempotent (the same
ConfigMap data and label again change nothing), so two workers advancing the same operation at once, or a worker
that crashed half-way, leave it in one consistent state.
"""

from __future__ import annotations

import hashlib
import logging
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import yaml
from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts import audit
from cluster.base import ClusterBackend, ClusterError, NotFound
from jobs.choices import ACTIVE_STATES, EventKind, JobAuditAction, JobState
from jobs.models import Job, JobEvent, Quota
from vocab import mig

from .choices import ACTIVE_CONFIG_STATES, InventoryAuditAction, NodeConfigKind, NodeConfigState
from .models import Node, NodeConfigOperation, ResourceClass
from .resources import class_key

log = logging.getLogger(__name__)

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
DEVICE_PLUGIN_CONFIG_LABEL = "nvidia.com/device-plugin.config"
GPU_RESOURCE = "nvidia.com/gpu"
SHARED_GPU_RESOURCE = "nvidia.com/gpu.shared"
#: The caveat every page that offers a time-sliced class repeats.
TIME_SLICING_CAVEAT = (
    "Time-sliced GPUs are shared in turns with no memory isolation: every job on a GPU sees all of its memory, "
    "one job can run another out of memory, and a slow neighbour makes yours slower."
)


class ConfigRefused(Exception):
    """The request cannot be applied; ``errors`` say why, in sentences an admin can act on."""

    def __init__(self, errors: list[str]):
        super().__init__(" ".join(errors))
        self.errors = errors


# -- planning: pure checks of a request against the node, nothing sent -----------------------------------------


@dataclass
class Plan:
    kind: str
    requested: dict
    expected_resources: dict[str, int]
    expected_product_label: str
    warnings: list[str] = field(default_factory=list)


def _short(name: str, limit: int = 63) -> str:
    """A label value (≤ 63 characters) made from a longer name, kept unique with a hash."""
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{name[: limit - 9].rstrip('-.')}-{digest}"


def node_geometry(node: Node) -> mig.MigProduct | None:
    return mig.product_geometry(node.product)


def current_mig_layout(node: Node) -> list[dict[str, int] | None]:
    """The node's per-GPU MIG devices as the inventory has them (None: MIG off)."""
    layouts: list[dict[str, int] | None] = []
    for gpu in node.gpus.all().prefetch_related("mig_partitions"):
        if gpu.mig_enabled:
            layouts.append(dict(Counter(p.profile for p in gpu.mig_partitions.all())))
        else:
            layouts.append(None)
    return layouts or [None] * node.gpu_count


def current_mig_placements(node: Node) -> list[list[list]]:
    return [
        [[p.profile, p.start] for p in gpu.mig_partitions.order_by("start")] if gpu.mig_enabled else []
        for gpu in node.gpus.all()
    ]


def plan_mig(
    node: Node, *, preset: str | None = None, placements: list[list[tuple[str, int]] | None] | None = None
) -> Plan:
    """Check a MIG request for ``node`` and work out what it will advertise. Either a GPU Operator preset name
    for the whole node, or per GPU a list of (profile, start slot) / None for MIG off. Raises ConfigRefused."""
    geometry = node_geometry(node)
    if geometry is None or not node.mig_capable:
        raise ConfigRefused([f"{node.name} has {node.product or 'no GPUs'}, which cannot be partitioned with MIG."])
    count = node.gpu_count
    errors: list[str] = []
    if preset:
        presets = mig.preset_layouts(geometry)
        if preset not in presets:
            raise ConfigRefused(
                [f"{preset} is not a GPU Operator preset for {geometry.key}; choose one of {', '.join(presets)}."]
            )
        layout = presets[preset]
        per_gpu = [None if layout is None else dict(layout) for _ in range(count)]
        chosen = [[(p.profile, p.start) for p in mig.place(geometry, layout)] if layout else [] for _ in range(count)]
        config = preset
    else:
        if placements is None or len(placements) != count:
            raise ConfigRefused([f"{node.name} has {count} GPUs; give a layout (or 'off') for each of them."])
        per_gpu, chosen = [], []
        for index, gpu_placements in enumerate(placements):
            if not gpu_placements:
                per_gpu.append(None)
                chosen.append([])
                continue
            problems = mig.validate_placements(geometry, list(gpu_placements))
            errors.extend(f"GPU {index}: {problem}" for problem in problems)
            per_gpu.append(dict(Counter(name for name, _ in gpu_placements)))
            chosen.append(sorted(gpu_placements, key=lambda p: p[1]))
        config = None
    if errors:
        raise ConfigRefused(errors)
    resources, product_label, problems = mig.advertised_after(
        geometry, per_gpu, node.mig_strategy, node.product_label or node.product
    )
    if problems:
        raise ConfigRefused(problems)
    requested = {
        "config": config or "",  # a custom layout's name is given when the operation is saved
        "preset": bool(preset),
        "gpus": per_gpu,
        "placements": [[[name, start] for name, start in gpu] for gpu in chosen],
    }
    plan = Plan(NodeConfigKind.MIG, requested, resources, product_label)
    plan.warnings = vanishing_class_warnings(node, resources, product_label)
    return plan


def plan_time_slicing(node: Node, *, replicas: int, rename: bool) -> Plan:
    """Check a time-slicing request (replicas per GPU; 1 turns sharing off) and work out what it advertises."""
    errors = []
    if not node.gpu_count:
        errors.append(f"{node.name} has no GPUs to share.")
    if not 1 <= replicas <= 64:
        errors.append("Replicas must be between 1 (no sharing) and 64 per GPU.")
    if node.gpus.filter(mig_enabled=True).exists():
        errors.append(
            f"{node.name} has MIG enabled; time-slicing here would share MIG devices. Apply all-disabled first, "
            "then time-slice the whole GPUs."
        )
    if errors:
        raise ConfigRefused(errors)
    base = (node.product_label or node.product).removesuffix("-SHARED")
    strategy = node.mig_strategy or "none"
    if replicas > 1:
        resource = SHARED_GPU_RESOURCE if rename else GPU_RESOURCE
        resources = {resource: replicas * node.gpu_count}
        label = base if rename else f"{base}-SHARED"
        key = f"portal-ts{replicas}{'-renamed' if rename else ''}-{strategy}"
    else:
        resources, label, key = {GPU_RESOURCE: node.gpu_count}, base, f"portal-exclusive-{strategy}"
    requested = {"config": key, "replicas": replicas, "rename": bool(rename and replicas > 1), "strategy": strategy}
    plan = Plan(NodeConfigKind.TIME_SLICING, requested, resources, label)
    plan.warnings = vanishing_class_warnings(node, resources, label)
    if replicas > 1:
        plan.warnings.append(
            f"{node.name} will advertise {replicas * node.gpu_count} × {resources and next(iter(resources))} "
            f"({replicas} per GPU × {node.gpu_count} GPUs). {TIME_SLICING_CAVEAT}"
        )
    return plan


def vanishing_class_warnings(node: Node, resources: dict[str, int], product_label: str) -> list[str]:
    """Resource classes only this node offers that it will not offer afterwards, with the quotas and queued jobs
    that refer to them: these need an admin's attention (move the quota, tell the team)."""
    after = {class_key(r, product_label) for r, n in resources.items() if n > 0}
    now = {
        class_key(r, node.product_label)
        for r, v in (node.capacity or {}).items()
        if r.startswith("nvidia.com/") and str(v).isdigit() and int(v) > 0
    }
    gone = now - after
    if not gone:
        return []
    warnings = []
    for rc in ResourceClass.objects.filter(key__in=gone, node_count__lte=1).order_by("key"):
        quotas = list(Quota.objects.filter(resource_class=rc).select_related("team"))
        queued = Job.objects.filter(resource_class=rc, state=JobState.QUEUED).count()
        parts = [f"{rc.display_name} ({rc.resource_name}) is offered only by {node.name} and will disappear."]
        if quotas:
            teams = ", ".join(sorted(q.team.name for q in quotas))
            parts.append(f"Quotas of {teams} refer to it; move them to a class that remains.")
        if queued:
            parts.append(f"{queued} queued job(s) ask for it and will wait until some node offers it again.")
        warnings.append(" ".join(parts))
    return warnings


# -- requests --------------------------------------------------------------------------------------------------


def request_operation(user, node: Node, plan: Plan, revert_of: NodeConfigOperation | None = None):
    """Save the operation (refused if one is already in progress on the node) and kick the worker."""
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
        "replicas": node.replicas if node.sharing_strategy == "time-slicing" else 1,
        "rename": SHARED_GPU_RESOURCE in (node.capacity or {}) and int(node.capacity[SHARED_GPU_RESOURCE] or 0) > 0,
        "strategy": node.mig_strategy or "none",
    }


def request_revert(user, op: NodeConfigOperation) -> NodeConfigOperation:
    """Ask for the configuration the node had before ``op`` (offered once ``op`` failed)."""
    op.refresh_from_db()
    if not op.can_revert:
        raise ConfigRefused(["Only a failed reconfiguration can be reverted."])
    node = op.node
    previous = op.previous
    if op.kind == NodeConfigKind.MIG:
        resources, label, _ = mig.advertised_after(
            node_geometry(node), previous.get("gpus") or [], node.mig_strategy, node.product_label or node.product
        )
        plan = Plan(NodeConfigKind.MIG, dict(previous), resources, label)
    else:
        plan = plan_time_slicing(node, replicas=int(previous.get("replicas") or 1), rename=bool(previous.get("rename")))
        if previous.get("config"):
            plan.requested["config"] = previous["config"]
    plan.warnings = vanishing_class_warnings(node, plan.expected_resources, plan.expected_product_label)
    return request_operation(user, node, plan, revert_of=op)


def kick() -> None:
    """Ask a worker to advance operations now (beat does it anyway every PORTAL_NODE_CONFIG_INTERVAL)."""
    from .tasks import advance_node_config_operations

    try:
        advance_node_config_operations.apply_async(expires=60)
    except Exception:  # a broker outage must not fail the request; beat picks the operation up
        log.warning("could not queue a node-config step; beat will run it", exc_info=True)


def reconfiguring_node_names() -> set[str]:
    """Nodes the job cycle must not place new work on."""
    return set(NodeConfigOperation.objects.filter(state__in=ACTIVE_CONFIG_STATES).values_list("node__name", flat=True))


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


def advance_operations(backend: ClusterBackend, now: datetime | None = None) -> AdvanceResult:
    """Move every operation in progress as far as it can go now. Safe to run concurrently and repeatedly."""
    result = AdvanceResult()
    ids = list(NodeConfigOperation.objects.filter(state__in=ACTIVE_CONFIG_STATES).values_list("pk", flat=True))
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


def _gpu_pods_on(backend: ClusterBackend, node_name: str) -> list[str]:
    """Unfinished pods bound to the node that hold NVIDIA resources (anyone's, not only the portal's)."""
    from .resources import pod_gpu_requests

    busy = []
    for pod in backend.list_pods(label_selector=None):
        if (pod.get("spec") or {}).get("nodeName") != node_name:
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        if pod_gpu_requests(pod):
            busy.append(f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}")
    return sorted(busy)


def _step_draining(op: NodeConfigOperation, backend: ClusterBackend, now: datetime) -> None:
    node = op.node
    jobs = list(Job.objects.filter(node_name=node.name, state__in=ACTIVE_STATES).order_by("pk"))
    pods = _gpu_pods_on(backend, node.name)
    if not jobs and not pods:
        _move(op, NodeConfigState.DRAINING, NodeConfigState.APPLYING, now, f"{node.name} runs no GPU work.")
        audit.record(None, InventoryAuditAction.NODE_CONFIG_DRAIN, op, after={"node": node.name})
        return
    if op.drain_grace_until and now >= op.drain_grace_until:
        to_requeue = [j for j in jobs if j.preemptible and j.state != JobState.PREEMPTING]
        for job in to_requeue:
            changed = Job.objects.filter(pk=job.pk, state=job.state).update(
                state=JobState.PREEMPTING, state_changed_at=now, preempt_at=now
            )
            if changed:
                JobEvent.objects.create(
                    job=job,
                    at=now,
                    kind=EventKind.PREEMPT_NOTICE,
                    message=(
                        f"An admin is reconfiguring the GPUs of {node.name} (operation #{op.pk}). This job is "
                        "preemptible, so it is stopped now and requeued; it will run again elsewhere or here "
                        "once the node is back."
                    ),
                    data={"node_config_operation": op.pk},
                )
                audit.record(None, JobAuditAction.JOB_PREEMPT, job, after={"node_config_operation": op.pk})
        if to_requeue:
            _note(op, now, f"Requeued preemptible jobs {', '.join(f'#{j.pk}' for j in to_requeue)}.")
            from jobs.services import kick_admission

            transaction.on_commit(kick_admission)
    if op.deadline and now >= op.deadline:
        holding = [f"#{j.pk} {j.name}" for j in jobs if not j.preemptible] or pods
        _fail(
            op,
            now,
            f"{node.name} still runs GPU work after {settings.PORTAL_NODE_CONFIG_DRAIN_TIMEOUT} s "
            f"({', '.join(holding[:10])}); nothing was changed on the node. Stop that work or wait for it to "
            "finish, then request the layout again.",
        )
        return
    waiting = [f"#{j.pk} {j.name}" for j in jobs] or pods
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
        backend.apply_config_map(namespace, name, data, labels={"app.kubernetes.io/managed-by": "gpu-portal"})


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
        config["sharing"] = {
            "timeSlicing": {
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
                "config.yaml",
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
        if resource.startswith("nvidia.com/") and resource not in expected and str(amount) not in ("0", ""):
            return False
    return not product_label or labels.get("nvidia.com/gpu.product") == product_label


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
        if state == "failed" and moved:
            _fail(
                op,
                now,
                f"MIG Manager could not apply {requested['config']} on {node.name} ({MIG_STATE_LABEL}=failed). "
                "Its log (kubectl logs -n gpu-operator -l app=nvidia-mig-manager) says why; common causes are "
                "processes still using the GPUs outside Kubernetes or a driver that needs a reboot. Revert to the "
                "previous layout to bring the node back.",
            )
            return
        done = state == "success" and _advertises(raw, op.expected_resources, op.expected_product_label)
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
    from .reconcile import sync_inventory

    sync_inventory(backend)
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


def orphaned_class_warnings() -> list[str]:
    """Quotas and queued jobs whose resource class no node offers any more."""
    out = []
    for rc in ResourceClass.objects.filter(present=False).order_by("key"):
        quotas = Quota.objects.filter(resource_class=rc).count()
        queued = Job.objects.filter(resource_class=rc, state=JobState.QUEUED).count()
        if quotas or queued:
            out.append(
                f"{rc.display_name} is no longer offered by any node: {quotas} quota(s) and {queued} queued job(s) "
                "refer to it."
            )
    return out


STEPS = {
    NodeConfigState.PENDING: _step_pending,
    NodeConfigState.DRAINING: _step_draining,
    NodeConfigState.APPLYING: _step_applying,
    NodeConfigState.WAITING: _step_waiting,
    NodeConfigState.REFRESHING: _step_refreshing,
}


def quota_problems() -> dict[int, str]:
    """Quota id -> why it needs an admin: its class is no longer offered by any node."""
    return {
        q.pk: f"{q.resource_class.display_name} is no longer offered by any node."
        for q in Quota.objects.filter(resource_class__present=False).select_related("resource_class")
    }


def plan_from_request(
    node: Node,
    kind: str,
    *,
    preset: str = "",
    gpus: list[str] | None = None,
    replicas: int | None = None,
    rename: bool = False,
) -> Plan:
    """The plan for what a form or an API call asks: a MIG preset, per-GPU typed layouts
    (``"3g.40gb@0, 3g.40gb@4"``, ``"off"``), or time-slicing replicas. Raises ConfigRefused with every problem."""
    if kind == NodeConfigKind.TIME_SLICING:
        if replicas is None:
            raise ConfigRefused(["Say how many replicas each GPU should be shared into (1 turns sharing off)."])
        return plan_time_slicing(node, replicas=int(replicas), rename=rename)
    if kind != NodeConfigKind.MIG:
        raise ConfigRefused([f"Unknown kind {kind!r}: use 'mig' or 'time-slicing'."])
    if preset and gpus:
        raise ConfigRefused(["Give either a preset for the whole node or a layout per GPU, not both."])
    if preset:
        return plan_mig(node, preset=preset)
    if not gpus:
        raise ConfigRefused(["Choose a preset or give a layout for each GPU."])
    geometry = node_geometry(node)
    if geometry is None or not node.mig_capable:
        raise ConfigRefused([f"{node.name} has {node.product or 'no GPUs'}, which cannot be partitioned with MIG."])
    placements, errors = [], []
    for index, text in enumerate(gpus):
        parsed, problems = mig.parse_slots(geometry, text or "")
        errors.extend(f"GPU {index}: {problem}" for problem in problems)
        placements.append(parsed)
    if errors:
        raise ConfigRefused(errors)
    return plan_mig(node, placements=placements)
