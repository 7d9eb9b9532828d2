"""What an admin can do to a reconfiguration besides requesting it: see beforehand what the drain will touch,
abort it before anything is written to the node, force a drain that non-preemptible work holds up, and (in
gpus.nodeconfig) revert it.

- ``drain_preview`` reads the node's GPU pods from the cluster and sorts them into the work a drain requeues
  (the portal's preemptible jobs) and the work that holds it up (everything else: non-preemptible jobs,
  notebooks, service replicas, pods the portal does not manage).
- ``abort_operation`` ends a pending or draining operation: nothing was written to the node yet, so the node
  simply takes new work again.
- ``force_drain`` records who forced the drain and why. The inventory only publishes the fact
  (``nodes_forced``); the job cycle (jobs.cycle.draining) stops the portal's work on the node at once,
  preemptible or not, and tells each owner the reason. Pods the portal does not manage are left to the admin.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from cluster.base import ClusterBackend
from core import audit

from . import seams, webhook_events
from .choices import ABORTABLE_CONFIG_STATES, InventoryAuditAction, NodeConfigState
from .models import Node, NodeConfigOperation
from .nodeconfig import _entry, _gpu_pods_on, kick
from .nodeconfig_plan import ConfigRefused

#: A forced drain's reason is told to every owner; it must say something.
MIN_REASON = 10


@dataclass
class DrainPreview:
    """The work on a node, each workload once (``PodWork.pods`` says how many of its pods run there)."""

    requeued: list[seams.PodWork] = field(default_factory=list)
    blocking: list[seams.PodWork] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.requeued or self.blocking)


def drain_preview(backend: ClusterBackend, node: Node) -> DrainPreview:
    pods = _gpu_pods_on(backend, node.name)
    work = seams.classify_pods(pods)
    items = seams.by_workload([work[seams.pod_key(pod)] for pod in pods])
    return DrainPreview(
        requeued=[item for item in items if item.requeued], blocking=[item for item in items if not item.requeued]
    )


@dataclass(frozen=True)
class ForcedDrain:
    operation: int
    reason: str
    #: The admin who forced it (None if their account is gone): the owners are told it was them.
    by: object | None


def nodes_forced() -> dict[tuple[int, str], ForcedDrain]:
    """(cluster id, node name) → the forced drain, for drains an admin forced: the job cycle stops all the portal's
    work there now, preemptible or not."""
    ops = NodeConfigOperation.objects.filter(state=NodeConfigState.DRAINING, forced_at__isnull=False)
    return {
        (op.node.cluster_id, op.node.name): ForcedDrain(op.pk, op.force_reason, op.forced_by)
        for op in ops.select_related("node", "forced_by")
    }


def abort_operation(user, op: NodeConfigOperation, reason: str = "") -> NodeConfigOperation:
    now = timezone.now()
    with transaction.atomic():
        op = NodeConfigOperation.objects.select_for_update().get(pk=op.pk)
        if op.state not in ABORTABLE_CONFIG_STATES:
            raise ConfigRefused(
                [
                    f"Operation #{op.pk} is {op.get_state_display().lower()}: only a pending or draining operation can "
                    "be aborted (after that the node's configuration is being changed; revert it once it ends)."
                ]
            )
        was = op.state
        who = user.get_username() if getattr(user, "is_authenticated", False) else "system"
        message = (
            f"Aborted by {who}"
            + (f": {reason.strip()}" if reason.strip() else "")
            + ("; nothing was changed on the node and it takes new work again.")
        )
        entry = _entry(now, message, was)  # the progress bar shows where it stopped
        op.log = [*op.log, entry]
        op.state, op.state_changed_at, op.finished_at, op.reason = NodeConfigState.ABORTED, now, now, message
        op.save(update_fields=["log", "state", "state_changed_at", "finished_at", "reason"])
        audit.record(user, InventoryAuditAction.NODE_CONFIG_ABORT, op, before={"state": was}, after={"reason": reason})
        webhook_events.operation(op, "node_operation.aborted", actor=user, reason=reason)
    return op


def force_drain(user, op: NodeConfigOperation, reason: str) -> NodeConfigOperation:
    reason = (reason or "").strip()
    errors = []
    if len(reason) < MIN_REASON:
        errors.append(
            f"Say why the drain is forced (at least {MIN_REASON} characters): every owner whose work is stopped "
            "is told this reason."
        )
    now = timezone.now()
    with transaction.atomic():
        op = NodeConfigOperation.objects.select_for_update().get(pk=op.pk)
        if op.state != NodeConfigState.DRAINING:
            errors.append(
                f"Operation #{op.pk} is {op.get_state_display().lower()}: only a draining node can be forced."
            )
        elif op.forced_at is not None:
            errors.append(f"The drain of operation #{op.pk} was already forced.")
        if errors:
            raise ConfigRefused(errors)
        who = user.get_username()
        op.log = [
            *op.log,
            _entry(now, f"Drain forced by {who}: {reason}. The portal's work on the node stops now.", op.state),
        ]
        op.forced_at, op.forced_by, op.force_reason = now, user, reason
        op.save(update_fields=["log", "forced_at", "forced_by", "force_reason"])
        audit.record(user, InventoryAuditAction.NODE_CONFIG_FORCE, op, after={"reason": reason})
        webhook_events.operation(op, "node_operation.forced", actor=user, reason=reason)
    transaction.on_commit(kick)
    return op
