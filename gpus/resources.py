"""Resource classes derived from what nodes advertise, and GPU usage derived from bound pods.

Pure Python over ``NodeFacts`` and Pod dicts; no Django. The reconcile task stores the result.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vocab.gfd import NodeFacts, profile_compute_slices
from vocab.mig import product_geometry
from vocab.names import (
    CPU_RESOURCE,
    GPU_MEMORY_LABEL,
    GPU_RESOURCE,
    MEMORY_RESOURCE,
    MIG_STRATEGY_SINGLE,
    SHARED_GPU_RESOURCE,
    SHARING_MPS,
    SHARING_NONE,
    is_mig_resource,
    is_nvidia,
)
from vocab.quantity import mebibytes, millicores, parse_count

from .diagnosis import blocking_reason

TERMINAL_POD_PHASES = ("Succeeded", "Failed")


def pod_gpu_requests(pod: dict[str, Any]) -> dict[str, int]:
    """NVIDIA resources a pod holds: the sum over its containers, each container's limit (extended
    resources are requested through limits; requests default to them), or its request if only that is set.
    Init containers run one at a time before the others, so they count by their maximum, as kube-scheduler
    does."""
    spec = pod.get("spec") or {}

    def container_requests(container: dict[str, Any]) -> dict[str, int]:
        res = container.get("resources") or {}
        merged = {**(res.get("requests") or {}), **(res.get("limits") or {})}
        out = {}
        for name, qty in merged.items():
            if is_nvidia(name):
                try:
                    out[name] = parse_count(_or_zero(qty))
                except ValueError:
                    continue
        return out

    total: dict[str, int] = defaultdict(int)
    for container in spec.get("containers") or []:
        for name, n in container_requests(container).items():
            total[name] += n
    for container in spec.get("initContainers") or []:
        for name, n in container_requests(container).items():
            total[name] = max(total[name], n)
    return {k: v for k, v in total.items() if v}


def usage_by_node(pods: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{node name: {resource: amount}} over bound pods that have not finished."""
    usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in TERMINAL_POD_PHASES or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for name, n in pod_gpu_requests(pod).items():
            usage[node][name] += n
    return {node: dict(res) for node, res in usage.items()}


def pod_requests(pod: dict[str, Any]) -> dict[str, int]:
    """Everything a pod asks the scheduler for, as integers: NVIDIA resources, ``cpu_m`` (millicores) and
    ``memory_mb``. CPU and memory count the requests (defaulting to the limits), like kube-scheduler."""
    spec = pod.get("spec") or {}
    out: dict[str, int] = dict(pod_gpu_requests(pod))
    cpu = memory = 0
    for container in spec.get("containers") or []:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        try:
            cpu += millicores(_or_zero(merged.get(CPU_RESOURCE)))
            memory += mebibytes(_or_zero(merged.get(MEMORY_RESOURCE)))
        except ValueError:
            continue
    if cpu:
        out["cpu_m"] = cpu
    if memory:
        out["memory_mb"] = memory
    return out


def _or_zero(value: Any) -> Any:
    """An absent (or null) quantity counts as nothing."""
    return 0 if value is None else value


def external_requests_by_node(pods: Iterable[dict[str, Any]], managed_label: str, managed_value: str):
    """{node name: {resource: amount}} held by bound, unfinished pods the portal did not create (other
    workloads on the cluster); admission subtracts them from what a node can still take."""
    usage: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if (metadata.get("labels") or {}).get(managed_label) == managed_value:
            continue
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in TERMINAL_POD_PHASES or metadata.get("deletionTimestamp"):
            continue
        for name, n in pod_requests(pod).items():
            usage[node][name] += n
    return {node: dict(res) for node, res in usage.items()}


@dataclass
class ClassStats:
    key: str
    kind: str  # gpu | mig | shared | mps (gpus.choices.ResourceKind values)
    resource_name: str
    product: str
    product_label: str
    profile: str = ""
    replicas: int = 1
    memory_mb: int | None = None
    gpu_fraction: float = 1.0
    total: int = 0
    allocatable: int = 0
    in_use: int = 0
    free: int = 0
    nodes: set[str] = field(default_factory=set)
    sharing_strategy: str = SHARING_NONE
    architectures: set[str] = field(default_factory=set)


def class_key(resource_name: str, product_label: str) -> str:
    return f"{resource_name}@{product_label}"


def scoped_class_key(key: str, cluster: str) -> str:
    """The key of a class the admin scoped to one cluster: its fleet-wide key and the cluster's name
    ("nvidia.com/gpu@NVIDIA-H100-80GB-HBM3@onprem"). Cluster names are slugs, so they never hold an "@"."""
    return f"{key}@{cluster}"


def node_classes(facts: NodeFacts) -> list[ClassStats]:
    """The classes one node offers (without amounts): one per NVIDIA resource it advertises (> 0)."""
    out = []
    for resource, capacity in facts.gpu_capacity.items():
        if capacity <= 0:
            continue  # the kubelet keeps a resource the plugin stopped advertising at 0; nothing to offer
        if resource == GPU_RESOURCE:
            if facts.mig_strategy == MIG_STRATEGY_SINGLE and facts.single_mig_profile:
                geometry = product_geometry(facts.product)
                compute = geometry.compute_slices if geometry else 7
                profile = facts.single_mig_profile
                g = profile_compute_slices(profile)
                out.append(
                    ClassStats(
                        class_key(resource, facts.product_label), "mig", resource, facts.product,
                        facts.product_label, profile=profile, gpu_fraction=g / compute,
                        memory_mb=_int_label(facts.labels.get(GPU_MEMORY_LABEL)),
                    )
                )  # fmt: skip
            elif facts.sharing_strategy != SHARING_NONE and facts.replicas > 1:
                out.append(
                    ClassStats(
                        class_key(resource, facts.product_label), _shared_kind(facts), resource, facts.product,
                        facts.product_label, replicas=facts.replicas, gpu_fraction=1 / facts.replicas,
                        memory_mb=facts.gpu_memory_mb, sharing_strategy=facts.sharing_strategy,
                    )
                )  # fmt: skip
            else:
                out.append(
                    ClassStats(
                        class_key(resource, facts.product_label), "gpu", resource, facts.product,
                        facts.product_label, memory_mb=facts.gpu_memory_mb,
                    )
                )  # fmt: skip
        elif resource == SHARED_GPU_RESOURCE:
            replicas = max(1, facts.replicas)
            out.append(
                ClassStats(
                    class_key(resource, facts.product_label), _shared_kind(facts), resource, facts.product,
                    facts.product_label, replicas=replicas, gpu_fraction=1 / replicas, memory_mb=facts.gpu_memory_mb,
                    sharing_strategy=facts.sharing_strategy,
                )
            )  # fmt: skip
        elif is_mig_resource(resource):
            profile = next((p for p in facts.mig_profiles if p.resource == resource), None)
            if profile is None:
                continue
            geometry = product_geometry(facts.product)
            compute = geometry.compute_slices if geometry else 7
            out.append(
                ClassStats(
                    class_key(resource, facts.product_label), "mig", resource, facts.product, facts.product_label,
                    profile=profile.profile, gpu_fraction=profile.compute_slices / compute,
                    memory_mb=profile.memory_mb,
                )
            )  # fmt: skip
    return out


def _shared_kind(facts: NodeFacts) -> str:
    """ "mps" for a share of the device plugin's MPS sharing, else "shared" (time-slicing)."""
    return "mps" if facts.sharing_strategy == SHARING_MPS else "shared"


def _int_label(value: str | None) -> int | None:
    return int(value) if value and value.isdigit() else None


def derive_classes(facts: Iterable[NodeFacts], usage: dict[str, dict[str, int]]) -> dict[str, ClassStats]:
    """Totals per class over all nodes: total = capacity; allocatable and free only count healthy devices
    (allocatable: the device plugin withdraws unhealthy ones) on nodes that take new work (Ready, not cordoned,
    a GPU stack that can run it: gpus.diagnosis.blocking_reason); in_use counts every node."""
    classes: dict[str, ClassStats] = {}
    for node in facts:
        schedulable = node.ready and not node.unschedulable and not blocking_reason(node)
        used = usage.get(node.name, {})
        for cls in node_classes(node):
            stats = classes.setdefault(cls.key, cls)
            cap = node.gpu_capacity.get(cls.resource_name, 0)
            alloc = node.gpu_allocatable.get(cls.resource_name, 0)
            in_use = used.get(cls.resource_name, 0)
            stats.total += cap
            stats.in_use += in_use
            if schedulable:
                stats.allocatable += alloc
                stats.free += max(0, alloc - in_use)
            if cap:
                stats.nodes.add(node.name)
                if node.architecture:
                    stats.architectures.add(node.architecture)
    return classes


#: The identity fields of a class (what it is, the same in every cluster that offers it).
_CLASS_IDENTITY = (
    "kind", "resource_name", "product", "product_label", "profile", "replicas", "memory_mb", "gpu_fraction",
    "sharing_strategy",
)  # fmt: skip
_CLASS_AMOUNTS = ("total", "allocatable", "in_use", "free")


def class_share(stats: ClassStats) -> dict:
    """One cluster's share of a class, as JSON (kept on gpus.Cluster.class_totals)."""
    share = {field: getattr(stats, field) for field in (*_CLASS_IDENTITY, *_CLASS_AMOUNTS)}
    share["node_count"] = len(stats.nodes)
    share["architectures"] = sorted(stats.architectures)
    return share


def withheld(share: dict) -> dict:
    """The share of a cluster that cannot be reached: its devices still count in total and in use, but nothing
    can start there, so none is allocatable or free."""
    return {**share, "allocatable": 0, "free": 0}


def class_by_cluster(rc, shares: tuple[dict[str, dict], set[str]]) -> list[dict]:
    """A class's units per cluster as ``sum_class_shares`` counts them: a class scoped to one cluster has that
    cluster's share; a fleet-wide class every other cluster's share of its key not scoped there."""
    by_cluster, scoped = shares
    out = []
    for cluster, by_key in by_cluster.items():
        for fleet_key, share in by_key.items():
            key = scoped_class_key(fleet_key, cluster)
            if (key if key in scoped else fleet_key) == rc.key:
                total, free = int(share.get("total") or 0), int(share.get("free") or 0)
                out.append({"cluster": cluster, "total": total, "free": free})
    return out


@dataclass
class FleetClass:
    """A class summed over the clusters of the fleet."""

    key: str
    kind: str
    resource_name: str
    product: str
    product_label: str
    profile: str = ""
    replicas: int = 1
    memory_mb: int | None = None
    gpu_fraction: float = 1.0
    sharing_strategy: str = SHARING_NONE
    total: int = 0
    allocatable: int = 0
    in_use: int = 0
    free: int = 0
    node_count: int = 0
    architectures: set[str] = field(default_factory=set)


def sum_class_shares(shares: dict[str, dict[str, dict]], scoped: Iterable[str] = ()) -> dict[str, FleetClass]:
    """Class key → the class summed over every cluster's share (``shares``: cluster name → its ``class_share`` by
    class key). ``scoped``: the keys of classes scoped to one cluster (``scoped_class_key``): a cluster's share of
    such a class counts there, and not in the fleet-wide class of the same resource and product."""
    scoped = set(scoped)
    out: dict[str, FleetClass] = {}
    for cluster, by_key in shares.items():
        for fleet_key, share in by_key.items():
            key = scoped_class_key(fleet_key, cluster)
            key = key if key in scoped else fleet_key
            total = out.get(key)
            if total is None:
                total = out[key] = FleetClass(key=key, **{f: share[f] for f in _CLASS_IDENTITY})
            for amount in _CLASS_AMOUNTS:
                setattr(total, amount, getattr(total, amount) + int(share.get(amount) or 0))
            total.node_count += int(share.get("node_count") or 0)
            total.architectures.update(share.get("architectures") or ())
    return out
