"""Read GPU facts off a Kubernetes Node object: GPU Feature Discovery labels, GPU Operator labels and the
extended resources the NVIDIA device plugin advertises.

Pure Python over the Node dict (camelCase JSON, as ``kubectl get node -o json`` prints it); no Django.
Label names and meanings follow NVIDIA's k8s-device-plugin / GFD documentation (see
shared/research/gpu_ops_facts.md §3-§4). Older GFD releases omit some labels (``mig.strategy``,
``cuda.runtime-version.*``, ``gpu.sharing-strategy``); the parser falls back the way those releases meant.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vocab.cloud import PROVIDER_NAMES, cloud_gpu, instance_type_of, provider_of
from vocab.mig import product_geometry
from vocab.names import (
    ARCH_LABEL,
    BETA_ARCH_LABEL,
    CUDA_DRIVER_MAJOR_LABEL,
    CUDA_DRIVER_MINOR_LABEL,
    CUDA_DRIVER_REV_LABEL,
    CUDA_DRIVER_VERSION_FULL_LABEL,
    CUDA_DRIVER_VERSION_MAJOR_LABEL,
    CUDA_DRIVER_VERSION_MINOR_LABEL,
    CUDA_DRIVER_VERSION_REVISION_LABEL,
    CUDA_RUNTIME_MAJOR_LABEL,
    CUDA_RUNTIME_MINOR_LABEL,
    CUDA_RUNTIME_VERSION_FULL_LABEL,
    CUDA_RUNTIME_VERSION_MAJOR_LABEL,
    CUDA_RUNTIME_VERSION_MINOR_LABEL,
    DEVICE_PLUGIN_CONFIG_LABEL,
    GKE_GPU_DRIVER_VERSION_LABEL,
    GKE_GPU_PARTITION_SIZE_LABEL,
    GKE_GPU_SHARING_STRATEGY_LABEL,
    GKE_MAX_SHARED_CLIENTS_LABEL,
    GKE_TIME_SHARING,
    GPU_CLIQUE_LABEL,
    GPU_COMPUTE_MAJOR_LABEL,
    GPU_COMPUTE_MINOR_LABEL,
    GPU_COUNT_LABEL,
    GPU_DEPLOY_LABEL_PREFIX,
    GPU_DRIVER_UPGRADE_STATE_LABEL,
    GPU_FAMILY_LABEL,
    GPU_MACHINE_LABEL,
    GPU_MEMORY_LABEL,
    GPU_PRESENT_LABEL,
    GPU_PRODUCT_LABEL,
    GPU_REPLICAS_LABEL,
    GPU_RESOURCE,
    GPU_SHARING_STRATEGY_LABEL,
    GPU_WORKLOAD_CONFIG_LABEL,
    MIG_ATTRIBUTE_CI_SLICES,
    MIG_ATTRIBUTE_COUNT,
    MIG_ATTRIBUTE_GI_SLICES,
    MIG_ATTRIBUTE_MEMORY,
    MIG_ATTRIBUTE_MULTIPROCESSORS,
    MIG_CAPABLE_LABEL,
    MIG_CONFIG_LABEL,
    MIG_CONFIG_PENDING,
    MIG_CONFIG_REBOOTING,
    MIG_CONFIG_STATE_LABEL,
    MIG_PRODUCT_INFIX,
    MIG_RESOURCE_PREFIX,
    MIG_STRATEGY_LABEL,
    MIG_STRATEGY_MIXED,
    MIG_STRATEGY_NONE,
    MIG_STRATEGY_SINGLE,
    MPS_CAPABLE_LABEL,
    NFD_NVIDIA_GPU_LABELS,
    PRESSURE_CONDITION_TAINTS,
    READY_CONDITION,
    SHARED_GPU_RESOURCE,
    SHARED_PRODUCT_SUFFIX,
    SHARING_MPS,
    SHARING_NONE,
    SHARING_TIME_SLICING,
    TRUE_VALUE,
    is_mig_resource,
    is_nvidia,
    mig_profile_of_resource,
    mig_resource_name,
    normalise_profile,
    shared_product,
)
from vocab.products import PRODUCTS
from vocab.quantity import InvalidQuantity, parse_count
from vocab.taints import Taint, gpu_keeping, pool_of

_MIG_LABEL = re.compile(
    "^"
    + re.escape(MIG_RESOURCE_PREFIX)
    + r"(?P<profile>[0-9]+(?:c\.[0-9]+)?g\.[0-9]+gb(?:[.+](?:me\.all|me|gfx)|-me)?)\.(?P<attr>.+)$"
)
_PROFILE = re.compile(r"^(?:(?P<c>\d+)c\.)?(?P<g>\d+)g\.(?P<gb>\d+)gb(?P<suffix>(?:[.+]me(?:\.all)?|[.+]gfx|-me)?)$")


def gpu_resources(resources: dict[str, Any] | None) -> dict[str, int]:
    """The NVIDIA extended resources in a capacity/allocatable map, as integers (zeros kept: a lingering
    ``mig-3g.40gb: 0`` after a re-partition is real and worth showing)."""
    out: dict[str, int] = {}
    for name, qty in (resources or {}).items():
        if is_nvidia(name):
            try:
                out[name] = parse_count(0 if qty is None else qty)
            except InvalidQuantity:
                continue
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class MigProfileFacts:
    """One MIG profile as GFD (mixed strategy) or the device plugin reports it on a node."""

    profile: str  # e.g. "1g.10gb" or "1g.10gb+me"
    resource: str  # nvidia.com/mig-1g.10gb (device plugin turns '+' into '.')
    count: int  # instances on the node (from capacity when the plugin runs, else GFD's count label)
    memory_mb: int | None = None
    multiprocessors: int | None = None
    gi_slices: int | None = None
    ci_slices: int | None = None

    @property
    def compute_slices(self) -> int:
        return profile_compute_slices(self.profile)


@dataclass
class NodeFacts:
    """Everything the inventory keeps about one node, derived from its Node object alone."""

    name: str
    uid: str
    resource_version: str
    labels: dict[str, str]
    taints: list[Taint]
    unschedulable: bool
    ready: bool
    ready_message: str
    conditions: list[dict[str, Any]]
    capacity: dict[str, str]
    allocatable: dict[str, str]
    gpu_capacity: dict[str, int]
    gpu_allocatable: dict[str, int]
    # GFD facts
    has_gpu_labels: bool
    product: str  # the GPU model as GFD sanitises it, without -MIG-… / -SHARED suffixes
    product_label: str  # gpu.product verbatim
    gpu_count: int  # physical GPUs (under MIG single GFD counts MIG devices; this undoes that)
    gpu_memory_mb: int | None
    gpu_family: str
    compute_capability: str
    driver_version: str
    cuda_version: str  # highest CUDA version the driver supports, "12.4"
    machine: str
    mig_capable: bool
    mig_strategy: str  # none | single | mixed
    mig_config: str
    mig_config_state: str
    mig_profiles: list[MigProfileFacts] = field(default_factory=list)
    single_mig_profile: str = ""  # the profile every GPU is cut into under MIG single
    sharing_strategy: str = "none"  # none | time-slicing | mps
    replicas: int = 1
    shared_renamed: bool = False
    device_plugin_config: str = ""
    operand_deploy: dict[str, str] = field(default_factory=dict)
    #: "gke", "eks", "aks" for a node of a managed node pool, "" otherwise (vocab.cloud).
    provider: str = ""
    instance_type: str = ""
    #: Where the GPU model came from: "gfd" (nvidia.com/gpu.product) or "<label>=<value>" of the provider.
    product_source: str = ""
    #: Per NVIDIA resource, how many devices capacity lists but allocatable does not: the device plugin marked
    #: them unhealthy (an XID error, a GPU fallen off the bus).
    unhealthy: dict[str, int] = field(default_factory=dict)
    #: Whole GPUs the device plugin marked unhealthy (a time-sliced or MPS GPU withdraws all its replicas).
    unhealthy_gpus: int = 0
    #: GPUs the instance type says the machine has; 0 when unknown (self-managed nodes, GKE accelerator types).
    expected_gpus: int = 0
    architecture: str = ""  # kubernetes.io/arch: amd64, arm64
    clique: str = ""  # nvidia.com/gpu.clique: the NVLink domain
    mps_capable: bool = False
    driver_upgrade_state: str = ""  # nvidia.com/gpu-driver-upgrade-state
    #: Node conditions other than Ready that hold (MemoryPressure, DiskPressure, PIDPressure,
    #: NetworkUnavailable), each with its message.
    pressure: dict[str, str] = field(default_factory=dict)
    #: Whether the physical GPU count under the MIG single strategy came from the catalogue (False: the product
    #: is not catalogued and the count is the number of MIG devices).
    mig_count_known: bool = True
    #: Node Feature Discovery found an NVIDIA GPU on the PCI bus (vocab.names.NFD_NVIDIA_GPU_LABELS): true even
    #: before any driver is loaded.
    nvidia_pci: bool = False
    #: nvidia.com/gpu.present=true: the GPU Operator saw NFD's labels and took the node as a GPU node.
    gpu_present: bool = False
    #: nvidia.com/gpu.workload.config: "container", "vm-passthrough", "vm-vgpu"; "" when unset (container).
    workload_config: str = ""
    #: The node pool from the provider's pool label (vocab.taints.POOL_LABELS); "" when it carries none.
    pool: str = ""

    @property
    def provider_name(self) -> str:
        return PROVIDER_NAMES.get(self.provider, "")

    @property
    def is_gpu_node(self) -> bool:
        return self.has_gpu_labels or bool(self.gpu_capacity) or self.nvidia_pci

    @property
    def gpus_advertised(self) -> bool:
        """True when the device plugin advertises anything schedulable for the GPUs."""
        return any(v > 0 for v in self.gpu_allocatable.values())

    @property
    def gpu_taint(self) -> Taint | None:
        """The first taint that keeps general work off the node by a GPU convention (vocab.taints), or None."""
        return next(iter(gpu_keeping(self.taints)), None)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value not in (None, "") else None
    except ValueError:
        return None


def profile_compute_slices(profile: str) -> int:
    """Compute (SM) slices of a MIG profile name: '3g.40gb' -> 3, '1c.3g.20gb' -> 1."""
    match = _PROFILE.match(profile)
    if not match:
        raise ValueError(f"{profile!r} is not a MIG profile name")
    return int(match.group("c") or match.group("g"))


def resource_for_profile(profile: str) -> str:
    """The device plugin's resource name for a MIG profile: '1g.10gb+me' -> 'nvidia.com/mig-1g.10gb.me'."""
    return mig_resource_name(profile)


def _mig_profiles(labels: dict[str, str], capacity: dict[str, int]) -> list[MigProfileFacts]:
    by_profile: dict[str, dict[str, str]] = {}
    for key, value in labels.items():
        match = _MIG_LABEL.match(key)
        if match:
            by_profile.setdefault(match.group("profile"), {})[match.group("attr")] = value
    resources = {name: count for name, count in capacity.items() if is_mig_resource(name)}
    advertised = {mig_profile_of_resource(r) for r in resources}
    profiles: dict[str, MigProfileFacts] = {}
    for resource, count in resources.items():
        profile = mig_profile_of_resource(resource)
        attrs = by_profile.get(profile) or by_profile.get(profile.replace("+", "."))
        if attrs is None:
            # Old GFD named some profiles differently from the device plugin (mig-3g.21gb vs mig-3g.20gb,
            # NVIDIA/gpu-feature-discovery#7): match on the slice count instead.
            slices = str(profile_compute_slices(profile))
            attrs = next(
                (a for p, a in by_profile.items() if p not in advertised and a.get(MIG_ATTRIBUTE_GI_SLICES) == slices),
                {},
            )
        profiles[profile] = MigProfileFacts(
            profile=profile,
            resource=resource,
            count=count,
            memory_mb=_int(attrs.get(MIG_ATTRIBUTE_MEMORY)),
            multiprocessors=_int(attrs.get(MIG_ATTRIBUTE_MULTIPROCESSORS)),
            gi_slices=_int(attrs.get(MIG_ATTRIBUTE_GI_SLICES)),
            ci_slices=_int(attrs.get(MIG_ATTRIBUTE_CI_SLICES)),
        )
    if not resources:
        # No device plugin: fall back to what GFD saw, so the inventory still shows the intended layout.
        for profile, attrs in by_profile.items():
            profiles[profile] = MigProfileFacts(
                profile=profile,
                resource=resource_for_profile(profile),
                count=_int(attrs.get(MIG_ATTRIBUTE_COUNT)) or 0,
                memory_mb=_int(attrs.get(MIG_ATTRIBUTE_MEMORY)),
                multiprocessors=_int(attrs.get(MIG_ATTRIBUTE_MULTIPROCESSORS)),
                gi_slices=_int(attrs.get(MIG_ATTRIBUTE_GI_SLICES)),
                ci_slices=_int(attrs.get(MIG_ATTRIBUTE_CI_SLICES)),
            )
    return sorted(profiles.values(), key=lambda p: (p.compute_slices, p.memory_mb or 0, p.profile))


def _ready(conditions: list[dict[str, Any]]) -> tuple[bool, str]:
    for cond in conditions:
        if cond.get("type") == READY_CONDITION:
            return cond.get("status") == "True", cond.get("message") or cond.get("reason") or ""
    return False, "The node reports no Ready condition."


def _product_memory(product: str) -> int | None:
    """nvidia.com/gpu.memory GFD would write for this (sanitised) product, from vocab.products; None if unknown."""
    return next((p.memory_mib for p in PRODUCTS.values() if p.sanitised_name == product), None)


def _pressure(conditions: list[dict[str, Any]]) -> dict[str, str]:
    return {
        cond["type"]: cond.get("message") or cond.get("reason") or ""
        for cond in conditions
        if cond.get("type") in PRESSURE_CONDITION_TAINTS and cond.get("status") == "True"
    }


def per_gpu_instances(product: str, profile: str) -> int | None:
    """MIG devices of ``profile`` one GPU of ``product`` holds when all of it is cut into that profile (the
    single strategy): the catalogue's maximum instances, or None when the product or profile is not catalogued."""
    geometry = product_geometry(product)
    entry = geometry.profile(normalise_profile(profile)) if geometry else None
    return entry.max_instances if entry else None


def _unhealthy(capacity: dict[str, int], allocatable: dict[str, int]) -> dict[str, int]:
    return {r: n - allocatable.get(r, 0) for r, n in capacity.items() if n > allocatable.get(r, 0)}


def parse_node(node: dict[str, Any]) -> NodeFacts:
    """Facts about one Node object. Tolerates missing sections (a Node fresh from the API may lack status)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    conditions = list(status.get("conditions") or [])
    ready, ready_message = _ready(conditions)
    capacity = dict(status.get("capacity") or {})
    allocatable = dict(status.get("allocatable") or {})
    gpu_cap = gpu_resources(capacity)
    gpu_alloc = gpu_resources(allocatable)
    taints = [Taint.of(t) for t in spec.get("taints") or []]

    def label(name: str) -> str:
        return labels.get(name, "")

    product_label = label(GPU_PRODUCT_LABEL)
    product = product_label
    single_profile = ""
    if MIG_PRODUCT_INFIX in product:
        product, _, single_profile = product.partition(MIG_PRODUCT_INFIX)
    shared_suffix = product.endswith(SHARED_PRODUCT_SUFFIX) or single_profile.endswith(SHARED_PRODUCT_SUFFIX)
    product = product.removesuffix(SHARED_PRODUCT_SUFFIX)
    single_profile = normalise_profile(single_profile.removesuffix(SHARED_PRODUCT_SUFFIX))
    product_source = "gfd" if product_label else ""

    # A managed node pool (GKE, EKS, AKS) without GFD: the model comes from the provider's labels.
    provider = provider_of(labels, str(spec.get("providerID") or ""))
    cloud, cloud_source = cloud_gpu(provider, labels) if provider else (None, "")
    managed = bool(provider) and not product_label and bool(gpu_cap)
    gke_sharing = label(GKE_GPU_SHARING_STRATEGY_LABEL)
    gke_clients = _int(label(GKE_MAX_SHARED_CLIENTS_LABEL))
    if managed and cloud is not None:
        product, product_label, product_source = cloud.product, cloud.product, cloud_source
        partition = label(GKE_GPU_PARTITION_SIZE_LABEL)
        if partition:
            single_profile = normalise_profile(partition)

    mig_profiles = _mig_profiles(labels, gpu_cap)
    strategy = label(MIG_STRATEGY_LABEL)
    if not strategy:
        strategy = (
            MIG_STRATEGY_SINGLE if single_profile else (MIG_STRATEGY_MIXED if mig_profiles else MIG_STRATEGY_NONE)
        )

    replicas = _int(label(GPU_REPLICAS_LABEL))
    if replicas is not None and replicas < 1:
        replicas = None  # gpu.replicas=0 (or less) shares nothing: one replica per GPU, never "0 replicas"
    sharing = label(GPU_SHARING_STRATEGY_LABEL)
    renamed = SHARED_GPU_RESOURCE in gpu_cap and gpu_cap[SHARED_GPU_RESOURCE] > 0
    if managed and gke_sharing in (GKE_TIME_SHARING, SHARING_MPS):
        sharing = SHARING_MPS if gke_sharing == SHARING_MPS else SHARING_TIME_SLICING
        replicas = gke_clients or 1
        if product_label and replicas > 1:
            # GKE keeps the resource name nvidia.com/gpu for shared GPUs; the portal's label for them gets the
            # "-SHARED" suffix GFD would write, so a share is never counted in the whole-GPU class of the model.
            product_label = shared_product(product_label, replicas, rename=False)
    if not sharing:
        sharing = SHARING_TIME_SLICING if (shared_suffix or renamed or (replicas or 1) > 1) else SHARING_NONE
    if replicas is None:
        replicas = 1

    count = _int(label(GPU_COUNT_LABEL)) or 0
    memory = _int(label(GPU_MEMORY_LABEL))
    if managed:
        # The device plugin's own count: units / replicas when shared.
        advertised = gpu_cap.get(GPU_RESOURCE, 0) or gpu_cap.get(SHARED_GPU_RESOURCE, 0)
        count = advertised // max(1, replicas)
        memory = _product_memory(product)
    mig_count_known = True
    if strategy == MIG_STRATEGY_SINGLE and single_profile:
        # GFD (and GKE) count MIG devices under the single strategy; the physical count is not labelled. One
        # GPU holds the catalogue's maximum instances of the profile (1g.10gb: 7, 1g.20gb: 4, 1g.10gb+me: 1 on
        # an H100), so the physical count is devices / that.
        per_gpu = per_gpu_instances(product, single_profile)
        if per_gpu is None:
            # Not catalogued: the node's MIG devices are all the portal knows; say so rather than guess.
            mig_count_known = False
            per_gpu = 1
        if managed:
            count = gpu_cap.get(GPU_RESOURCE, 0)
        count = -(-count // per_gpu) if count else 0
        memory = None

    cuda = label(CUDA_RUNTIME_VERSION_FULL_LABEL)
    if not cuda and label(CUDA_RUNTIME_VERSION_MAJOR_LABEL):
        cuda = f"{label(CUDA_RUNTIME_VERSION_MAJOR_LABEL)}.{label(CUDA_RUNTIME_VERSION_MINOR_LABEL) or '0'}"
    if not cuda and label(CUDA_RUNTIME_MAJOR_LABEL):
        cuda = f"{label(CUDA_RUNTIME_MAJOR_LABEL)}.{label(CUDA_RUNTIME_MINOR_LABEL) or '0'}"
    driver = label(CUDA_DRIVER_VERSION_FULL_LABEL)
    for major, minor, rev in (
        (CUDA_DRIVER_VERSION_MAJOR_LABEL, CUDA_DRIVER_VERSION_MINOR_LABEL, CUDA_DRIVER_VERSION_REVISION_LABEL),
        (CUDA_DRIVER_MAJOR_LABEL, CUDA_DRIVER_MINOR_LABEL, CUDA_DRIVER_REV_LABEL),
    ):
        if not driver and label(major):
            driver = ".".join(p for p in (label(major), label(minor), label(rev)) if p)
    if not driver and managed and label(GKE_GPU_DRIVER_VERSION_LABEL):
        driver = f"GKE {label(GKE_GPU_DRIVER_VERSION_LABEL)}"
    cc = (
        f"{label(GPU_COMPUTE_MAJOR_LABEL)}.{label(GPU_COMPUTE_MINOR_LABEL) or '0'}"
        if label(GPU_COMPUTE_MAJOR_LABEL)
        else ""
    )

    mig_state = label(MIG_CONFIG_STATE_LABEL)
    unhealthy = _unhealthy(gpu_cap, gpu_alloc)
    # The device plugin stops while MIG Manager repartitions, or is switched off: allocatable drops to 0 for a
    # reason other than sick GPUs (the diagnosis names those reasons).
    deploy = {k[len(GPU_DEPLOY_LABEL_PREFIX) :]: v for k, v in labels.items() if k.startswith(GPU_DEPLOY_LABEL_PREFIX)}
    if mig_state in (MIG_CONFIG_PENDING, MIG_CONFIG_REBOOTING) or not any(gpu_alloc.values()):
        unhealthy = {}
    unhealthy_gpus = 0
    for resource in (GPU_RESOURCE, SHARED_GPU_RESOURCE):
        if resource in unhealthy and not (strategy == MIG_STRATEGY_SINGLE and single_profile):
            unhealthy_gpus += -(-unhealthy[resource] // max(1, replicas))

    return NodeFacts(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=str(meta.get("resourceVersion", "")),
        labels=labels,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        ready=ready,
        ready_message=ready_message,
        conditions=conditions,
        capacity=capacity,
        allocatable=allocatable,
        gpu_capacity=gpu_cap,
        gpu_allocatable=gpu_alloc,
        has_gpu_labels=bool(
            (product_label and not managed) or label(GPU_PRESENT_LABEL) == TRUE_VALUE or label(GPU_COUNT_LABEL)
        ),
        product=product,
        product_label=product_label,
        gpu_count=count,
        gpu_memory_mb=memory,
        gpu_family=label(GPU_FAMILY_LABEL),
        compute_capability=cc,
        driver_version=driver,
        cuda_version=cuda,
        machine=label(GPU_MACHINE_LABEL),
        mig_capable=label(MIG_CAPABLE_LABEL) == "true" or bool(single_profile or mig_profiles),
        mig_strategy=strategy,
        mig_config=label(MIG_CONFIG_LABEL),
        mig_config_state=mig_state,
        mig_profiles=mig_profiles,
        single_mig_profile=single_profile,
        sharing_strategy=sharing,
        replicas=replicas,
        shared_renamed=renamed,
        device_plugin_config=label(DEVICE_PLUGIN_CONFIG_LABEL),
        operand_deploy=deploy,
        provider=provider,
        instance_type=instance_type_of(labels),
        product_source=product_source,
        unhealthy=unhealthy,
        unhealthy_gpus=unhealthy_gpus,
        expected_gpus=cloud.count if managed and cloud is not None else 0,
        architecture=label(ARCH_LABEL)
        or label(BETA_ARCH_LABEL)
        or str((status.get("nodeInfo") or {}).get("architecture") or ""),
        clique=label(GPU_CLIQUE_LABEL),
        mps_capable=label(MPS_CAPABLE_LABEL) == TRUE_VALUE or sharing == SHARING_MPS,
        driver_upgrade_state=label(GPU_DRIVER_UPGRADE_STATE_LABEL),
        pressure=_pressure(conditions),
        mig_count_known=mig_count_known,
        nvidia_pci=any(label(name) == TRUE_VALUE for name in NFD_NVIDIA_GPU_LABELS),
        gpu_present=label(GPU_PRESENT_LABEL) == TRUE_VALUE,
        workload_config=label(GPU_WORKLOAD_CONFIG_LABEL),
        pool=pool_of(labels),
    )
