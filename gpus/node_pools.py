"""Node pools and the taints GPU work tolerates in each (issue 31, item 16).

A node's pool comes from its provider's pool label (Node.pool, vocab.taints.pool_of). A pool's GPU-keeping taints
are the taints of its present nodes that follow a GPU convention (vocab.taints.CONVENTIONS: the GPU Operator's
``nvidia.com/gpu``, GKE's ``nvidia.com/gpu=present``, AKS's ``sku=gpu``), plus the taints an admin declared for the
pool (NodePool.declared_taints). GPU workloads tolerate exactly those of the pools they may land on
(jobs.render.gpu_tolerations); any other NoSchedule/NoExecute taint keeps the portal's work off the node
(jobs.scheduling.node_trust.untolerated).

Pools belong to a cluster (NodePool.cluster): node and pool names are unique within a cluster only, so every lookup
names the cluster. ``PoolTaints.load`` reads it all in three queries, once per cycle or per rendering;
``declare_taints`` is the one place a declaration changes, audited.

Per pool the admin also chooses how its GPUs are requested (NodePool.gpu_request, issue 33): the device plugin (the
default), Dynamic Resource Allocation, or nvidia.com/gpu mapped onto DRA; ``choose_gpu_request`` is the one place
that changes, offered only where the cluster's last check found resource.k8s.io/v1 (Cluster.capabilities), audited.
With dynamic MIG the DRA driver carves a GPU when a claim is allocated, not the portal; what the admin decides there is
which MIG profiles teams may claim from the pool (NodePool.mig_profiles, every one its GPUs support by default):
``choose_mig_profiles`` is the one place that changes, validated against the profiles of the pool's GPUs, audited."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from cluster.base import parse_server_version
from core import audit
from vocab.dra import GPU_DEVICE_CLASS
from vocab.mig import product_geometry
from vocab.taints import Taint, gpu_keeping, repelling

from .choices import ClusterConnection, GpuRequestMode, InventoryAuditAction
from .models import GPU, Cluster, Node, NodePool

#: A pool of the fleet: (cluster id, pool name). Pool names are unique within a cluster only.
PoolKey = tuple[int, str]


@dataclass(frozen=True)
class PoolTaints:
    """Which pool each present node is in, and each pool's GPU-keeping taints (observed by convention, declared), by
    cluster: node and pool names are unique within a cluster only."""

    #: (cluster id, node name) → pool ("" for nodes without a pool label)
    pool_of: dict[tuple[int, str], str]
    #: (cluster id, pool) → the GPU-keeping taints observed on its nodes
    observed: dict[PoolKey, frozenset[Taint]]
    #: (cluster id, pool) → the taints an admin declared for it
    declared: dict[PoolKey, frozenset[Taint]]
    #: GPU product label → the pools that have nodes of it
    pools_of_product: dict[str, frozenset[PoolKey]] = field(default_factory=dict)
    #: the cluster of work that names none (the one configured in settings)
    home: int | None = None
    #: (cluster id, pool) → how workloads request its GPUs (NodePool.gpu_request), for pools that chose one
    gpu_requests: dict[PoolKey, str] = field(default_factory=dict)

    @classmethod
    def load(cls) -> PoolTaints:
        pool_of: dict[tuple[int, str], str] = {}
        observed: dict[PoolKey, set[Taint]] = defaultdict(set)
        products: dict[str, set[PoolKey]] = defaultdict(set)
        rows = Node.objects.present().values_list("cluster_id", "name", "pool", "product_label", "taints")
        for cluster_id, name, pool, product_label, taints in rows:
            pool_of[cluster_id, name] = pool
            observed[cluster_id, pool].update(gpu_keeping(Taint.of(t) for t in taints or ()))
            if product_label:
                products[product_label].add((cluster_id, pool))
        declared, gpu_requests = {}, {}
        for cluster_id, name, taints, mode in NodePool.objects.values_list(
            "cluster_id", "name", "declared_taints", "gpu_request"
        ):
            declared[cluster_id, name] = frozenset(Taint.of(t) for t in taints or ())
            gpu_requests[cluster_id, name] = mode
        return cls(
            pool_of,
            {key: frozenset(taints) for key, taints in observed.items()},
            declared,
            {product: frozenset(pools) for product, pools in products.items()},
            Cluster.objects.filter(connection=ClusterConnection.SETTINGS).values_list("pk", flat=True).first(),
            gpu_requests,
        )

    def of_pool(self, cluster_id: int | None, pool: str) -> frozenset[Taint]:
        """The GPU-keeping taints of one pool of a cluster (None: the one configured in settings): observed by
        convention, and declared."""
        key = (self.home if cluster_id is None else cluster_id, pool)
        return self.observed.get(key, frozenset()) | self.declared.get(key, frozenset())

    def for_nodes(self, cluster_id: int | None, names: Iterable[str]) -> list[Taint]:
        """The GPU-keeping taints of the pools of these nodes of one cluster (a node not in the inventory: its pool is
        unknown and it contributes nothing)."""
        cluster_id = self.home if cluster_id is None else cluster_id
        out: set[Taint] = set()
        for name in names:
            if (cluster_id, name) in self.pool_of:
                out |= self.of_pool(cluster_id, self.pool_of[cluster_id, name])
        return sorted(out)

    def for_product(self, product_label: str, cluster_id: int | None = None) -> list[Taint]:
        """The GPU-keeping taints of every pool with nodes of a GPU product (work the scheduler places, a service),
        in one cluster or, without one, anywhere in the fleet."""
        out: set[Taint] = set()
        for pool_cluster, pool in self.pools_of_product.get(product_label, ()):
            if cluster_id is None or pool_cluster == cluster_id:
                out |= self.of_pool(pool_cluster, pool)
        return sorted(out)

    def maps_extended_resource(
        self, cluster_id: int | None, names: Iterable[str] = (), product_label: str = ""
    ) -> bool:
        """Whether every pool the work may land on (the pools of these nodes, or with ``product_label`` every pool
        with nodes of that product) maps ``nvidia.com/gpu`` onto DRA (GpuRequestMode.DRA_EXTENDED); False when
        there is no such pool."""
        cluster_id = self.home if cluster_id is None else cluster_id
        if product_label:
            pools = {key for key in self.pools_of_product.get(product_label, ()) if key[0] == cluster_id}
        else:
            pools = {
                (cluster_id, self.pool_of[cluster_id, name]) for name in names if (cluster_id, name) in self.pool_of
            }
        return bool(pools) and all(self.gpu_requests.get(key) == GpuRequestMode.DRA_EXTENDED for key in pools)


def declare_taints(user, cluster: Cluster, pool: str, taints: list[Taint]) -> NodePool:
    """Set the taints GPU work tolerates in ``pool`` of ``cluster`` beside the conventions (admins); audited with
    before and after."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can declare the taints of a node pool.")
    with transaction.atomic():
        row, _ = NodePool.objects.select_for_update().get_or_create(cluster=cluster, name=pool)
        before = {"declared_taints": [str(Taint.of(t)) for t in row.declared_taints]}
        row.declared_taints = [t.as_dict() for t in sorted(set(taints))]
        row.updated_by = user
        row.save()
        after = {"declared_taints": [str(t) for t in sorted(set(taints))]}
        if before != after:
            audit.record(
                user, InventoryAuditAction.NODE_POOL_TAINTS, row, before=before, after=after, cluster=cluster.name
            )
    return row


#: The first Kubernetes release with extended-resource mapping onto DRA on by default (DRAExtendedResource, beta).
EXTENDED_RESOURCE_MAPPING_SINCE = (1, 36)


def serves_dra(cluster: Cluster) -> bool:
    """Whether the cluster's last check found resource.k8s.io/v1, the only DRA version the portal uses."""
    return bool((cluster.capabilities or {}).get("dra_v1"))


def gpu_request_problems(cluster: Cluster, mode: str) -> list[str]:
    """Every reason ``mode`` cannot be how ``cluster``'s pools request GPUs ([] when it can)."""
    if mode not in GpuRequestMode.values:
        return [f"Choose how GPUs are requested: one of {', '.join(GpuRequestMode.values)} (not {mode!r})."]
    if mode == GpuRequestMode.DEVICE_PLUGIN:
        return []
    caps, problems = cluster.capabilities or {}, []
    if not serves_dra(cluster):
        versions = ", ".join(caps.get("dra_versions") or []) or "no version"
        problems.append(
            f"Cluster {cluster.name} does not serve resource.k8s.io/v1 (its last check found {versions}; v1 is "
            "stable from Kubernetes 1.34): its pools can use only the device plugin. Check the cluster again once "
            "it is upgraded."
        )
    elif GPU_DEVICE_CLASS not in (caps.get("dra_device_classes") or []):
        problems.append(
            f"Cluster {cluster.name} has no DeviceClass {GPU_DEVICE_CLASS}: NVIDIA's DRA driver is not installed "
            "there. Install it (the GPU Operator's DRA stack or its Helm chart), then check the cluster again."
        )
    if mode == GpuRequestMode.DRA_EXTENDED:
        version = parse_server_version(caps.get("server_version") or cluster.server_version)
        if version < EXTENDED_RESOURCE_MAPPING_SINCE:
            since = ".".join(map(str, EXTENDED_RESOURCE_MAPPING_SINCE))
            problems.append(
                f"Extended-resource mapping onto DRA needs Kubernetes {since} "
                f"or later (the DRAExtendedResource feature, beta there); {cluster.name} runs "
                f"{caps.get('server_version') or cluster.server_version or 'an unknown version'}. Choose DRA instead."
            )
    return problems


def choose_gpu_request(user, cluster: Cluster, pool: str, mode: str) -> NodePool:
    """Set how workloads request the GPUs of ``pool`` of ``cluster`` (admins); refused with every problem at once
    (ValidationError), audited with before and after."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can choose how a node pool's GPUs are requested.")
    problems = gpu_request_problems(cluster, mode)
    if problems:
        raise ValidationError(problems)
    return _set_pool(user, cluster, pool, "gpu_request", mode, InventoryAuditAction.NODE_POOL_GPU_REQUEST)


def _set_pool(user, cluster: Cluster, pool: str, field: str, value, action: str) -> NodePool:
    """Set one field of a pool's declaration (made on first use), audited with before and after when it changes."""
    with transaction.atomic():
        row, _ = NodePool.objects.select_for_update().get_or_create(cluster=cluster, name=pool)
        before = getattr(row, field)
        if before != value:
            setattr(row, field, value)
            row.updated_by = user
            row.save()
            audit.record(user, action, row, before={field: before}, after={field: value}, cluster=cluster.name)
    return row


def _mig_profiles_of(products: Iterable[str]) -> dict[str, list[str]]:
    out = {}
    for product in sorted(set(products)):
        geometry = product_geometry(product)
        if geometry is not None:
            out[product] = [p.name for p in geometry.profiles]
    return out


def pool_mig_profiles(cluster: Cluster, pool: str) -> dict[str, list[str]]:
    """Product label -> the MIG profiles of each MIG-capable GPU product in ``pool`` of ``cluster`` (present nodes)."""
    return _mig_profiles_of(
        GPU.objects.filter(node__cluster=cluster, node__pool=pool, node__gone_at__isnull=True)
        .values_list("product", flat=True)
        .distinct()
    )


def mig_profiles_problems(cluster: Cluster, pool: str, profiles) -> list[str]:
    """Every reason ``profiles`` (a list of MIG profile names; None: all) cannot be the MIG policy of ``pool``."""
    if profiles is None:
        return []
    if not isinstance(profiles, list | tuple) or not all(isinstance(p, str) for p in profiles):
        return ['Give the MIG profiles teams may claim as a list of profile names, e.g. ["1g.5gb", "3g.20gb"].']
    supported = pool_mig_profiles(cluster, pool)
    where = f"node pool {pool or '(nodes without a pool label)'} of {cluster.name}"
    problems = []
    if not serves_dra(cluster):
        problems.append(
            f"Cluster {cluster.name} does not serve resource.k8s.io/v1, so no DRA driver carves MIG devices there: "
            "carve its nodes' GPUs on each node's Carve page instead (or check the cluster again once it serves DRA)."
        )
    if not supported:
        problems.append(
            f"No GPU in {where} can be partitioned with MIG, so there are no MIG profiles to allow or refuse."
        )
        return problems
    known = {name for names in supported.values() for name in names}
    unknown = [p for p in profiles if p not in known]
    if unknown:
        listed = "; ".join(f"{product}: {', '.join(names)}" for product, names in supported.items())
        problems.append(
            f"{', '.join(unknown)} {'is not a MIG profile' if len(unknown) == 1 else 'are not MIG profiles'} of the "
            f"GPUs in {where}. Choose among {listed}."
        )
    if len(set(profiles)) != len(profiles):
        problems.append("Name each MIG profile once.")
    return problems


def choose_mig_profiles(user, cluster: Cluster, pool: str, profiles: list[str] | None) -> NodePool:
    """Set which MIG profiles teams may claim from the dynamic-MIG GPUs of ``pool`` of ``cluster`` (admins; None:
    every profile the GPUs support). Refused with every problem at once (ValidationError), nothing stored; audited
    with before and after. The inventory's next sync offers the classes accordingly (gpus.reconcile)."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can choose which MIG profiles teams may claim in a node pool.")
    problems = mig_profiles_problems(cluster, pool, profiles)
    if problems:
        raise ValidationError(problems)
    wanted = None if profiles is None else sorted(set(profiles))
    return _set_pool(user, cluster, pool, "mig_profiles", wanted, InventoryAuditAction.NODE_POOL_MIG_PROFILES)


@dataclass
class PoolRow:
    """One pool on the admin page: its cluster, its nodes, what the portal tolerates there and the taints that keep it
    off."""

    cluster: Cluster
    name: str
    nodes: list[str]
    tolerated_observed: list[Taint]
    declared: list[Taint]
    #: node name → the NoSchedule/NoExecute taints of the node the portal's pods do not tolerate
    kept_off: dict[str, list[Taint]]
    #: How workloads request the pool's GPUs (GpuRequestMode), and whether its cluster offers DRA at all.
    gpu_request: str = GpuRequestMode.DEVICE_PLUGIN
    dra_offered: bool = False
    #: The MIG profiles teams may claim from the pool's dynamic-MIG GPUs (None: all its GPUs support), and the
    #: profiles of each MIG-capable GPU product in the pool.
    mig_profiles: list[str] | None = None
    mig_supported: dict[str, list[str]] = field(default_factory=dict)


def pool_rows() -> list[PoolRow]:
    """Every pool with present nodes or a declaration, by cluster and name, for the admin page."""
    table = PoolTaints.load()
    clusters = Cluster.objects.in_bulk()
    nodes: dict[PoolKey, list[tuple[str, list[Taint]]]] = defaultdict(list)
    for cluster_id, name, pool, taints in Node.objects.present().values_list("cluster_id", "name", "pool", "taints"):
        nodes[cluster_id, pool].append((name, [Taint.of(t) for t in taints or ()]))
    modes, policies = {}, {}
    for c, name, mode, profiles in NodePool.objects.values_list("cluster_id", "name", "gpu_request", "mig_profiles"):
        modes[c, name], policies[c, name] = mode, profiles
    products: dict[PoolKey, set[str]] = defaultdict(set)
    present_gpus = GPU.objects.filter(node__gone_at__isnull=True)
    for cluster_id, pool, product in present_gpus.values_list("node__cluster_id", "node__pool", "product").distinct():
        products[cluster_id, pool].add(product)
    rows = []
    for key in sorted({*nodes, *table.declared}, key=lambda key: (clusters[key[0]].name, key[1])):
        tolerated = table.of_pool(*key)
        kept_off = {
            name: [t for t in repelling(taints) if t not in tolerated] for name, taints in sorted(nodes.get(key, []))
        }
        rows.append(
            PoolRow(
                cluster=clusters[key[0]],
                name=key[1],
                nodes=sorted(name for name, _ in nodes.get(key, [])),
                tolerated_observed=sorted(table.observed.get(key, frozenset())),
                declared=sorted(table.declared.get(key, frozenset())),
                kept_off={name: taints for name, taints in kept_off.items() if taints},
                gpu_request=modes.get(key, GpuRequestMode.DEVICE_PLUGIN),
                dra_offered=serves_dra(clusters[key[0]]),
                mig_profiles=policies.get(key),
                mig_supported=_mig_profiles_of(products.get(key, ())),
            )
        )
    return rows
