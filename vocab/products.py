"""Hardware facts about the NVIDIA GPUs the simulated cluster can model.

Plain data, no Kubernetes and no Django: what NVML / ``nvidia-smi`` report for a product (name, memory, compute
capability, PCI device id) and, per MIG profile, what an instance reports (NVML profile id, SMs, memory, engines).

MIG *geometry* (which profiles exist, their slices, instance counts and start slots), the GPU Operator's preset
MIG Manager configurations (``all-disabled``, ``all-balanced``, ``all-<profile>`` …) and the placement rules are
not repeated here: they come from the one catalogue in ``vocab.mig`` (plain Python as well), so the simulator, the
inventory and the layout validator can never disagree about what fits on a GPU.

Sources are the tables in shared/research/gpu_ops_facts.md §1 (MIG User Guide, real ``nvidia-smi mig -lgip`` /
``-lgipp`` captures, real GFD label dumps). Values marked ``# derived`` were converted from ``-lgip`` GiB figures
(GiB × 1024) because no real GFD ``.memory`` label was captured for them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from vocab.mig import MigProduct, geometry_for_device, place, preset_layouts
from vocab.names import mig_resource_name

NVIDIA_VENDOR_ID = "10DE"


@dataclass(frozen=True)
class MigProfile:
    """One GPU-instance profile (C == G: the only ones the device plugin advertises): the catalogue's geometry
    plus what NVML / GFD report about an instance of it."""

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
        return mig_resource_name(self.name)


@dataclass(frozen=True)
class GpuProduct:
    name: str  # exactly as nvidia-smi / NVML print it
    pci_device_id: str  # "0x233010DE": device + vendor, as MIG Manager device-filters write it
    memory_mib: int  # nvidia.com/gpu.memory
    family: str  # nvidia.com/gpu.family
    compute_capability: tuple[int, int]
    multiprocessors: int
    mig_profiles: dict[str, MigProfile] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()  # older driver spellings (R450 printed "A100-SXM4-40GB" without "NVIDIA ")

    @property
    def geometry(self) -> MigProduct | None:
        """The catalogue entry (vocab.mig) for this product's PCI device id; None for GPUs without MIG."""
        return geometry_for_device(self.pci_device_id) if self.mig_profiles else None

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    @property
    def memory_slice_count(self) -> int:
        return self.geometry.memory_slices if self.geometry else 0

    @property
    def compute_slice_count(self) -> int:
        return self.geometry.compute_slices if self.geometry else 0

    @property
    def sanitised_name(self) -> str:
        return sanitise_product_name(self.name)


def sanitise_product_name(name: str) -> str:
    """GFD's nvidia.com/gpu.product value: drop characters outside [A-Za-z0-9-_. ], join words with '-'."""
    kept = re.sub(r"[^A-Za-z0-9\-_. ]", "", name)
    return "-".join(kept.split())


def _engines(copy: int, decoder: int, jpeg: int, ofa: int, encoder: int = 0) -> dict[str, int]:
    return {"copy": copy, "decoder": decoder, "encoder": encoder, "jpeg": jpeg, "ofa": ofa}


#: Per profile: NVML profile id, SMs, MemorySizeMB, engines. Geometry is looked up in vocab.mig.
_Attributes = dict[str, tuple[int, int, int, dict[str, int]]]


def _profiles(pci_device_id: str, attributes: _Attributes) -> dict[str, MigProfile]:
    """Join the catalogue's geometry for this device with the per-instance attributes; every catalogued profile
    must have attributes and nothing else may (the catalogue decides what exists)."""
    geometry = geometry_for_device(pci_device_id)
    if geometry is None:
        raise ValueError(f"{pci_device_id} is not in the MIG catalogue (vocab.mig.CATALOGUE).")
    names = {p.name for p in geometry.profiles}
    if names != set(attributes):
        raise ValueError(f"{geometry.key}: attributes for {sorted(attributes)} but the catalogue has {sorted(names)}.")
    return {
        p.name: MigProfile(
            p.name, *attributes[p.name][:1], p.compute, p.size, p.max_instances, p.starts, *attributes[p.name][1:]
        )  # fmt: skip
        for p in geometry.profiles
    }


# H100 80GB HBM3 (SXM5). 1g/2g/3g memory, SMs and engines are the real GFD labels of fixture 01.
_H100_80GB: _Attributes = {
    "1g.10gb": (19, 16, 9984, _engines(1, 1, 1, 0)),
    "1g.10gb+me": (20, 16, 9984, _engines(1, 1, 1, 1)),
    "1g.20gb": (15, 26, 20096, _engines(1, 1, 1, 0)),
    "2g.20gb": (14, 32, 20096, _engines(2, 2, 2, 0)),
    "3g.40gb": (9, 60, 40320, _engines(3, 3, 3, 0)),
    "4g.40gb": (5, 64, 40320, _engines(4, 4, 4, 0)),
    "7g.80gb": (0, 132, 81152, _engines(8, 7, 7, 1)),  # derived (79.25 GiB)
}

# A100 80GB (SXM4 / PCIe). Memory derived from real -lgip GiB; SMs from the MIG guide / NVML.
_A100_80GB: _Attributes = {
    "1g.10gb": (19, 14, 9728, _engines(1, 0, 0, 0)),  # derived (9.50 GiB)
    "1g.10gb+me": (20, 14, 9728, _engines(1, 1, 1, 1)),  # derived
    "1g.20gb": (15, 14, 19968, _engines(1, 1, 0, 0)),  # derived (19.50 GiB)
    "2g.20gb": (14, 28, 19968, _engines(2, 1, 0, 0)),  # derived
    "3g.40gb": (9, 42, 40192, _engines(3, 2, 0, 0)),  # derived (39.25 GiB)
    "4g.40gb": (5, 56, 40192, _engines(4, 2, 0, 0)),  # derived
    "7g.80gb": (0, 98, 80896, _engines(7, 5, 1, 1)),  # derived (79.00 GiB)
}

# A100 40GB. 1g.5gb/2g.10gb/3g.20gb memory, SMs and engines are the real GFD labels of fixture 10.
_A100_40GB: _Attributes = {
    "1g.5gb": (19, 14, 4864, _engines(1, 0, 0, 0)),
    "1g.5gb+me": (20, 14, 4864, _engines(1, 1, 1, 1)),
    "1g.10gb": (15, 14, 9984, _engines(1, 1, 0, 0)),
    "2g.10gb": (14, 28, 9984, _engines(2, 1, 0, 0)),
    "3g.20gb": (9, 42, 20096, _engines(3, 2, 0, 0)),
    "4g.20gb": (5, 56, 20096, _engines(4, 2, 0, 0)),
    "7g.40gb": (0, 98, 40192, _engines(7, 5, 1, 1)),  # derived
}

# H100 NVL 94GB: IDs, SMs and engines from the real -lgip of fixture 07; memory from its MIG device table
# (3g 47488 MiB, 1g.24gb 22144 MiB, 1g.12gb 11008 MiB), the rest derived from GiB.
_H100_NVL: _Attributes = {
    "1g.12gb": (19, 16, 11008, _engines(1, 1, 1, 0)),
    "1g.12gb+me": (20, 16, 11008, _engines(1, 1, 1, 1)),
    "1g.24gb": (15, 26, 22144, _engines(1, 1, 1, 0)),
    "2g.24gb": (14, 32, 22144, _engines(2, 2, 2, 0)),
    "3g.47gb": (9, 60, 47488, _engines(3, 3, 3, 0)),
    "4g.47gb": (5, 64, 47488, _engines(4, 4, 4, 0)),
    "7g.94gb": (0, 132, 95360, _engines(8, 7, 7, 1)),  # derived (93.12 GiB)
}

# H200 141GB: 1g.18gb / 2g.35gb / 7g.141gb IDs and SMs from a partial -lgip; the other rows are the H100
# pattern and memory is derived from the guide's fractions [unverified on hardware].
_H200: _Attributes = {
    "1g.18gb": (19, 16, 16384, _engines(1, 1, 1, 0)),
    "1g.18gb+me": (20, 16, 16384, _engines(1, 1, 1, 1)),
    "1g.35gb": (15, 26, 33280, _engines(1, 1, 1, 0)),  # derived
    "2g.35gb": (14, 32, 33280, _engines(2, 2, 2, 0)),
    "3g.71gb": (9, 60, 72704, _engines(3, 3, 3, 0)),  # derived
    "4g.71gb": (5, 64, 72704, _engines(4, 4, 4, 0)),  # derived
    "7g.141gb": (0, 132, 143360, _engines(8, 7, 7, 1)),
}

# A30 24GB: a 4-slice geometry (real -lgip/-lgipp, fixture 06); memory derived from GiB.
_A30_24GB: _Attributes = {
    "1g.6gb": (14, 14, 5952, _engines(1, 0, 0, 0)),  # derived (5.81 GiB)
    "1g.6gb+me": (21, 14, 5952, _engines(1, 1, 1, 1)),  # derived
    "2g.12gb": (5, 28, 11968, _engines(2, 2, 0, 0)),  # derived (11.69 GiB)
    "2g.12gb+me": (6, 28, 11968, _engines(2, 2, 1, 1)),  # R525+; id not captured (unverified), engines: MIG guide
    "4g.24gb": (0, 56, 24064, _engines(4, 4, 1, 1)),  # derived (23.50 GiB)
}

PRODUCTS: dict[str, GpuProduct] = {
    product.name: product
    for product in (
        GpuProduct("NVIDIA H100 80GB HBM3", "0x233010DE", 81559, "hopper", (9, 0), 132,
                   _profiles("0x233010DE", _H100_80GB)),
        GpuProduct("NVIDIA H100 PCIe", "0x233110DE", 81559, "hopper", (9, 0), 114,
                   _profiles("0x233110DE", _H100_80GB)),
        GpuProduct("NVIDIA H100 NVL", "0x232110DE", 95830, "hopper", (9, 0), 132,
                   _profiles("0x232110DE", _H100_NVL)),
        GpuProduct("NVIDIA H200", "0x233510DE", 143771, "hopper", (9, 0), 132, _profiles("0x233510DE", _H200)),
        GpuProduct("NVIDIA A100-SXM4-80GB", "0x20B210DE", 81920, "ampere", (8, 0), 108,
                   _profiles("0x20B210DE", _A100_80GB), aliases=("A100-SXM4-80GB",)),
        GpuProduct("NVIDIA A100 80GB PCIe", "0x20B510DE", 81920, "ampere", (8, 0), 108,
                   _profiles("0x20B510DE", _A100_80GB), aliases=("A100 80GB PCIe",)),
        GpuProduct("NVIDIA A100-SXM4-40GB", "0x20B010DE", 40960, "ampere", (8, 0), 108,
                   _profiles("0x20B010DE", _A100_40GB), aliases=("A100-SXM4-40GB",)),
        GpuProduct("NVIDIA A30", "0x20B710DE", 24576, "ampere", (8, 0), 56, _profiles("0x20B710DE", _A30_24GB)),
        GpuProduct("NVIDIA A10", "0x223610DE", 23028, "ampere", (8, 6), 72),
        GpuProduct("NVIDIA L40S", "0x26B910DE", 46068, "ada-lovelace", (8, 9), 142),
        GpuProduct("NVIDIA L4", "0x27B810DE", 23034, "ada-lovelace", (8, 9), 58),
        GpuProduct("Tesla T4", "0x1EB810DE", 15360, "turing", (7, 5), 40),
    )
}  # fmt: skip


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
    """The GPU Operator's default MIG Manager configs that apply to this product (vocab.mig.preset_layouts):
    config name -> per-GPU ``mig-devices`` (None = MIG disabled). A GPU without MIG only has ``all-disabled``."""
    geometry = product.geometry
    if geometry is None:
        return {"all-disabled": None}
    return preset_layouts(geometry)


def layout_fits(product: GpuProduct, devices: dict[str, int]) -> bool:
    """Whether one GPU can hold these MIG devices at once (the catalogue's placement rules)."""
    geometry = product.geometry
    return geometry is not None and place(geometry, devices) is not None
