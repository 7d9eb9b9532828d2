"""The GPUs a node offers through Dynamic Resource Allocation, read from its ResourceSlices (issue 33, item 2).

NVIDIA's DRA driver publishes, per node, a pool of devices of driver ``gpu.nvidia.com`` (vocab.dra): whole GPUs
(``type`` gpu, with ``uuid``, ``productName``, ``architecture`` and capacity ``memory``), static MIG devices (``type``
mig, ``profile``, ``parentUUID``, their own ``uuid``; no counters) and, with dynamic MIG, every placement a GPU could
hold, each consuming counters of its GPU's counter set (``gpu-<minor>-counter-set``). ``node_inventories`` turns the
slices, and the claims that hold devices, into one ``DraNode`` per node:

* GPUs with their UUID (so telemetry's join of DCGM samples by UUID finds them, as for device-plugin GPUs);
* static MIG devices as partitions of their parent GPU (start slot from the device name, size from vocab.mig);
* for partitionable GPUs, the counters still free (the set's counters less what allocated devices consume) and, per
  MIG profile, how many more instances could be carved from them now: a counter computation, not a count of
  existing devices;
* device taints.

The resource class key scheme (``class_key``): ``dra:<device class>@<product label>`` for whole GPUs and
``dra:<device class>/<profile>@<product label>`` for MIG devices, the product label being GFD's spelling of the
``productName`` attribute (spaces as hyphens), so a DRA class never shares a key with a device-plugin class
(``<resource>@<product label>``) and an admin's scoping to a cluster still appends ``@<cluster>``.

Pure Python: no Django, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from vocab.dra import (
    ARCHITECTURE_ATTRIBUTE,
    DEVICE_TYPE_GPU,
    DEVICE_TYPE_MIG,
    GPU_DEVICE_CLASS,
    GPU_DRIVER,
    MEMORY_CAPACITY,
    MIG_DEVICE_CLASS,
    PARENT_UUID_ATTRIBUTE,
    PRODUCT_NAME_ATTRIBUTE,
    PROFILE_ATTRIBUTE,
    TYPE_ATTRIBUTE,
    UUID_ATTRIBUTE,
)
from vocab.mig import product_geometry
from vocab.quantity import InvalidQuantity, parse_quantity

#: The prefix of every DRA resource class key.
CLASS_KEY_PREFIX = "dra:"
_MINOR = re.compile(r"^gpu-(\d+)(?:-|$)")
_START = re.compile(r"-(\d+)$")


def class_key(device_class: str, product_label: str, profile: str = "") -> str:
    """``dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3``; ``dra:mig.nvidia.com/1g.5gb@NVIDIA-A100-SXM4-40GB``."""
    return f"{CLASS_KEY_PREFIX}{device_class}{'/' + profile if profile else ''}@{product_label}"


def product_label(product_name: str) -> str:
    """GFD's spelling of a product name (nvidia.com/gpu.product): spaces as hyphens."""
    return product_name.strip().replace(" ", "-")


@dataclass
class DraMig:
    """A MIG device: static (announced as it exists) or, with dynamic MIG, a placement that could be carved."""

    name: str
    parent_uuid: str
    uuid: str
    profile: str
    start: int
    size: int
    compute_slices: int
    memory_mb: int | None
    taints: list[dict] = field(default_factory=list)
    allocated: bool = False


@dataclass
class DraGpu:
    name: str
    minor: int
    uuid: str
    product: str
    memory_mb: int | None
    architecture: str
    taints: list[dict] = field(default_factory=list)
    allocated: bool = False
    #: Partitionable (dynamic MIG): the counter set's counters, and what is free of them now.
    counters: dict[str, int] = field(default_factory=dict)
    free_counters: dict[str, int] = field(default_factory=dict)
    #: Dynamic MIG: profile -> how many more instances could be carved from the free counters now.
    carvable: dict[str, int] = field(default_factory=dict)
    #: Dynamic MIG: profile -> instances carved now (allocated placements).
    carved: dict[str, int] = field(default_factory=dict)
    #: Dynamic MIG: profile -> the memory (MiB) one instance of it has.
    profile_memory_mb: dict[str, int | None] = field(default_factory=dict)
    #: Static MIG devices carved from this GPU.
    mig: list[DraMig] = field(default_factory=list)
    #: What allocated claims that are not the portal's hold of it: (profile, start) per device, profile "" for the
    #: GPU itself (admission counts them as taken, as it counts other pods' requests on a device-plugin node).
    foreign: list[tuple[str, int]] = field(default_factory=list)
    #: Partitionable: what the portal's allocated claims hold of it, where (admission pins these; jobs.scheduling.dra).
    placed: list[tuple[str, int]] = field(default_factory=list)
    #: False for a GPU known only as the parent of its static MIG devices (the driver does not publish a GPU in
    #: MIG mode as a whole device); its memory is then unknown.
    published: bool = True

    @property
    def partitionable(self) -> bool:
        return bool(self.counters)

    @property
    def whole_free(self) -> bool:
        """Whether the whole GPU can be claimed now: not allocated, and (partitionable) nothing carved from it."""
        if self.allocated or any(m.allocated for m in self.mig):
            return False
        return not self.partitionable or self.free_counters == self.counters


@dataclass
class DraNode:
    name: str
    pool: str
    gpus: list[DraGpu] = field(default_factory=list)
    #: Slices the pool says it has but that were not all read (``resourceSliceCount`` not reached).
    incomplete: bool = False

    @property
    def tainted(self) -> list[tuple[str, dict]]:
        """(device name, taint) for every tainted device of the node."""
        out = [(g.name, t) for g in self.gpus for t in g.taints]
        out += [(m.name, t) for g in self.gpus for m in g.mig for t in m.taints]
        return out


def _attr(device: dict, name: str) -> Any:
    value = (device.get("attributes") or {}).get(name) or {}
    for kind in ("string", "version", "int", "bool"):
        if kind in value:
            return value[kind]
    return None


def _amount(value: Any) -> int | None:
    try:
        return int(parse_quantity((value or {}).get("value")))
    except (InvalidQuantity, TypeError):
        return None


def _mib(value: Any) -> int | None:
    amount = _amount(value)
    return amount // (1024 * 1024) if amount is not None else None


def _consumes(device: dict) -> dict[str, dict[str, int]]:
    """counter set -> counter -> amount the device consumes."""
    out: dict[str, dict[str, int]] = {}
    for entry in device.get("consumesCounters") or []:
        counters = out.setdefault(entry.get("counterSet", ""), {})
        for name, value in (entry.get("counters") or {}).items():
            counters[name] = _amount(value) or 0
    return out


def allocated_devices(claims: Iterable[dict], driver: str = GPU_DRIVER) -> set[tuple[str, str]]:
    """(pool, device) of every device of ``driver`` an allocated claim holds."""
    held = set()
    for claim in claims:
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        for result in results:
            if result.get("driver") == driver:
                held.add((result.get("pool", ""), result.get("device", "")))
    return held


def _mig(device: dict, product: str, allocated: bool) -> DraMig:
    profile = str(_attr(device, PROFILE_ATTRIBUTE) or "")
    geometry = product_geometry(product_label(product))
    known = geometry.profile(profile) if geometry else None
    start = _START.search(device["name"])
    compute = known.compute if known else int(re.match(r"(\d+)", profile).group(1)) if profile[:1].isdigit() else 1
    return DraMig(
        name=device["name"],
        parent_uuid=str(_attr(device, PARENT_UUID_ATTRIBUTE) or ""),
        uuid=str(_attr(device, UUID_ATTRIBUTE) or ""),
        profile=profile,
        start=int(start.group(1)) if start else 0,
        size=known.size if known else compute,
        compute_slices=compute,
        memory_mb=_mib((device.get("capacity") or {}).get(MEMORY_CAPACITY)),
        taints=[dict(t) for t in device.get("taints") or []],
        allocated=allocated,
    )


def _fits(need: dict[str, int], free: dict[str, int]) -> bool:
    return all(free.get(name, 0) >= amount for name, amount in need.items())


def _portal_s(claim: dict, managed: tuple[str, str] | None, pods: Collection[tuple[str, str]]) -> bool:
    """Whether ``claim`` is the portal's: it carries the portal's label (``managed``: the label and its value), or a
    pod of the portal's (``pods``: namespace, name) owns it (as kube-scheduler's claim for a pod whose
    ``nvidia.com/gpu`` a DeviceClass maps onto DRA)."""
    metadata = claim.get("metadata") or {}
    if managed is not None and (metadata.get("labels") or {}).get(managed[0]) == managed[1]:
        return True
    namespace = metadata.get("namespace", "")
    owners = metadata.get("ownerReferences") or ()
    return any(o.get("kind") == "Pod" and (namespace, o.get("name", "")) in pods for o in owners)


def node_inventories(
    slices: Iterable[dict],
    claims: Iterable[dict] = (),
    managed: tuple[str, str] | None = None,
    portal_pods: Collection[tuple[str, str]] = (),
) -> dict[str, DraNode]:
    """Node name -> what NVIDIA's GPU driver publishes there (only nodes with a slice of it). ``managed``: the label
    and value the portal's claims carry, ``portal_pods``: (namespace, name) of the portal's pods; any other claim is
    not the portal's (with neither, no claim is), and what it holds is recorded apart (``DraGpu.foreign``)."""
    claims = list(claims)
    held = allocated_devices(claims)
    pods = set(portal_pods)
    foreign = allocated_devices(c for c in claims if not _portal_s(c, managed, pods))
    by_node: dict[str, list[dict]] = {}
    for s in slices:
        spec = s.get("spec") or {}
        if spec.get("driver") == GPU_DRIVER and spec.get("nodeName"):
            by_node.setdefault(spec["nodeName"], []).append(spec)
    return {name: _node(name, specs, held, foreign) for name, specs in sorted(by_node.items())}


def _node(name: str, specs: list[dict], held: set[tuple[str, str]], foreign: set[tuple[str, str]]) -> DraNode:
    # Only the newest generation of the pool counts (a driver replaces a pool by publishing a new generation).
    generation = max(int((s.get("pool") or {}).get("generation") or 0) for s in specs)
    current = [s for s in specs if int((s.get("pool") or {}).get("generation") or 0) == generation]
    pool = str((current[0].get("pool") or {}).get("name") or name)
    expected = int((current[0].get("pool") or {}).get("resourceSliceCount") or len(current))
    node = DraNode(name=name, pool=pool, incomplete=len(current) < expected)
    counter_sets: dict[str, dict[str, int]] = {}
    devices: list[dict] = []
    for spec in current:
        for counter_set in spec.get("sharedCounters") or []:
            counter_sets[counter_set.get("name", "")] = {
                k: _amount(v) or 0 for k, v in (counter_set.get("counters") or {}).items()
            }
        devices.extend(spec.get("devices") or [])
    gpus: dict[str, DraGpu] = {}
    migs: list[dict] = []
    for device in devices:
        kind = _attr(device, TYPE_ATTRIBUTE)
        if kind == DEVICE_TYPE_GPU:
            minor = _MINOR.match(device["name"])
            counters = {}
            for set_name in _consumes(device):
                counters.update(counter_sets.get(set_name, {}))
            gpus[str(_attr(device, UUID_ATTRIBUTE) or device["name"])] = DraGpu(
                name=device["name"],
                minor=int(minor.group(1)) if minor else len(gpus),
                uuid=str(_attr(device, UUID_ATTRIBUTE) or ""),
                product=str(_attr(device, PRODUCT_NAME_ATTRIBUTE) or ""),
                memory_mb=_mib((device.get("capacity") or {}).get(MEMORY_CAPACITY)),
                architecture=str(_attr(device, ARCHITECTURE_ATTRIBUTE) or ""),
                taints=[dict(t) for t in device.get("taints") or []],
                allocated=(pool, device["name"]) in held,
                counters=counters,
                free_counters=dict(counters),
            )
        elif kind == DEVICE_TYPE_MIG:
            migs.append(device)
    # Dynamic MIG: every allocated device (a whole GPU or a placement) takes its counters from its GPU's set.
    by_set = {next(iter(_consumes(d)), ""): g for g in gpus.values() for d in devices if d["name"] == g.name}
    for device in devices:
        if (pool, device["name"]) not in held:
            continue
        for set_name, need in _consumes(device).items():
            gpu = by_set.get(set_name)
            if gpu is not None:
                for counter, amount in need.items():
                    gpu.free_counters[counter] = gpu.free_counters.get(counter, 0) - amount
    for gpu in gpus.values():
        if gpu.allocated:
            (gpu.foreign if (pool, gpu.name) in foreign else gpu.placed if gpu.partitionable else []).append(("", 0))
    placements: dict[str, list[tuple[int, str, dict[str, int]]]] = {}
    for device in migs:
        parent_uuid = str(_attr(device, PARENT_UUID_ATTRIBUTE) or "")
        parent = gpus.get(parent_uuid)
        minor = _MINOR.match(device["name"])
        if parent is None and parent_uuid and minor:
            parent = gpus[parent_uuid] = DraGpu(
                name=f"gpu-{minor.group(1)}",
                minor=int(minor.group(1)),
                uuid=parent_uuid,
                product=str(_attr(device, PRODUCT_NAME_ATTRIBUTE) or ""),
                memory_mb=None,
                architecture=str(_attr(device, ARCHITECTURE_ATTRIBUTE) or ""),
                published=False,
            )
        if parent is None:
            continue
        consumes = _consumes(device)
        if consumes:  # a placement dynamic MIG could carve
            mig = _mig(device, parent.product, (pool, device["name"]) in held)
            need = next(iter(consumes.values()))
            placements.setdefault(parent.uuid, []).append((mig.start, mig.profile, need))
            parent.profile_memory_mb[mig.profile] = mig.memory_mb
            if mig.allocated:
                parent.carved[mig.profile] = parent.carved.get(mig.profile, 0) + 1
                mine = (pool, device["name"]) not in foreign
                (parent.placed if mine else parent.foreign).append((mig.profile, mig.start))
        else:  # a static MIG device: a partition that exists
            mig = _mig(device, parent.product, (pool, device["name"]) in held)
            parent.mig.append(mig)
            if (pool, device["name"]) in foreign:
                parent.foreign.append((mig.profile, mig.start))
    for gpu in gpus.values():
        gpu.mig.sort(key=lambda m: m.start)
        gpu.foreign.sort()
        gpu.placed.sort()
        # Per profile: carve greedily by start slot from what is free (placements of one profile are aligned and
        # the same size, so taking the lowest start that fits finds the most).
        for profile in sorted({p for _, p, _ in placements.get(gpu.uuid, [])}):
            free = dict(gpu.free_counters)
            count = 0
            for _, _, need in sorted(x for x in placements[gpu.uuid] if x[1] == profile):
                if _fits(need, free):
                    count += 1
                    for counter, amount in need.items():
                        free[counter] -= amount
            gpu.carvable[profile] = count
    node.gpus = sorted(gpus.values(), key=lambda g: g.minor)
    return node


@dataclass
class DraClass:
    """One DRA resource class's amounts on one cluster (the fields gpus.resources.class_share writes)."""

    key: str
    kind: str  # "gpu" | "mig"
    resource_name: str  # the device class
    product: str
    product_label: str
    profile: str = ""
    memory_mb: int | None = None
    gpu_fraction: float = 1.0
    total: int = 0
    allocatable: int = 0
    in_use: int = 0
    free: int = 0
    nodes: set[str] = field(default_factory=set)
    architectures: set[str] = field(default_factory=set)


def _untainted(taints: list[dict]) -> bool:
    """A device with a NoSchedule or NoExecute taint takes no new claim that does not tolerate it."""
    return not any(t.get("effect") in ("NoSchedule", "NoExecute") for t in taints)


def derive_dra_classes(
    inventories: dict[str, DraNode],
    schedulable: dict[str, bool],
    claimable: dict[str, frozenset[str] | None] | None = None,
) -> dict[str, DraClass]:
    """The DRA resource classes of a cluster: whole GPUs per product, and MIG devices per product and profile
    (static ones as they exist; dynamic ones as what can still be carved). ``total`` counts devices;
    ``allocatable`` and ``free`` count only untainted devices on nodes that take new work. For dynamic MIG a
    profile's ``total`` is what is carved of it plus what could still be carved now, ``in_use`` what is carved,
    ``free`` what could still be carved.

    ``claimable``: node name -> the dynamic-MIG profiles teams may claim there (its node pool's policy; None or
    absent: all). A profile outside it is not derived from that node at all, so a class no node lets teams claim is
    not offered. Static MIG devices are what the admin carved, so the policy does not apply to them."""
    classes: dict[str, DraClass] = {}
    claimable = claimable or {}
    for name, node in inventories.items():
        takes_work = schedulable.get(name, False)
        allowed = claimable.get(name)
        for gpu in node.gpus:
            label = product_label(gpu.product)
            geometry = product_geometry(label)
            if gpu.published:
                _whole(classes, name, gpu, label, takes_work)
            for mig in gpu.mig:
                cls = _mig_class(classes, gpu, mig.profile, mig.memory_mb, geometry)
                cls.nodes.add(name)
                cls.total += 1
                cls.in_use += 1 if mig.allocated else 0
                if takes_work and _untainted(mig.taints) and _untainted(gpu.taints):
                    cls.allocatable += 1
                    cls.free += 0 if mig.allocated else 1
            for profile, count in gpu.carvable.items():
                if allowed is not None and profile not in allowed:
                    continue
                cls = _mig_class(classes, gpu, profile, gpu.profile_memory_mb.get(profile), geometry)
                cls.nodes.add(name)
                carved = gpu.carved.get(profile, 0)
                cls.total += count + carved
                cls.in_use += carved
                if takes_work and _untainted(gpu.taints):
                    cls.free += count
                    cls.allocatable += count + carved
    return classes


def _whole(classes: dict[str, DraClass], name: str, gpu: DraGpu, label: str, takes_work: bool) -> None:
    key = class_key(GPU_DEVICE_CLASS, label)
    whole = classes.setdefault(key, DraClass(key, "gpu", GPU_DEVICE_CLASS, gpu.product, label, memory_mb=gpu.memory_mb))
    whole.nodes.add(name)
    if gpu.architecture:
        whole.architectures.add(gpu.architecture)
    if not gpu.mig:
        whole.total += 1
        whole.in_use += 1 if gpu.allocated or not gpu.whole_free else 0
        if takes_work and _untainted(gpu.taints):
            whole.allocatable += 1
            whole.free += 1 if gpu.whole_free else 0


def _mig_class(classes: dict[str, DraClass], gpu: DraGpu, profile: str, memory_mb, geometry) -> DraClass:
    label = product_label(gpu.product)
    key = class_key(MIG_DEVICE_CLASS, label, profile)
    known = geometry.profile(profile) if geometry else None
    fraction = known.compute / geometry.compute_slices if known and geometry else 1 / 7
    return classes.setdefault(
        key,
        DraClass(key, "mig", MIG_DEVICE_CLASS, gpu.product, label, profile=profile, memory_mb=memory_mb,
                 gpu_fraction=fraction),
    )  # fmt: skip
