"""Node pools and the taints GPU work tolerates in each (issue 31, item 16).

A node's pool comes from its provider's pool label (Node.pool, vocab.taints.pool_of). A pool's GPU-keeping taints
are the taints of its present nodes that follow a GPU convention (vocab.taints.CONVENTIONS: the GPU Operator's
``nvidia.com/gpu``, GKE's ``nvidia.com/gpu=present``, AKS's ``sku=gpu``), plus the taints an admin declared for the
pool (NodePool.declared_taints). GPU workloads tolerate exactly those of the pools they may land on
(jobs.render.gpu_tolerations); any other NoSchedule/NoExecute taint keeps the portal's work off the node
(jobs.scheduling.node_trust.untolerated).

``PoolTaints.load`` reads it all in two queries, once per cycle or per rendering; ``declare_taints`` is the one
place a declaration changes, audited."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from django.core.exceptions import PermissionDenied
from django.db import transaction

from core import audit
from vocab.taints import Taint, gpu_keeping, repelling

from .choices import InventoryAuditAction
from .models import Node, NodePool


@dataclass(frozen=True)
class PoolTaints:
    """Which pool each present node is in, and each pool's GPU-keeping taints (observed by convention, declared)."""

    #: node name → pool ("" for nodes without a pool label)
    pool_of: dict[str, str]
    #: pool → the GPU-keeping taints observed on its nodes
    observed: dict[str, frozenset[Taint]]
    #: pool → the taints an admin declared for it
    declared: dict[str, frozenset[Taint]]
    #: GPU product label → the pools that have nodes of it
    pools_of_product: dict[str, frozenset[str]] = field(default_factory=dict)

    @classmethod
    def load(cls) -> PoolTaints:
        pool_of: dict[str, str] = {}
        observed: dict[str, set[Taint]] = defaultdict(set)
        products: dict[str, set[str]] = defaultdict(set)
        rows = Node.objects.present().values_list("name", "pool", "product_label", "taints")
        for name, pool, product_label, taints in rows:
            pool_of[name] = pool
            observed[pool].update(gpu_keeping(Taint.of(t) for t in taints or ()))
            if product_label:
                products[product_label].add(pool)
        declared = {
            name: frozenset(Taint.of(t) for t in taints or ())
            for name, taints in NodePool.objects.values_list("name", "declared_taints")
        }
        return cls(
            pool_of,
            {pool: frozenset(taints) for pool, taints in observed.items()},
            declared,
            {product: frozenset(pools) for product, pools in products.items()},
        )

    def of_pool(self, pool: str) -> frozenset[Taint]:
        """The GPU-keeping taints of one pool: observed by convention, and declared."""
        return self.observed.get(pool, frozenset()) | self.declared.get(pool, frozenset())

    def for_nodes(self, names: Iterable[str]) -> list[Taint]:
        """The GPU-keeping taints of the pools of these nodes (a node not in the inventory: its pool is unknown and
        it contributes nothing)."""
        out: set[Taint] = set()
        for name in names:
            if name in self.pool_of:
                out |= self.of_pool(self.pool_of[name])
        return sorted(out)

    def for_product(self, product_label: str) -> list[Taint]:
        """The GPU-keeping taints of every pool with nodes of a GPU product (work the scheduler places, a service)."""
        out: set[Taint] = set()
        for pool in self.pools_of_product.get(product_label, ()):
            out |= self.of_pool(pool)
        return sorted(out)


def declare_taints(user, pool: str, taints: list[Taint]) -> NodePool:
    """Set the taints GPU work tolerates in ``pool`` beside the conventions (admins); audited with before and after."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can declare the taints of a node pool.")
    with transaction.atomic():
        row, _ = NodePool.objects.select_for_update().get_or_create(name=pool)
        before = {"declared_taints": [str(Taint.of(t)) for t in row.declared_taints]}
        row.declared_taints = [t.as_dict() for t in sorted(set(taints))]
        row.updated_by = user
        row.save()
        after = {"declared_taints": [str(t) for t in sorted(set(taints))]}
        if before != after:
            audit.record(
                user, InventoryAuditAction.NODE_POOL_TAINTS, row, object_repr=str(row), before=before, after=after
            )
    return row


@dataclass
class PoolRow:
    """One pool on the admin page: its nodes, what the portal tolerates there and the taints that keep it off."""

    name: str
    nodes: list[str]
    tolerated_observed: list[Taint]
    declared: list[Taint]
    #: node name → the NoSchedule/NoExecute taints of the node the portal's pods do not tolerate
    kept_off: dict[str, list[Taint]]


def pool_rows() -> list[PoolRow]:
    """Every pool with present nodes or a declaration, by name, for the admin page."""
    table = PoolTaints.load()
    nodes: dict[str, list[tuple[str, list[Taint]]]] = defaultdict(list)
    for name, pool, taints in Node.objects.present().values_list("name", "pool", "taints"):
        nodes[pool].append((name, [Taint.of(t) for t in taints or ()]))
    rows = []
    for pool in sorted({*nodes, *table.declared}):
        tolerated = table.of_pool(pool)
        kept_off = {
            name: [t for t in repelling(taints) if t not in tolerated] for name, taints in sorted(nodes.get(pool, []))
        }
        rows.append(
            PoolRow(
                name=pool,
                nodes=sorted(name for name, _ in nodes.get(pool, [])),
                tolerated_observed=sorted(table.observed.get(pool, frozenset())),
                declared=sorted(table.declared.get(pool, frozenset())),
                kept_off={name: taints for name, taints in kept_off.items() if taints},
            )
        )
    return rows
