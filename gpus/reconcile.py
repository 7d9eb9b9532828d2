"""Bring the inventory tables in line with what the cluster reports.

Level-triggered and idempotent: each run reads the whole picture (one node list, one pod list), computes
what the rows should be with the pure modules (gfd, diagnosis, mig, resources), and writes the difference
with bulk operations, so the number of queries does not grow with the number of nodes. Safe to run twice
at once (writes are in one transaction; the last writer wins with the same answer) and after a crash.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from accounts.models import Team
from cluster.base import MANAGED_BY_LABEL, MANAGED_BY_VALUE, ClusterBackend
from core import audit
from core.gcpause import paused_gc
from vocab.dra import GPU_DRIVER, MIG_DEVICE_CLASS, RESOURCE_API_VERSION
from vocab.gfd import NodeFacts, parse_node
from vocab.mig import Placement, place, product_geometry, split_across_gpus
from vocab.names import (
    GPU_MEMORY_LABEL,
    GPU_RESOURCE,
    MIG_STRATEGY_MIXED,
    MIG_STRATEGY_SINGLE,
    SHARING_MPS,
    SHARING_NONE,
    mig_resource_name,
)

from . import diagnosis, smoketest
from .choices import (
    ClusterHealth,
    GpuRequestMode,
    InventoryAuditAction,
    NodeConfigKind,
    NodeConfigState,
    NodeHealth,
    ResourceKind,
    SharingMode,
)
from .dra_inventory import CLASS_KEY_PREFIX as DRA_CLASS_KEY_PREFIX
from .dra_inventory import DraNode, derive_dra_classes, node_inventories, product_label
from .models import (
    GPU,
    Cluster,
    MigPartition,
    Node,
    NodeConfigOperation,
    NodePool,
    ResourceClass,
    settings_cluster_pk,
)
from .resources import (
    ClassStats,
    class_share,
    derive_classes,
    external_requests_by_node,
    sum_class_shares,
    usage_by_node,
    withheld,
)

log = logging.getLogger(__name__)

NODE_FIELDS = [
    "uid", "resource_version", "labels", "taints", "capacity", "allocatable", "conditions", "gpu_in_use",
    "external_requests",
    "unschedulable", "ready", "product", "product_label", "gpu_count", "gpu_memory_mb", "gpu_family",
    "compute_capability", "driver_version", "cuda_version", "mig_capable", "mig_strategy", "mig_config",
    "mig_config_state", "sharing_strategy", "replicas", "device_plugin_ok", "health", "diagnosis", "team",
    "last_seen", "gone_at", "provider", "instance_type", "product_source", "architecture", "clique",
    "unhealthy_gpus", "driver_upgrade_state", "blocked_reason", "pool",
]  # fmt: skip
GPU_FIELDS = ["product", "memory_mb", "mig_enabled", "sharing", "replicas"]
CLASS_FIELDS = [
    "kind", "resource_name", "product", "product_label", "profile", "replicas", "memory_mb", "gpu_fraction",
    "total", "allocatable", "in_use", "free", "node_count", "present", "sharing_strategy", "architectures",
]  # fmt: skip


@dataclass
class SyncResult:
    nodes_seen: int = 0
    nodes_created: int = 0
    nodes_gone: int = 0
    nodes_back: int = 0
    gpus: int = 0
    mig_partitions: int = 0
    resource_classes: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(self.__dict__)


def _health(facts: NodeFacts, findings: list[diagnosis.Finding], dra_published: bool = False) -> str:
    """A node whose GPUs NVIDIA's DRA driver publishes is a GPU node like any other (admission counts its devices,
    jobs.scheduling.dra); one whose device plugin is switched off, or that should run the DRA stack but publishes
    nothing, has its GPUs switched off."""
    if not facts.is_gpu_node:
        return NodeHealth.NO_GPU
    worst = diagnosis.overall(findings)
    off_on_purpose = diagnosis.device_plugin_switched_off(facts) or diagnosis.dra_stack(facts)
    if worst != diagnosis.ERROR and off_on_purpose and not facts.gpus_advertised and not dra_published:
        return NodeHealth.DISABLED
    return {diagnosis.ERROR: NodeHealth.ERROR, diagnosis.WARNING: NodeHealth.WARNING}.get(worst, NodeHealth.HEALTHY)


def _applied_matches(facts: NodeFacts, applied: list[list] | None) -> bool:
    """Whether a per-GPU layout the portal applied (from its operation) is what the node advertises now."""
    if not applied or len(applied) != facts.gpu_count:
        return False
    counts: dict[str, int] = {}
    for gpu in applied:
        for name, _ in gpu:
            counts[name] = counts.get(name, 0) + 1
    if facts.mig_strategy == MIG_STRATEGY_MIXED:
        return counts == {p.profile: p.count for p in facts.mig_profiles if p.count}
    if facts.mig_strategy == MIG_STRATEGY_SINGLE and facts.single_mig_profile:
        advertised = facts.gpu_capacity.get(GPU_RESOURCE, 0)
        return set(counts) == {facts.single_mig_profile} and sum(counts.values()) == advertised
    return False


def _gpu_rows(facts: NodeFacts, applied: list[list] | None = None) -> list[dict]:
    """The GPUs of a node, each with its MIG partitions (profile, start, size, ...). ``applied``: the per-GPU
    placements of the operation that set the node's current MIG config, used when the node advertises exactly
    those instances (labels only give node-wide counts, which say nothing about which GPU has what)."""
    if not facts.is_gpu_node or facts.gpu_count <= 0:
        return []
    geometry = product_geometry(facts.product)
    layouts: list[dict[str, int]] = [{} for _ in range(facts.gpu_count)]
    profile_facts = {p.profile: p for p in facts.mig_profiles}
    known: list[list[Placement]] | None = None
    if geometry and _applied_matches(facts, applied) and all(geometry.profile(n) for g in applied for n, _ in g):
        known = [
            sorted((Placement(n, int(s), geometry.profile(n).size) for n, s in gpu), key=lambda p: p.start)
            for gpu in applied
        ]
        layouts = [dict(Counter(p.profile for p in gpu)) for gpu in known]
    elif geometry and facts.mig_strategy == MIG_STRATEGY_MIXED and facts.mig_profiles:
        layouts = split_across_gpus(geometry, {p.profile: p.count for p in facts.mig_profiles}, facts.gpu_count)
    elif geometry and facts.mig_strategy == MIG_STRATEGY_SINGLE and facts.single_mig_profile:
        profile = geometry.profile(facts.single_mig_profile)
        per_gpu = profile.max_instances if profile else 0  # the catalogue's answer, never a formula
        layouts = [{facts.single_mig_profile: per_gpu} for _ in range(facts.gpu_count)] if per_gpu else layouts
    rows = []
    for index, layout in enumerate(layouts):
        if known is not None:
            placements = known[index]
        else:
            placements = (place(geometry, layout) or []) if geometry and layout else []
        mig = bool(placements)
        if mig:
            sharing = SharingMode.MIG
        elif facts.replicas > 1:
            sharing = SharingMode.MPS if facts.sharing_strategy == SHARING_MPS else SharingMode.TIME_SLICED
        else:
            sharing = SharingMode.EXCLUSIVE
        rows.append(
            {
                "index": index,
                "product": facts.product,
                "memory_mb": facts.gpu_memory_mb,
                "mig_enabled": mig,
                "sharing": sharing,
                "replicas": facts.replicas if sharing in (SharingMode.TIME_SLICED, SharingMode.MPS) else 1,
                "partitions": [
                    {
                        "profile": p.profile,
                        "start": p.start,
                        "size": p.size,
                        "compute_slices": geometry.profile(p.profile).compute,
                        "memory_mb": (profile_facts[p.profile].memory_mb if p.profile in profile_facts else None)
                        or (
                            _int(facts.labels.get(GPU_MEMORY_LABEL))
                            if facts.mig_strategy == MIG_STRATEGY_SINGLE
                            else None
                        ),
                        "resource_name": (
                            GPU_RESOURCE if facts.mig_strategy == MIG_STRATEGY_SINGLE else mig_resource_name(p.profile)
                        ),
                    }
                    for p in placements
                ],
            }
        )
    return rows


def _int(value):
    return int(value) if value and str(value).isdigit() else None


#: Cluster pk -> node name -> ((uid, resourceVersion), what parse_node made of that version): a Node object that
#: did not change is not parsed again (this process's memory; each cluster's entries follow the nodes it listed
#: last). Per cluster, since clusters may have nodes of the same name: one worker syncs them all in turn.
_parsed: dict[int, dict[str, tuple[tuple[str, str], NodeFacts]]] = {}
#: Above this many rows to load as models, the sync reads them all (one query) instead of naming them in an IN list.
_LOAD_BY_ID = 1000
#: What ``blocked_reason`` says of a node kept off by its latest smoke test alone.
SMOKE_BLOCKED = "its latest smoke test failed"


def _parse(raw_nodes: list[dict], cluster_id: int) -> dict[str, NodeFacts]:
    parsed = _parsed.setdefault(cluster_id, {})
    facts_by_name = {}
    for raw in raw_nodes:
        meta = raw["metadata"]
        stamp = (meta.get("uid", ""), str(meta.get("resourceVersion", "")))
        hit = parsed.get(meta["name"])
        if not all(stamp):  # an object without uid or resourceVersion (a hand-made one) is parsed every time
            hit = (stamp, parse_node(raw))
        elif hit is None or hit[0] != stamp:
            hit = parsed[meta["name"]] = (stamp, parse_node(raw))
        facts_by_name[meta["name"]] = hit[1]
    for name in [name for name in parsed if name not in facts_by_name]:
        del parsed[name]
    return facts_by_name


def _quiet(row: tuple, facts: NodeFacts, usage: dict, external: dict, team, last_smoke, dra: list) -> bool:
    """Whether a node's row already says what this pass would write (``last_seen`` aside), told from a few columns:
    the row is of this resourceVersion of the Node object (every field but these is derived from it alone), and
    its usage, team and smoke-test layer are what they are now."""
    _, _, version, gone_at, in_use, external_now, team_id, blocked, findings = row
    if gone_at is not None or version != facts.resource_version or not facts.resource_version:
        return False
    if in_use != usage or external_now != external or team_id != (team.pk if team is not None else None):
        return False
    smoke = smoketest.finding(last_smoke)
    stored = [f for f in findings or [] if f.get("layer") == "smoke test"]
    if stored != ([smoke.as_dict()] if smoke is not None else []):
        return False
    if [f for f in findings or [] if f.get("layer") == "dra"] != [f.as_dict() for f in dra]:
        return False  # what the DRA driver publishes changes without the Node object changing
    if blocked and blocked != SMOKE_BLOCKED:
        return True  # kept off by the stack's own diagnosis, which the Node object alone decides
    return blocked == (SMOKE_BLOCKED if smoketest.ran_and_failed(last_smoke) else "")


def sync_inventory(backend: ClusterBackend, cluster: Cluster | None = None) -> SyncResult:
    """Read nodes and pods from ``backend`` (the cluster ``cluster``; None: the one configured in settings) and write
    its Node, GPU and MigPartition rows, and the fleet's ResourceClass rows (gpus.fleet keeps each cluster's share).

    A node whose row already says what this pass would write (``_quiet``) only has ``last_seen`` moved, in one
    UPDATE for all such nodes, and its GPU rows are left alone: with nothing changed, a pass builds no models."""
    with paused_gc():
        return _sync_inventory(backend, cluster or Cluster.objects.get(pk=settings_cluster_pk()))


def _sync_inventory(backend: ClusterBackend, cluster: Cluster) -> SyncResult:
    raw_nodes, _ = backend.list_nodes()
    pods = backend.list_pods(label_selector=None)
    now = timezone.now()
    result = SyncResult(nodes_seen=len(raw_nodes))

    facts_by_name = _parse(raw_nodes, cluster.pk)
    usage = usage_by_node(pods)
    external = external_requests_by_node(pods, MANAGED_BY_LABEL, MANAGED_BY_VALUE)
    team_label = settings.PORTAL_TEAM_NODE_LABEL
    portal_pods = {
        ((p.get("metadata") or {}).get("namespace", ""), (p.get("metadata") or {}).get("name", ""))
        for p in pods
        if ((p.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY_VALUE
    }
    inventories = _dra_inventories(backend, portal_pods)
    dra_pools = {
        name
        for name, mode in NodePool.objects.filter(cluster=cluster).values_list("name", "gpu_request")
        if mode != GpuRequestMode.DEVICE_PLUGIN
    }
    dra_found = {
        name: diagnosis.dra_findings(facts, inventories.get(name), facts.pool in dra_pools)
        for name, facts in facts_by_name.items()
    }

    with transaction.atomic():
        teams = {t.slug: t for t in Team.objects.all()}
        rows = {
            row[1]: row
            for row in Node.objects.filter(cluster=cluster).select_for_update().values_list(
                "id", "name", "resource_version", "gone_at", "gpu_in_use", "external_requests", "team_id",
                "blocked_reason", "diagnosis",
            )
        }  # fmt: skip
        smoke = smoketest.latest_by_node(row[0] for row in rows.values())
        quiet = {
            name
            for name, facts in facts_by_name.items()
            if name in rows
            and _quiet(
                rows[name],
                facts,
                usage.get(name, {}),
                external.get(name, {}),
                teams.get(facts.labels.get(team_label, "")),
                smoke.get(rows[name][0]),
                dra_found[name],
            )  # fmt: skip
        }
        load = [row[0] for name, row in rows.items() if name not in quiet]
        if len(load) > _LOAD_BY_ID:
            existing = {n.name: n for n in Node.objects.filter(cluster=cluster) if n.name not in quiet}
        else:
            existing = {n.name: n for n in Node.objects.filter(pk__in=load)} if load else {}
        to_create, to_update = [], []
        seen = [rows[name][0] for name in quiet]
        changed_fields: set[str] = {"last_seen"}
        for name, facts in facts_by_name.items():
            if name in quiet:
                continue
            published = name in inventories
            findings = diagnosis.diagnose(facts, published) + dra_found[name]
            # Any error of the stack's own diagnosis keeps new work off (issue 16, node trust).
            stack_blocked = diagnosis.blocking_reason(facts, findings, published)
            node = existing.get(name) or Node(name=name, cluster=cluster)
            # The latest smoke test is part of the diagnosis; a check that ran and failed keeps new work off.
            last_smoke = smoke.get(node.pk) if node.pk else None
            if (smoke_finding := smoketest.finding(last_smoke)) is not None:
                findings.append(smoke_finding)
            blocked = stack_blocked or (SMOKE_BLOCKED if smoketest.ran_and_failed(last_smoke) else "")
            was_gone = node.pk is not None and node.gone_at is not None
            values = {
                "uid": facts.uid,
                "resource_version": facts.resource_version,
                "labels": facts.labels,
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in facts.taints],
                "capacity": facts.capacity,
                "allocatable": facts.allocatable,
                "conditions": facts.conditions,
                "gpu_in_use": usage.get(name, {}),
                "external_requests": external.get(name, {}),
                "unschedulable": facts.unschedulable,
                "ready": facts.ready,
                "product": facts.product,
                "product_label": facts.product_label,
                "gpu_count": facts.gpu_count,
                "gpu_memory_mb": facts.gpu_memory_mb,
                "gpu_family": facts.gpu_family,
                "compute_capability": facts.compute_capability,
                "driver_version": facts.driver_version,
                "cuda_version": facts.cuda_version,
                "mig_capable": facts.mig_capable,
                "mig_strategy": facts.mig_strategy,
                "mig_config": facts.mig_config,
                "mig_config_state": facts.mig_config_state,
                "sharing_strategy": facts.sharing_strategy,
                "replicas": facts.replicas,
                "device_plugin_ok": facts.gpus_advertised,
                "health": _health(facts, findings, published),
                "diagnosis": [f.as_dict() for f in findings],
                "team": teams.get(facts.labels.get(team_label, "")),
                "last_seen": now,
                "gone_at": None,
                "provider": facts.provider,
                "instance_type": facts.instance_type,
                "product_source": facts.product_source,
                "architecture": facts.architecture,
                "clique": facts.clique,
                "unhealthy_gpus": facts.unhealthy_gpus,
                "driver_upgrade_state": facts.driver_upgrade_state,
                "blocked_reason": blocked,
                "pool": facts.pool,
            }
            if node.pk is not None and not was_gone:
                changed = _changed(node, values)
                if not changed:
                    # Only "last seen" moves: one UPDATE for all such nodes instead of a CASE per field per node.
                    seen.append(node.pk)
                    continue
                changed_fields.update(changed)
            else:
                changed_fields.update(NODE_FIELDS)
            for field, value in values.items():
                setattr(node, field, value)
            if node.pk is None:
                to_create.append(node)
            else:
                to_update.append(node)
                if was_gone:
                    result.nodes_back += 1
                    audit.record(
                        None, InventoryAuditAction.NODE_BACK, node, after={"uid": facts.uid}, cluster=cluster.name
                    )
        gone = [n for name, n in existing.items() if name not in facts_by_name and n.gone_at is None]
        for node in gone:
            node.gone_at = now
            node.health = NodeHealth.GONE
            node.gpu_in_use = {}
            node.external_requests = {}
            to_update.append(node)
            audit.record(None, InventoryAuditAction.NODE_GONE, node, before={"uid": node.uid}, cluster=cluster.name)
            changed_fields.update(NODE_FIELDS)
        Node.objects.bulk_create(to_create, batch_size=500)
        # Only the columns that changed on some node: bulk_update writes a CASE per column per row.
        Node.objects.bulk_update(to_update, [f for f in NODE_FIELDS if f in changed_fields], batch_size=500)
        for start in range(0, len(seen), 5000):
            Node.objects.filter(pk__in=seen[start : start + 5000]).update(last_seen=now)
        result.nodes_created, result.nodes_gone = len(to_create), len(gone)

        # GPU rows follow the Node object (and the MIG operation that set its layout): only the nodes whose row
        # changed, and those of an operation that is refreshing now, are looked at again.
        applied, refreshing = _applied_layouts(facts_by_name, cluster)
        # A DRA node's GPUs follow its ResourceSlices and the claims, which change without the Node object.
        moved = ({n.name for n in [*to_create, *to_update]} | refreshing | set(inventories)) & set(facts_by_name)
        node_ids = (
            dict(Node.objects.filter(cluster=cluster, name__in=list(moved)).values_list("name", "id")) if moved else {}
        )
        _sync_gpus({name: facts_by_name[name] for name in node_ids}, node_ids, result, applied, inventories)
        result.gpus = GPU.objects.filter(node__cluster=cluster, node__gone_at__isnull=True).count()
        result.mig_partitions = MigPartition.objects.filter(
            gpu__node__cluster=cluster, gpu__node__gone_at__isnull=True
        ).count()
        mine = derive_classes(facts_by_name.values(), usage)
        mine.update(_dra_classes(inventories, facts_by_name, cluster))
        cluster.class_totals = {key: class_share(stats) for key, stats in mine.items()}
        cluster.last_sync_at = now
        Cluster.objects.filter(pk=cluster.pk).update(class_totals=cluster.class_totals, last_sync_at=now)
        write_fleet_classes()
        result.resource_classes = len(mine)
    log.info("inventory reconciled: %s", result.as_dict())
    return result


def _dra_inventories(backend: ClusterBackend, portal_pods: set[tuple[str, str]]) -> dict[str, DraNode]:
    """Node name -> what NVIDIA's GPU DRA driver publishes there ({} where resource.k8s.io/v1 is not served)."""
    if RESOURCE_API_VERSION not in backend.resource_api_versions():
        return {}
    slices = backend.list_resource_slices(driver=GPU_DRIVER)
    claims = backend.list_resource_claims() if slices else []
    return node_inventories(slices, claims, managed=(MANAGED_BY_LABEL, MANAGED_BY_VALUE), portal_pods=portal_pods)


def _dra_classes(
    inventories: dict[str, DraNode], facts_by_name: dict[str, NodeFacts], cluster: Cluster
) -> dict[str, ClassStats]:
    """The DRA resource classes of the cluster (gpus.dra_inventory.derive_dra_classes) as ClassStats; devices count
    as allocatable on Ready, uncordoned nodes (whether portal work can use them yet is the rendering's business).
    This is where a node pool's MIG policy (NodePool.mig_profiles) takes effect: a dynamic-MIG profile the pool does
    not let teams claim is not counted from its nodes, so no class offers it there."""
    takes_work = {name: f.ready and not f.unschedulable for name, f in facts_by_name.items()}
    policies = {
        pool: frozenset(profiles)
        for pool, profiles in NodePool.objects.filter(cluster=cluster, mig_profiles__isnull=False).values_list(
            "name", "mig_profiles"
        )
    }
    claimable = {name: policies.get(f.pool) for name, f in facts_by_name.items() if name in inventories}
    out = {}
    for key, c in derive_dra_classes(
        {n: inv for n, inv in inventories.items() if n in facts_by_name}, takes_work, claimable
    ).items():
        out[key] = ClassStats(
            key=key, kind=c.kind, resource_name=c.resource_name, product=c.product_label,
            product_label=c.product_label, profile=c.profile, memory_mb=c.memory_mb, gpu_fraction=c.gpu_fraction,
            total=c.total, allocatable=c.allocatable, in_use=c.in_use, free=c.free, nodes=c.nodes,
            architectures=c.architectures,
        )  # fmt: skip
    return out


def _dra_gpu_rows(dra: DraNode) -> list[dict]:
    """A DRA node's GPU rows (index = the device's minor), with UUIDs and static MIG devices as partitions."""
    rows = []
    for gpu in dra.gpus:
        info = {"device": gpu.name, "architecture": gpu.architecture, "taints": gpu.taints}
        if gpu.partitionable:
            info.update(counters=gpu.counters, free_counters=gpu.free_counters, carvable=gpu.carvable)
        # What claims hold of it, where: others' (admission counts them taken) and, partitionable, the portal's.
        if gpu.foreign:
            info["foreign"] = [list(held) for held in gpu.foreign]
        if gpu.placed:
            info["placed"] = [list(held) for held in gpu.placed]
        rows.append(
            {
                "index": gpu.minor,
                "uuid": gpu.uuid,
                "product": product_label(gpu.product),
                "memory_mb": gpu.memory_mb,
                "mig_enabled": bool(gpu.mig) or gpu.partitionable,
                "sharing": SharingMode.MIG if gpu.mig else SharingMode.EXCLUSIVE,
                "replicas": 1,
                "dra": info,
                "partitions": [
                    {
                        "profile": m.profile,
                        "start": m.start,
                        "size": m.size,
                        "compute_slices": m.compute_slices,
                        "memory_mb": m.memory_mb,
                        "resource_name": MIG_DEVICE_CLASS,
                        "uuid": m.uuid,
                        "placement_inferred": False,
                    }
                    for m in gpu.mig
                ],
            }
        )
    return rows


def _changed(node: Node, values: dict) -> set[str]:
    """The fields of an existing node row that ``values`` changes, "last seen" aside."""
    changed = set()
    for field, value in values.items():
        if field == "last_seen":
            continue
        if field == "team":
            if node.team_id != (value.pk if value is not None else None):
                changed.add(field)
        elif getattr(node, field) != value:
            changed.add(field)
    return changed


def _applied_layouts(facts_by_name: dict[str, NodeFacts], cluster: Cluster) -> tuple[dict[str, list[list]], set[str]]:
    """Node name -> per-GPU placements of the finished MIG operation whose config the node is labelled with
    (one query for all nodes), and the nodes whose operation is refreshing now (their GPU rows are looked at
    again whether or not the Node object changed)."""
    out: dict[str, list[list]] = {}
    refreshing: set[str] = set()
    done = (
        # REFRESHING too: the operation's own refresh runs before it is marked done.
        NodeConfigOperation.objects.filter(
            node__cluster=cluster, state__in=[NodeConfigState.REFRESHING, NodeConfigState.DONE], kind=NodeConfigKind.MIG
        )
        .order_by("node_id", "-pk")  # newest first (finished_at is NULL while refreshing)
        .values_list("node__name", "requested", "state")
    )
    for name, requested, state in done:
        if state == NodeConfigState.REFRESHING:
            refreshing.add(name)
        facts = facts_by_name.get(name)
        if name in out or facts is None:
            continue
        if requested.get("config") == facts.mig_config and requested.get("placements"):
            out[name] = requested["placements"]
        else:
            out[name] = []  # a newer config than the portal's last one: infer
    return out, refreshing


def _sync_gpus(
    facts_by_name: dict[str, NodeFacts],
    node_ids: dict[str, int],
    result: SyncResult,
    applied: dict[str, list[list]] | None = None,
    inventories: dict[str, DraNode] | None = None,
) -> None:
    existing = {(g.node_id, g.index): g for g in GPU.objects.filter(node_id__in=node_ids.values())}
    wanted_rows = {}
    applied, inventories = applied or {}, inventories or {}
    for name, facts in facts_by_name.items():
        # A node NVIDIA's DRA driver publishes: its slices say which GPUs it has, with UUIDs; else its labels.
        dra = inventories.get(name)
        for row in _dra_gpu_rows(dra) if dra is not None else _gpu_rows(facts, applied.get(name)):
            wanted_rows[(node_ids[name], row["index"])] = row
    to_create, to_update = [], []
    for key, row in wanted_rows.items():
        gpu = existing.get(key) or GPU(node_id=key[0], index=key[1])
        # Device-plugin rows keep the UUID a node agent reported; DRA rows carry their own.
        fields = [*GPU_FIELDS, "dra", *(["uuid"] if "uuid" in row else [])]
        row.setdefault("dra", {})
        if gpu.pk and all(getattr(gpu, field) == row[field] for field in fields):
            continue  # unchanged: no write
        for field in fields:
            setattr(gpu, field, row[field])
        (to_update if gpu.pk else to_create).append(gpu)
    GPU.objects.bulk_create(to_create, batch_size=1000)
    GPU.objects.bulk_update(to_update, [*GPU_FIELDS, "dra", "uuid"], batch_size=1000)
    stale = [g.pk for key, g in existing.items() if key not in wanted_rows]
    if stale:
        GPU.objects.filter(pk__in=stale).delete()
    result.gpus = len(wanted_rows)

    gpu_ids = {
        (g[1], g[2]): g[0]
        for g in GPU.objects.filter(node_id__in=node_ids.values()).values_list("id", "node_id", "index")
    }
    current = {(p.gpu_id, p.start): p for p in MigPartition.objects.filter(gpu_id__in=gpu_ids.values())}
    wanted_parts = {}
    for key, row in wanted_rows.items():
        for part in row["partitions"]:
            wanted_parts[(gpu_ids[key], part["start"])] = part
    to_delete = [
        p.pk
        for k, p in current.items()
        if k not in wanted_parts or (p.profile, p.size) != (wanted_parts[k]["profile"], wanted_parts[k]["size"])
    ]
    if to_delete:
        MigPartition.objects.filter(pk__in=to_delete).delete()
    kept = {k for k, p in current.items() if p.pk not in to_delete}
    MigPartition.objects.bulk_create(
        [MigPartition(gpu_id=k[0], **part) for k, part in wanted_parts.items() if k not in kept], batch_size=1000
    )
    result.mig_partitions = len(wanted_parts)


def dra_shared_values(s, sharing: str, replicas: int) -> dict:
    """A DRA class an admin shares (gpus.class_admin) among ``replicas`` users per device: the slices know nothing of
    sharing (it is the claim's config), so the admin's mode and replicas stay, and the class counts units of
    1/replicas of a device, as a device plugin's time-sliced class does: kind shared or MPS (a MIG class keeps its
    kind and profile), the fraction of a GPU divided, every amount multiplied."""
    kind = s.kind if s.kind == ResourceKind.MIG else ResourceKind.MPS if sharing == SHARING_MPS else ResourceKind.SHARED
    return {
        "kind": kind, "sharing_strategy": sharing, "replicas": replicas, "gpu_fraction": s.gpu_fraction / replicas,
        "total": s.total * replicas, "allocatable": s.allocatable * replicas, "in_use": s.in_use * replicas,
        "free": s.free * replicas,
    }  # fmt: skip


def write_fleet_classes() -> None:
    """Write the fleet's ResourceClass rows: the sum over every cluster's last share of each class
    (Cluster.class_totals, kept by each cluster's sync), where an unreachable cluster still counts its devices but
    offers none of them (nothing can start there). A cluster's share of a class the admin scoped to it goes to that
    class; the fleet-wide class of the same resource and product counts the other clusters."""
    shares = {
        name: totals if health != ClusterHealth.UNREACHABLE else {key: withheld(share) for key, share in totals.items()}
        for name, totals, health in Cluster.objects.values_list("name", "class_totals", "health")
    }
    existing = {c.key: c for c in ResourceClass.objects.all()}
    # A class the admin scoped to one cluster (gpus.class_admin) counts that cluster's nodes only.
    stats = sum_class_shares(shares, (key for key, rc in existing.items() if rc.cluster_id is not None))
    now = timezone.now()
    to_create, to_update = [], []
    for key, s in stats.items():
        rc = existing.get(key)
        if rc is None:
            rc = ResourceClass(key=key)
        values = {
            "kind": s.kind, "resource_name": s.resource_name, "product": s.product, "product_label": s.product_label,
            "profile": s.profile, "replicas": s.replicas, "memory_mb": s.memory_mb, "gpu_fraction": s.gpu_fraction,
            "total": s.total, "allocatable": s.allocatable, "in_use": s.in_use, "free": s.free,
            "node_count": s.node_count, "present": True, "updated": now,
            "sharing_strategy": s.sharing_strategy, "architectures": ",".join(sorted(s.architectures)),
        }  # fmt: skip
        if key.startswith(DRA_CLASS_KEY_PREFIX) and rc.pk and rc.replicas > 1 and rc.sharing_strategy != SHARING_NONE:
            values |= dra_shared_values(s, rc.sharing_strategy, rc.replicas)
        for field, value in values.items():
            setattr(rc, field, value)
        (to_update if rc.pk else to_create).append(rc)
    for key, rc in existing.items():
        if key not in stats and rc.present:
            rc.present, rc.total, rc.allocatable, rc.in_use, rc.free, rc.node_count = False, 0, 0, 0, 0, 0
            rc.updated = now
            to_update.append(rc)
    ResourceClass.objects.bulk_create(to_create)
    ResourceClass.objects.bulk_update(to_update, CLASS_FIELDS + ["updated"])
