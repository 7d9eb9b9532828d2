"""Hardware facts about the NVIDIA GPUs the simulated cluster can model.

Plain data, no Kubernetes and no Django: what NVML / ``nvidia-smi`` report for a product (name, memory, compute
capability, PCI device id), which MIG profiles it supports with their placement geometry and per-instance
attributes, and the GPU Operator's preset MIG Manager configurations (``all-disabled``, ``all-balanced``,
``all-<profile>`` …).

Sources are the tables in shared/research/gpu_ops_facts.md §1 (MIG User Guide, real ``nvidia-smi mig -lgip`` /
``-lgipp`` captures, real GFD label dumps). Values marked ``# derived`` were converted from ``-lgip`` GiB figures
(GiB × 1024) because no real GFD ``.memory`` label was captured for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

NVIDIA_VENDOR_ID = "10DE"


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile (C == G: the only ones the device plugin advertises)."""

    name: str  # "1g.10gb" or "1g.10gb+me"
    profile_id: int  # NVML GI profile id: per GPU family, never compare across families
    slices: int  # compute (SM) slices, the "g" number; GFD slices.gi / slices.ci
    memory_slices: int  # placement size in memory slices
    max_count: int  # instances of this profile per GPU
    starts: tuple[int, ...]  # allowed placement start indices (memory slices)
    multiprocessors: int
    memory_mb: int  # MemorySizeMB of the MIG device, as GFD labels it
    engines: dict[str, int] = field(default_factory=dict)  # copy/decoder/encoder/jpeg/ofa

    @property
    def resource_name(self) -> str:
        """Extended resource under the mixed strategy (the device plugin replaces '+' by '.')."""
        return "nvidia.com/mig-" + self.name.replace("+", ".")


@dataclass(frozen=True)
class GpuProduct:
    name: str  # exactly as nvidia-smi / NVML print it
    pci_device_id: str  # "0x233010DE": device + vendor, as MIG Manager device-filters write it
    memory_mib: int  # nvidia.com/gpu.memory
    family: str  # nvidia.com/gpu.family
    compute_capability: tuple[int, int]
    multiprocessors: int
    mig_profiles: dict[str, MigProfile] = field(default_factory=dict)
    memory_slice_count: int = 8  # A30 has 4
    compute_slice_count: int = 7  # A30 has 4
    balanced: dict[str, int] = field(default_factory=dict)  # the GPU Operator's all-balanced for this device id
    aliases: tuple[str, ...] = ()  # older driver spellings (R450 printed "A100-SXM4-40GB" without "NVIDIA ")

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def sanitised_name(self) -> str:
        return sanitise_product_name(self.name)


def sanitise_product_name(name: str) -> str:
    """GFD's nvidia.com/gpu.product value: drop characters outside [A-Za-z0-9-_. ], join words with '-'."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name)
    return "-".join(kept.split())


def _engines(copy: int, decoder: int, jpeg: int, ofa: int, encoder: int = 0) -> dict[str, int]:
    return {"copy": copy, "decoder": decoder, "encoder": encoder, "jpeg": jpeg, "ofa": ofa}


def _profiles(*profiles: MigProfile) -> dict[str, MigProfile]:
    return {profile.name: profile for profile in profiles}


_ALL = (0, 1, 2, 3, 4, 5, 6)
_EVEN = (0, 2, 4, 6)

# H100 80GB HBM3 (SXM5). 1g/2g/3g memory, SMs and engines are the real GFD labels of fixture 01.
_H100_80GB = _profiles(
    MigProfile("1g.10gb", 19, 1, 1, 7, _ALL, 16, 9984, _engines(1, 1, 1, 0)),
    MigProfile("1g.10gb+me", 20, 1, 1, 1, _ALL, 16, 9984, _engines(1, 1, 1, 1)),
    MigProfile("1g.20gb", 15, 1, 2, 4, _EVEN, 26, 20096, _engines(1, 1, 1, 0)),
    MigProfile("2g.20gb", 14, 2, 2, 3, (0, 2, 4), 32, 20096, _engines(2, 2, 2, 0)),
    MigProfile("3g.40gb", 9, 3, 4, 2, (0, 4), 60, 40320, _engines(3, 3, 3, 0)),
    MigProfile("4g.40gb", 5, 4, 4, 1, (0,), 64, 40320, _engines(4, 4, 4, 0)),
    MigProfile("7g.80gb", 0, 7, 8, 1, (0,), 132, 81152, _engines(8, 7, 7, 1)),  # derived (79.25 GiB)
)

# A100 80GB (SXM4 / PCIe). Memory derived from real -lgip GiB; SMs from the MIG guide / NVML.
_A100_80GB = _profiles(
    MigProfile("1g.10gb", 19, 1, 1, 7, _ALL, 14, 9728, _engines(1, 0, 0, 0)),  # derived (9.50 GiB)
    MigProfile("1g.10gb+me", 20, 1, 1, 1, _ALL, 14, 9728, _engines(1, 1, 1, 1)),  # derived
    MigProfile("1g.20gb", 15, 1, 2, 4, _EVEN, 14, 19968, _engines(1, 1, 0, 0)),  # derived (19.50 GiB)
    MigProfile("2g.20gb", 14, 2, 2, 3, (0, 2, 4), 28, 19968, _engines(2, 1, 0, 0)),  # derived
    MigProfile("3g.40gb", 9, 3, 4, 2, (0, 4), 42, 40192, _engines(3, 2, 0, 0)),  # derived (39.25 GiB)
    MigProfile("4g.40gb", 5, 4, 4, 1, (0,), 56, 40192, _engines(4, 2, 0, 0)),  # derived
    MigProfile("7g.80gb", 0, 7, 8, 1, (0,), 98, 80896, _engines(7, 5, 1, 1)),  # derived (79.00 GiB)
)

# A100 40GB. 1g.5gb/2g.10gb/3g.20gb memory, SMs and engines are the real GFD labels of fixture 10.
_A100_40GB = _profiles(
    MigProfile("1g.5gb", 19, 1, 1, 7, _ALL, 14, 4864, _engines(1, 0, 0, 0)),
    MigProfile("1g.5gb+me", 20, 1, 1, 1, _ALL, 14, 4864, _engines(1, 1, 1, 1)),
    MigProfile("1g.10gb", 15, 1, 2, 4, _EVEN, 14, 9984, _engines(1, 1, 0, 0)),
    MigProfile("2g.10gb", 14, 2, 2, 3, (0, 2, 4), 28, 9984, _engines(2, 1, 0, 0)),
    MigProfile("3g.20gb", 9, 3, 4, 2, (0, 4), 42, 20096, _engines(3, 2, 0, 0)),
    MigProfile("4g.20gb", 5, 4, 4, 1, (0,), 56, 20096, _engines(4, 2, 0, 0)),
    MigProfile("7g.40gb", 0, 7, 8, 1, (0,), 98, 40192, _engines(7, 5, 1, 1)),  # derived
)

# A30 24GB: a 4-slice geometry (real -lgip/-lgipp, fixture 06); memory derived from GiB.
_A30_24GB = _profiles(
    MigProfile("1g.6gb", 14, 1, 1, 4, (0, 1, 2, 3), 14, 5952, _engines(1, 0, 0, 0)),  # derived (5.81 GiB)
    MigProfile("1g.6gb+me", 21, 1, 1, 1, (0, 1, 2, 3), 14, 5952, _engines(1, 1, 1, 1)),  # derived
    MigProfile("2g.12gb", 5, 2, 2, 2, (0, 2), 28, 11968, _engines(2, 2, 0, 0)),  # derived (11.69 GiB)
    MigProfile("4g.24gb", 0, 4, 4, 1, (0,), 56, 24064, _engines(4, 4, 1, 1)),  # derived (23.50 GiB)
)

_BALANCED_80GB = {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}

PRODUCTS: dict[str, GpuProduct] = {
    product.name: product
    for product in (
        GpuProduct(
            "NVIDIA H100 80GB HBM3",
            "0x233010DE",
            81559,
            "hopper",
            (9, 0),
            132,
            _H100_80GB,
            balanced=_BALANCED_80GB,
        ),
        GpuProduct("NVIDIA H100 PCIe", "0x233110DE", 81559, "hopper", (9, 0), 114, _H100_80GB, balanced=_BALANCED_80GB),
        GpuProduct(
            "NVIDIA A100-SXM4-80GB",
            "0x20B210DE",
            81920,
            "ampere",
            (8, 0),
            108,
            _A100_80GB,
            balanced=_BALANCED_80GB,
            aliases=("A100-SXM4-80GB",),
        ),
        GpuProduct(
            "NVIDIA A100 80GB PCIe",
            "0x20B510DE",
            81920,
            "ampere",
            (8, 0),
            108,
            _A100_80GB,
            balanced=_BALANCED_80GB,
            aliases=("A100 80GB PCIe",),
        ),
        GpuProduct(
            "NVIDIA A100-SXM4-40GB",
            "0x20B010DE",
            40960,
            "ampere",
            (8, 0),
            108,
            _A100_40GB,
            balanced={"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1},
            aliases=("A100-SXM4-40GB",),
        ),
        GpuProduct(
            "NVIDIA A30",
            "0x20B710DE",
            24576,
            "ampere",
            (8, 0),
            56,
            _A30_24GB,
            memory_slice_count=4,
            compute_slice_count=4,
            balanced={"1g.6gb": 2, "2g.12gb": 1},
        ),
        GpuProduct("NVIDIA A10", "0x223610DE", 23028, "ampere", (8, 6), 72),
        GpuProduct("NVIDIA L40S", "0x26B910DE", 46068, "ada-lovelace", (8, 9), 142),
        GpuProduct("NVIDIA L4", "0x27B810DE", 23034, "ada-lovelace", (8, 9), 58),
        GpuProduct("Tesla T4", "0x1EB810DE", 15360, "turing", (7, 5), 40),
    )
}


def lookup_product(name: str) -> GpuProduct:
    """The product for a name as nvidia-smi prints it (current or older driver spelling)."""
    if name in PRODUCTS:
        return PRODUCTS[name]
    for product in PRODUCTS.values():
        if name in product.aliases:
            return product
    known = ", ".join(sorted(PRODUCTS))
    raise KeyError(f"Unknown GPU product {name!r}; known products: {known}.")


def preset_mig_configs(product: GpuProduct) -> dict[str, dict[str, int] | None]:
    """The GPU Operator's default MIG Manager configs that apply to this product.

    Maps config name to the per-GPU ``mig-devices`` (``None`` = MIG disabled). Names follow the operator's
    default-mig-parted-config: ``all-disabled``, ``all-enabled``, ``all-<profile>`` with '+' written '.',
    ``all-balanced``.
    """
    configs: dict[str, dict[str, int] | None] = {"all-disabled": None}
    if not product.mig_capable:
        return configs
    configs["all-enabled"] = {}
    for profile in product.mig_profiles.values():
        configs["all-" + profile.name.replace("+", ".")] = {profile.name: profile.max_count}
    if product.balanced:
        configs["all-balanced"] = dict(product.balanced)
    return configs


def layout_fits(product: GpuProduct, devices: dict[str, int]) -> bool:
    """Whether one GPU can hold these MIG devices at once (placement geometry, compute slices, one +me)."""
    wanted: list[MigProfile] = []
    for name, count in devices.items():
        if count < 0 or name not in product.mig_profiles:
            return False
        profile = product.mig_profiles[name]
        if count > profile.max_count:
            return False
        wanted.extend([profile] * count)
    if sum(profile.slices for profile in wanted) > product.compute_slice_count:
        return False
    if sum(1 for profile in wanted if "+me" in profile.name) > 1:
        return False
    # Largest first keeps the search tiny; memory slices are a bitmap of the GPU's memory.
    wanted.sort(key=lambda profile: (-profile.memory_slices, profile.name))

    def place(index: int, used: int) -> bool:
        if index == len(wanted):
            return True
        profile = wanted[index]
        for start in profile.starts:
            mask = ((1 << profile.memory_slices) - 1) << start
            if start + profile.memory_slices <= product.memory_slice_count and not used & mask:
                if place(index + 1, used | mask):
                    return True
        return False

    return place(0, 0)
