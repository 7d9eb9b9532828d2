"""The clusters of the fleet: registering, changing and removing one (admins), reaching each, checking it and
keeping its inventory, each cluster on its own.

One home for the rules of a cluster's connection: the API serializer and the web form both hand their cleaned input
to ``problems``/``register``/``change``, which probe the API server before anything is stored, so a wrong URL, CA or
token is reported (every problem at once) and nothing half-made is kept. Tokens are sealed (core.sealed) and never
shown again; every change is audited.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import IntegrityError, transaction
from django.utils import timezone

from cluster import backend_for, forget_backend, get_backend, settings_connection
from cluster.base import ClusterBackend, ClusterError
from cluster.connect import FIELD_TO_FIX, Capabilities, Connection, connect, discover, failure_kind
from core import audit, sealed

from . import seams
from .choices import ClusterConnection, ClusterHealth, InventoryAuditAction
from .models import Cluster, Node, ResourceClass
from .reconcile import SyncResult, sync_inventory, write_fleet_classes

log = logging.getLogger(__name__)

#: The scenarios a simulated cluster may start from (cluster/scenarios/<name>.yaml).
SCENARIO_DIR = Path(settings.BASE_DIR) / "cluster" / "scenarios"
#: The fields a connection kind needs (beyond name): what ``problems`` asks for.
NEEDS = {
    ClusterConnection.TOKEN: ("server", "token"),
    ClusterConnection.KUBECONFIG: (),
    ClusterConnection.IN_CLUSTER: (),
    ClusterConnection.SIMULATED: (),
}
EDITABLE = (
    "display_name", "region", "labels", "connection", "kubeconfig_path", "kube_context", "server", "ca_certificate",
    "sim_scenario",
)  # fmt: skip


class Problems(Exception):
    """Input that cannot be stored: field name → what to fix (every problem at once; '' is the form as a whole)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__("; ".join(f"{k or 'cluster'}: {' '.join(v)}" for k, v in errors.items()))
        self.errors = errors


class Refused(Exception):
    """The action is not allowed now; the message says why and what to do."""


@dataclass
class ClusterInput:
    """A registration or change, as the form or serializer cleaned it. ``token`` empty on a change keeps the sealed
    token (it is never shown, so a form cannot send it back)."""

    name: str = ""
    display_name: str = ""
    region: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    connection: str = ""
    kubeconfig_path: str = ""
    kube_context: str = ""
    server: str = ""
    ca_certificate: str = ""
    token: str = ""
    sim_scenario: str = ""


def scenarios() -> list[str]:
    return sorted(path.stem for path in SCENARIO_DIR.glob("*.yaml"))


def _sim_state(name: str) -> str:
    return str(Path(settings.DATA_DIR) / f"simcluster-{name}.json")


def connection_of(cluster: Cluster, token: str | None = None) -> Connection:
    """How to reach ``cluster`` (``token``: a new one, not yet sealed)."""
    kind = cluster.connection
    if kind == ClusterConnection.SETTINGS:
        return settings_connection()
    if kind == ClusterConnection.SIMULATED:
        scenario = str(SCENARIO_DIR / f"{cluster.sim_scenario or 'demo'}.yaml")
        return Connection(kind, sim_state=_sim_state(cluster.name), sim_scenario=scenario)
    return Connection(
        kind,
        kubeconfig=cluster.kubeconfig_path,
        context=cluster.kube_context,
        server=cluster.server,
        ca_certificate=cluster.ca_certificate,
        token=token if token is not None else sealed.unseal(cluster.token_sealed),
    )


def backend_of(cluster: Cluster) -> ClusterBackend:
    """The process's backend for ``cluster``."""
    if cluster.connection == ClusterConnection.SETTINGS:
        return get_backend()
    return backend_for(cluster.name, connection_of(cluster))


def one_pass(what: str, name: str, timeout: int, work: Callable[[Cluster], dict]) -> dict:
    """Run ``work`` on the registered cluster ``name`` unless a ``what`` pass of that cluster is already running (one
    lock per cluster and kind of pass, in the shared cache, held at most ``timeout`` seconds, the task's hard time
    limit): {"skipped": 1} then, and {"gone": 1} when the cluster has been removed. Every per-cluster task (inventory,
    node operations, DCGM scrapes, team presence) runs through here, so several workers never run one pass twice."""
    lock = f"gpuportal:{what}:{name}"
    if not cache.add(lock, 1, timeout=timeout):
        return {"skipped": 1}
    try:
        cluster = Cluster.objects.filter(name=name).first()
        return work(cluster) if cluster is not None else {"gone": 1}
    finally:
        cache.delete(lock)


def backend_of_id(cluster_id: int | None) -> ClusterBackend:
    """The process's backend for the cluster with this id (None: the one configured in settings): where a job, a
    session or a service was placed (``Job.cluster``), for a page or API that reads from its pods (logs)."""
    if cluster_id is None:
        return get_backend()
    return backend_of(Cluster.objects.get(pk=cluster_id))


def problems(data: ClusterInput, existing: Cluster | None = None) -> dict[str, list[str]]:
    """What is wrong with ``data`` before anyone talks to the cluster: every problem, by field."""
    errors: dict[str, list[str]] = {}
    if existing is None and Cluster.objects.filter(name=data.name).exists():
        errors.setdefault("name", []).append(
            f"A cluster named {data.name!r} is already registered; choose another name."
        )
    if data.connection == ClusterConnection.SETTINGS:
        errors.setdefault("connection", []).append(
            "The cluster configured in settings is registered by the portal itself; choose how to reach this one."
        )
    for needed in NEEDS.get(data.connection, ()):
        if needed == "token" and existing is not None and existing.token_sealed and not data.token:
            continue  # keeps the sealed token
        if not getattr(data, needed):
            errors.setdefault(needed, []).append(f"A {data.connection} connection needs this.")
    if data.connection == ClusterConnection.TOKEN and data.server and not data.server.startswith("https://"):
        errors.setdefault("server", []).append("The API server must be an https:// URL (the token travels with it).")
    if data.connection == ClusterConnection.SIMULATED and data.sim_scenario and data.sim_scenario not in scenarios():
        errors.setdefault("sim_scenario", []).append(f"No such scenario; choose one of {', '.join(scenarios())}.")
    if data.ca_certificate and "-----BEGIN CERTIFICATE-----" not in data.ca_certificate:
        errors.setdefault("ca_certificate", []).append(
            "Paste the CA certificate in PEM form (-----BEGIN CERTIFICATE-----)."
        )
    return errors


def probe(cluster: Cluster, token: str | None = None) -> Capabilities:
    """Reach the cluster as it would be stored (a throw-away backend, no retries) and discover what it offers;
    raises Problems naming the field to fix."""
    try:
        return discover(connect(connection_of(cluster, token), probe=True))
    except ClusterError as error:
        text = str(error)
        where = FIELD_TO_FIX.get(failure_kind(text)) or (
            "server" if cluster.connection == ClusterConnection.TOKEN else ""
        )
        raise Problems({where: [text]}) from error


def _apply(cluster: Cluster, data: ClusterInput) -> None:
    for name in EDITABLE:
        setattr(cluster, name, getattr(data, name))


def _found(cluster: Cluster, found: Capabilities, now) -> None:
    cluster.capabilities = found.as_dict()
    cluster.server_version = found.server_version
    cluster.health, cluster.last_error, cluster.unreachable_since = ClusterHealth.REACHABLE, "", None
    cluster.last_checked_at = now


def _shown(cluster: Cluster) -> dict[str, Any]:
    """What the audit log keeps of a cluster: never the token, only whether there is one."""
    return {name: getattr(cluster, name) for name in ("name", *EDITABLE)} | {
        "token": "set" if cluster.token_sealed else ""
    }


def register(by, data: ClusterInput) -> Cluster:
    """Register a cluster: check the input, reach the cluster, then store it (token sealed) and audit it."""
    errors = problems(data)
    if errors:
        raise Problems(errors)
    cluster = Cluster(name=data.name)
    _apply(cluster, data)
    found = probe(cluster, data.token)
    _found(cluster, found, timezone.now())
    cluster.token_sealed = sealed.seal(data.token)
    try:
        with transaction.atomic():
            cluster.save()
            audit.record(by, InventoryAuditAction.CLUSTER_REGISTER, cluster, after=_shown(cluster))
    except IntegrityError as error:  # registered by someone else meanwhile
        raise Problems(
            {"name": [f"A cluster named {data.name!r} is already registered; choose another name."]}
        ) from error
    return cluster


def change(by, cluster: Cluster, data: ClusterInput) -> Cluster:
    """Change how a registered cluster is reached or described; a new connection is probed before it is stored."""
    if cluster.connection == ClusterConnection.SETTINGS:
        raise Refused("The cluster configured in settings is changed in the portal's settings, not here.")
    errors = problems(data, existing=cluster)
    if errors:
        raise Problems(errors)
    before = _shown(cluster)
    candidate = Cluster(pk=cluster.pk, name=cluster.name, token_sealed=cluster.token_sealed)
    _apply(candidate, data)
    token = data.token or sealed.unseal(cluster.token_sealed)
    found = probe(candidate, token)
    _apply(cluster, data)
    if data.token:
        cluster.token_sealed = sealed.seal(data.token)
    _found(cluster, found, timezone.now())
    with transaction.atomic():
        cluster.save()
        audit.record(by, InventoryAuditAction.CLUSTER_UPDATE, cluster, before=before, after=_shown(cluster))
    return cluster


def holders(cluster: Cluster) -> list[str]:
    """What keeps ``cluster`` from being removed: the portal's work on its nodes (seams.work_on_nodes)."""
    names = list(Node.objects.filter(cluster=cluster, gone_at__isnull=True).values_list("name", flat=True))
    if not names or seams.seam.work_on_nodes is None:
        return []
    return seams.seam.work_on_nodes(cluster.pk, names)


def remove(by, cluster: Cluster) -> None:
    """Remove a cluster that holds no work (its nodes, GPUs and MIG rows go with it)."""
    if cluster.connection == ClusterConnection.SETTINGS:
        raise Refused(
            "The cluster configured in settings stays registered while settings name it (PORTAL_CLUSTER_BACKEND)."
        )
    held = holders(cluster)
    if held:
        shown = ", ".join(held[:10]) + (f" and {len(held) - 10} more" if len(held) > 10 else "")
        raise Refused(f"Cluster {cluster.name} still runs work: {shown}. Stop or move it first.")
    scoped = list(ResourceClass.objects.filter(cluster=cluster).values_list("key", flat=True))
    if scoped:
        raise Refused(
            f"Resource classes are scoped to cluster {cluster.name}: {', '.join(scoped)}. Make them fleet-wide or "
            "scope them to another cluster first (Admin → Resource classes)."
        )
    before = _shown(cluster)
    with transaction.atomic():
        Node.objects.filter(cluster=cluster).delete()
        audit.record(by, InventoryAuditAction.CLUSTER_REMOVE, cluster, before=before)
        cluster.delete()
        write_fleet_classes()
    forget_backend(cluster.name)


def sync(cluster: Cluster) -> SyncResult | None:
    """One inventory pass of ``cluster``: discover what it offers, then read its nodes and pods. When it cannot be
    reached it is marked unreachable (since the first failure), its devices stop being offered, and None is
    returned; the next pass that reaches it marks it back."""
    now = timezone.now()
    try:
        backend = backend_of(cluster)
        found = discover(backend)
        result = sync_inventory(backend, cluster)
    except ClusterError as error:
        mark_unreachable(cluster, str(error), now)
        return None
    was_unreachable = cluster.health == ClusterHealth.UNREACHABLE
    _found(cluster, found, now)
    Cluster.objects.filter(pk=cluster.pk).update(
        capabilities=cluster.capabilities, server_version=cluster.server_version, health=cluster.health,
        last_error="", unreachable_since=None, last_checked_at=now,
    )  # fmt: skip
    if was_unreachable:
        audit.record(None, InventoryAuditAction.CLUSTER_BACK, cluster)
        write_fleet_classes()
    return result


def mark_unreachable(cluster: Cluster, problem: str, now=None) -> None:
    """Record that ``cluster`` did not answer (the inventory's pass, or the job cycle's): its devices are withheld
    from admission and the cycle leaves it out until an inventory pass reaches it again. Audited the first time."""
    now = now or timezone.now()
    first = cluster.health != ClusterHealth.UNREACHABLE
    since = now if first else cluster.unreachable_since or now
    Cluster.objects.filter(pk=cluster.pk).update(
        health=ClusterHealth.UNREACHABLE, last_error=problem[:2000], unreachable_since=since, last_checked_at=now
    )
    cluster.health, cluster.last_error, cluster.unreachable_since = ClusterHealth.UNREACHABLE, problem, since
    log.warning("cluster %s unreachable: %s", cluster.name, problem)
    if first:
        audit.record(None, InventoryAuditAction.CLUSTER_UNREACHABLE, cluster, after={"error": problem[:500]})
        write_fleet_classes()


def _followed():
    return Cluster.objects.exclude(connection=ClusterConnection.SETTINGS).exclude(health=ClusterHealth.UNREACHABLE)


def reachable_names() -> list[str]:
    """The names of the registered clusters the job cycle follows and launches on: those the inventory has not found
    unreachable (an unreachable one is retried by the inventory's passes, not by the cycle's)."""
    return list(_followed().values_list("name", flat=True))


def reachable() -> list[tuple[Cluster, ClusterBackend]]:
    """The clusters of ``reachable_names``, with their backends."""
    out = []
    for cluster in _followed():
        try:
            out.append((cluster, backend_of(cluster)))
        except ClusterError as error:  # its connection cannot even be built (a kubeconfig gone): skip it
            log.warning("cluster %s skipped by the job cycle: %s", cluster.name, error)
    return out
