"""MIG geometry: which GPU instance profiles each product offers and where they may sit.

Pure data and functions, no Django. The catalogue covers every MIG-capable GPU of the GPU Operator's default
mig-parted config (NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml; sources per row at
``CATALOGUE``), with each profile's variants (+me, +me.all, +gfx, -me). Geometry comes from NVIDIA's MIG User
Guide and real ``nvidia-smi mig -lgip/-lgipp`` captures (shared/research/gpu_ops_facts.md §1, fixtures 06/07): a
GPU has 8 memory slices and 7 compute slices (4 and 4 on A30 and RTX PRO 6000 Blackwell); a profile occupies
``size`` consecutive memory slices starting at one of its allowed start slots.

What a node advertises for a layout follows NVIDIA/k8s-device-plugin (``advertised_after``): the mixed strategy one
``nvidia.com/mig-<profile>`` resource per profile, the single strategy every MIG device as ``nvidia.com/gpu`` with
the product label ``<model>-MIG-<profile>``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import yaml

from vocab.names import (
    GPU_RESOURCE,
    MIG_INVALID_PROFILE,
    MIG_PARTED_CONFIGS,
    MIG_PRODUCT_INFIX,
    MIG_STRATEGY_MIXED,
    MIG_STRATEGY_SINGLE,
    SHARED_PRODUCT_SUFFIX,
    mig_product,
    mig_resource_name,
)


@dataclass(frozen=True)
class MigProfile:
    name: str  # "3g.40gb", "1g.10gb+me", "1g.24gb+gfx", "1g.24gb-me"
    compute: int  # SM slices (the "g" number)
    size: int  # memory slices = placement size
    max_instances: int
    starts: tuple[int, ...]  # allowed placement start slots

    @property
    def variant(self) -> str:
        """The variant suffix ("" for a plain profile): see ``profile_variant``."""
        return profile_variant(self.name)


@dataclass(frozen=True)
class MigProduct:
    key: str
    products: tuple[str, ...]  # GFD product names (sanitised) this geometry applies to
    memory_slices: int
    compute_slices: int
    profiles: tuple[MigProfile, ...]
    #: PCI device IDs as MIG Manager's device-filter writes them (device + vendor 10DE), grouped as in the GPU
    #: Operator's default mig-parted config.
    pci_device_ids: tuple[str, ...] = ()

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)


# -- profile variants ---------------------------------------------------------------------------------------------
#
# NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go names a GPU-instance profile "<G>g.<GB>gb" plus one attribute
# suffix: "+me" (the instance gets a media-engine set: decoder, JPEG, OFA), "+me.all" (it gets all of the GPU's
# media engines), "+gfx" (graphics-capable), "-me" (no media engines at all). The device plugin advertises each
# as its own resource with '+' written '.' (NVIDIA/k8s-device-plugin internal/rm/rm.go: nvidia.com/mig-1g.10gb.me,
# nvidia.com/mig-1g.24gb.me.all, nvidia.com/mig-1g.24gb.gfx, nvidia.com/mig-1g.24gb-me).

MEDIA_EXTENSIONS = "+me"
ALL_MEDIA_EXTENSIONS = "+me.all"
GRAPHICS = "+gfx"
NO_MEDIA = "-me"
VARIANTS = (ALL_MEDIA_EXTENSIONS, MEDIA_EXTENSIONS, GRAPHICS, NO_MEDIA)  # longest first: "+me.all" ends "+me…"


def profile_variant(name: str) -> str:
    """A profile name's variant suffix: "+me", "+me.all", "+gfx", "-me", or "" for a plain profile."""
    return next((suffix for suffix in VARIANTS if name.endswith(suffix)), "")


def takes_media_extensions(name: str) -> bool:
    """Whether an instance of this profile takes the GPU's media extensions ("+me" or "+me.all"). A GPU has one
    such set, so at most one instance per GPU may (MIG User Guide: "A single 1g profile can include media
    extensions", instances available 1)."""
    return profile_variant(name) in (MEDIA_EXTENSIONS, ALL_MEDIA_EXTENSIONS)


# -- the catalogue ------------------------------------------------------------------------------------------------
#
# Placement: where an instance of (compute slices, memory slices) may start. From the placement tables the driver
# prints (``nvidia-smi mig -lgipp``) on real A100-40GB (MIG User Guide), H100 80GB and H100 NVL 94GB (8 memory
# slices, 7 compute slices) and A30 (4 and 4; shared/research/gpu_ops_facts.md §1.1, fixtures 06/07). No -lgipp
# has been captured for H200, GH200, B200, GB200, B300 or GB300: they have the same 8/7 slicing and the same
# instance counts, so the 8-slice table is assumed for them; RTX PRO 6000 Blackwell has the A30's 4/4 slicing
# (MIG User Guide "Supported GPUs": 4 instances) and the 4-slice table is assumed for it. A variant (+me, +gfx …)
# sits where its plain profile sits.
#: memory slices of the GPU -> {(compute slices, memory slices) of the profile: start slots}
_STARTS = {
    8: {
        (1, 1): (0, 1, 2, 3, 4, 5, 6),
        (1, 2): (0, 2, 4, 6),
        (2, 2): (0, 2, 4),
        (3, 4): (0, 4),
        (4, 4): (0,),
        (7, 8): (0,),
    },
    4: {(1, 1): (0, 1, 2, 3), (2, 2): (0, 2), (4, 4): (0,)},
}
_COMPUTE_SLICES = {8: 7, 4: 4}


def _family(
    key: str, products: tuple[str, ...], pci_device_ids: tuple[str, ...], memory_slices: int, table: str
) -> MigProduct:
    """One catalogue row from its profile table: ``"<profile> <memory slices> <instances>"`` per line. The
    compute slices are the profile's "Ng" number; the start slots come from ``_STARTS``."""
    profiles = []
    for line in table.strip().splitlines():
        name, size, count = line.split()
        compute = int(name.split("g.", 1)[0])
        starts = _STARTS[memory_slices][(compute, int(size))]
        profiles.append(MigProfile(name, compute, int(size), int(count), starts))
    return MigProduct(key, products, memory_slices, _COMPUTE_SLICES[memory_slices], tuple(profiles), pci_device_ids)


#: Every MIG-capable GPU of the GPU Operator's default mig-parted config, one row per group of device IDs that
#: share a profile table.
#:
#: Sources (the instance counts are the ``all-<profile>`` and ``all-balanced`` entries of the config; where a
#: profile has no ``all-`` entry of its own, the MIG User Guide's table as NVIDIA's mig-parted test data copies it):
#: - NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml @ db0bb63ec5346a187a73273a0a97bc71ee9f1f3b
#:   (default-mig-parted-config; unchanged at the repository's head a22dbf671f2e26f9a1e342f8eea28e196235e110, and
#:   the same configs as NVIDIA/mig-parted deployments/systemd/config-default.yaml @
#:   bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d): device IDs per product in its device-filters and comments.
#: - NVIDIA/mig-parted pkg/mig/builder/builder_test.go @ bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d (``gpuProfiles``:
#:   name and MaxCount per profile for A30, A100, H100, H100 94/96GB, H200, B200, RTX PRO 6000, after
#:   https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html).
#: - ``nvidia-smi mig -lgip`` on real GPUs posted by NVIDIA maintainers: B200 (NVIDIA/mig-parted#166,
#:   NVIDIA/gpu-operator#1242 and #1351), GB200 (NVIDIA/mig-parted#227, the production profiles that replaced the
#:   first GB200 entry in mig-parted commit ebab1f77644a57d5892e04800651896cbc5604ec), H200 (NVIDIA/mig-parted#120),
#:   GH200 144G HBM3e (NVIDIA/mig-parted#139).
#: - GFD product names: ``nvidia-smi`` product names sanitised (vocab.products.sanitise_product_name). B200, GB200
#:   and GB300 as real ``nvidia-smi -q -x`` print them (NVIDIA/k8s-test-infra
#:   tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-{b200,gb200,gb300}.xml @
#:   3b2b865d91b1844baa9feeca2820d2fab65414c7, device IDs 0x2901, 0x2941, 0x31C2); the others as GFD labels of
#:   real nodes show them (shared/research/gpu_ops_facts.md §7; NVIDIA-H200-NVL, NVIDIA-GH200-480GB, NVIDIA-H20,
#:   NVIDIA-GH200-144G-HBM3e, NVIDIA-B300-SXM6-AC, NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition in public code).
#:
#: The config also has ``all-3g.95gb``, ``all-4g.95gb`` and ``all-7g.189gb`` (and GB200's early ``1g.24gb``): the
#: first GB200 profiles, which mig-parted commit ebab1f77 replaced with the production ones (1g.23gb … 7g.186gb);
#: no GPU offers them, so the catalogue does not (``STALE_PRESET_PROFILES``).
CATALOGUE: tuple[MigProduct, ...] = (
    _family(
        "A100-40GB",
        ("A100-SXM4-40GB", "A100-PCIE-40GB", "NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"),
        ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"),
        8,
        """
        1g.5gb 1 7
        1g.5gb+me 1 1
        1g.10gb 2 4
        2g.10gb 2 3
        3g.20gb 4 2
        4g.20gb 4 1
        7g.40gb 8 1
        """,
    ),
    _family(
        "A100-80GB",
        ("A100-SXM4-80GB", "A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-80GB-PCIe"),
        ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"),
        8,
        """
        1g.10gb 1 7
        1g.10gb+me 1 1
        1g.20gb 2 4
        2g.20gb 2 3
        3g.40gb 4 2
        4g.40gb 4 1
        7g.80gb 8 1
        """,
    ),
    _family(
        "H100-80GB",
        ("NVIDIA-H100-80GB-HBM3", "NVIDIA-H100-PCIe", "NVIDIA-H800"),
        ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"),
        8,
        """
        1g.10gb 1 7
        1g.10gb+me 1 1
        1g.20gb 2 4
        2g.20gb 2 3
        3g.40gb 4 2
        4g.40gb 4 1
        7g.80gb 8 1
        """,
    ),
    _family(
        "H100-94GB",
        ("NVIDIA-H100-NVL",),
        ("0x232110DE", "0x233A10DE"),
        8,
        """
        1g.12gb 1 7
        1g.12gb+me 1 1
        1g.24gb 2 4
        2g.24gb 2 3
        3g.47gb 4 2
        4g.47gb 4 1
        7g.94gb 8 1
        """,
    ),
    # H100 96GB: the H100 of GH200 480GB, H20, PG506-96GB (config comment "H100-96GB, PG506-96GB, GH200, H20").
    _family(
        "H100-96GB",
        ("NVIDIA-GH200-480GB", "NVIDIA-H20"),
        ("0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"),
        8,
        """
        1g.12gb 1 7
        1g.12gb+me 1 1
        1g.24gb 2 4
        2g.24gb 2 3
        3g.48gb 4 2
        4g.48gb 4 1
        7g.96gb 8 1
        """,
    ),
    _family(
        "H200-141GB",
        ("NVIDIA-H200", "NVIDIA-H200-NVL"),
        ("0x233510DE", "0x233B10DE"),
        8,
        """
        1g.18gb 1 7
        1g.18gb+me 1 1
        1g.35gb 2 4
        2g.35gb 2 3
        3g.71gb 4 2
        4g.71gb 4 1
        7g.141gb 8 1
        """,
    ),
    _family(
        "GH200-144GB",
        ("NVIDIA-GH200-144G-HBM3e",),
        ("0x234810DE",),
        8,
        """
        1g.18gb 1 7
        1g.18gb+me 1 1
        1g.36gb 2 4
        2g.36gb 2 3
        3g.72gb 4 2
        4g.72gb 4 1
        7g.144gb 8 1
        """,
    ),
    _family(
        "B200-180GB",
        ("NVIDIA-B200",),
        ("0x290110DE",),
        8,
        """
        1g.23gb 1 7
        1g.23gb+me 1 1
        1g.45gb 2 4
        2g.45gb 2 3
        3g.90gb 4 2
        4g.90gb 4 1
        7g.180gb 8 1
        """,
    ),
    _family(
        "GB200-186GB",
        ("NVIDIA-GB200",),
        ("0x294110DE",),
        8,
        """
        1g.23gb 1 7
        1g.23gb+me 1 1
        1g.47gb 2 4
        2g.47gb 2 3
        3g.93gb 4 2
        4g.93gb 4 1
        7g.186gb 8 1
        """,
    ),
    _family(
        "B300-269GB",
        ("NVIDIA-B300-SXM6-AC",),
        ("0x318210DE",),
        8,
        """
        1g.34gb 1 7
        1g.34gb+me 1 1
        1g.67gb 2 4
        2g.67gb 2 3
        3g.135gb 4 2
        4g.135gb 4 1
        7g.269gb 8 1
        """,
    ),
    _family(
        "GB300-278GB",
        ("NVIDIA-GB300",),
        ("0x31C210DE",),
        8,
        """
        1g.35gb 1 7
        1g.35gb+me 1 1
        1g.70gb 2 4
        2g.70gb 2 3
        3g.139gb 4 2
        4g.139gb 4 1
        7g.278gb 8 1
        """,
    ),
    # RTX PRO 6000 Blackwell (Server Edition 0x2BB5 in the config; the MIG User Guide lists the Workstation and
    # Max-Q Workstation editions with the same 96 GB and 4 instances). Variants: +gfx and -me as many as the plain
    # profile, +me and +me.all one (a real -lgip: bigstack-oss/cubecos#312; mig-parted builder_test.go).
    _family(
        "RTX-PRO-6000-96GB",
        (
            "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
            "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
            "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",
        ),
        ("0x2BB510DE",),
        4,
        """
        1g.24gb 1 4
        1g.24gb+me 1 1
        1g.24gb+gfx 1 4
        1g.24gb+me.all 1 1
        1g.24gb-me 1 4
        2g.48gb 2 2
        2g.48gb+gfx 2 2
        2g.48gb+me.all 2 1
        2g.48gb-me 2 2
        4g.96gb 4 1
        4g.96gb+gfx 4 1
        """,
    ),
    # A30: 2g.12gb+me needs an R525 driver or later (MIG User Guide, A30 table).
    _family(
        "A30-24GB",
        ("NVIDIA-A30", "A30"),
        ("0x20B710DE",),
        4,
        """
        1g.6gb 1 4
        1g.6gb+me 1 1
        2g.12gb 2 2
        2g.12gb+me 2 1
        4g.24gb 4 1
        """,
    ),
)

#: Profiles the GPU Operator's default config names in ``all-<profile>`` presets that no GPU offers (see above).
STALE_PRESET_PROFILES = frozenset({"3g.95gb", "4g.95gb", "7g.189gb"})


def product_geometry(product: str) -> MigProduct | None:
    """The MIG geometry for a GFD product name, or None when the product has no MIG (or is not catalogued)."""
    for entry in CATALOGUE:
        if product in entry.products:
            return entry
    return None


@dataclass(frozen=True)
class Placement:
    profile: str
    start: int
    size: int


def place(geometry: MigProduct, counts: dict[str, int]) -> list[Placement] | None:
    """Place ``counts`` (profile -> instances) on one GPU, or None if the hardware could not hold them.

    Larger instances go first and each takes the highest allowed start that is free; this reproduces where
    the driver puts a balanced layout (MIG User Guide: 3g at 4:4, 2g at 2:2, 1g at 0:1 and 1:1). Backtracks,
    so any layout the placement tables allow is found.
    """
    wanted: list[MigProfile] = []
    for name, n in counts.items():
        profile = geometry.profile(name)
        if profile is None or n < 0 or n > profile.max_instances:
            return None
        wanted.extend([profile] * n)
    if sum(p.compute for p in wanted) > geometry.compute_slices:
        return None
    if sum(1 for p in wanted if takes_media_extensions(p.name)) > 1:
        return None
    chosen = _backtrack(geometry, wanted, taken=set())
    if chosen is None:
        return None
    return sorted(chosen, key=lambda p: p.start)


def count_problems(geometry: MigProduct, counts: dict[str, int]) -> list[str]:
    """The rules on how many instances of known profiles one GPU may hold, whatever their slots: each profile's
    instance limit and the GPU's compute slices. One wording for the carve form (``parse_slots``) and the planner
    (``layout_problems``)."""
    errors = [
        f"At most {geometry.profile(name).max_instances} × {name} fit on one {geometry.key}; {n} were asked for."
        for name, n in counts.items()
        if n > geometry.profile(name).max_instances
    ]
    compute = sum(geometry.profile(name).compute * n for name, n in counts.items())
    if compute > geometry.compute_slices:
        errors.append(
            f"The instances need {compute} compute slices; a {geometry.key} has {geometry.compute_slices}, so at "
            f"most {geometry.compute_slices} × {min(geometry.profiles, key=lambda p: p.compute).name}."
        )
    return errors


def layout_problems(geometry: MigProduct, counts: dict[str, int]) -> list[str]:
    """Why one GPU could not carry ``counts`` (profile -> instances) wherever the driver put them; [] if it can.
    The same rules as ``validate_placements`` (profiles the product has, ``count_problems``, one ``+me``), then
    whether ``place`` finds slots for all of them."""
    errors: list[str] = []
    for name, n in counts.items():
        if geometry.profile(name) is None:
            known = ", ".join(p.name for p in geometry.profiles)
            errors.append(f"{geometry.key} has no MIG profile {name} (it has {known}).")
        elif not isinstance(n, int) or isinstance(n, bool) or n < 0:
            errors.append(f"The number of {name} instances must be a whole number of 0 or more; got {n!r}.")
    if errors:
        return errors
    errors = count_problems(geometry, counts)
    media = sum(n for name, n in counts.items() if takes_media_extensions(name))
    if media > 1:
        errors.append(f"Only one instance may take the media extensions (+me, +me.all); {media} were asked for.")
    if not errors and place(geometry, counts) is None:
        wanted = ", ".join(f"{n}×{p}" for p, n in counts.items() if n)
        errors.append(
            f"{wanted} do not fit together on one {geometry.key}: its {geometry.memory_slices} memory slices cannot "
            "hold them at the slots each profile may start at."
        )
    return errors


def _backtrack(geometry: MigProduct, wanted: list[MigProfile], taken: set[int]) -> list[Placement] | None:
    """Place ``wanted`` in the memory slots not in ``taken``: larger instances first, each at the highest
    allowed free start, backtracking until all fit (None if they cannot)."""
    wanted = sorted(wanted, key=lambda p: (-p.size, -p.compute, p.name))
    used = [s in taken for s in range(geometry.memory_slices)]
    chosen: list[Placement] = []

    def search(i: int) -> bool:
        if i == len(wanted):
            return True
        profile = wanted[i]
        for start in sorted(profile.starts, reverse=True):
            span = range(start, start + profile.size)
            if span.stop <= geometry.memory_slices and not any(used[s] for s in span):
                for s in span:
                    used[s] = True
                chosen.append(Placement(profile.name, start, profile.size))
                if search(i + 1):
                    return True
                chosen.pop()
                for s in span:
                    used[s] = False
        return False

    return chosen if search(0) else None


def split_across_gpus(geometry: MigProduct, totals: dict[str, int], gpu_count: int) -> list[dict[str, int]]:
    """Spread node-wide MIG instance counts (what the device plugin advertises) over ``gpu_count`` GPUs.

    Uniform layouts (the GPU Operator presets) divide evenly; otherwise GPUs are filled one by one with as
    many instances as still fit, largest first.
    """
    if gpu_count <= 0:
        return []
    if all(n % gpu_count == 0 for n in totals.values()):
        per_gpu = {p: n // gpu_count for p, n in totals.items() if n}
        if place(geometry, per_gpu) is not None:
            return [dict(per_gpu) for _ in range(gpu_count)]
    remaining = Counter({p: n for p, n in totals.items() if n > 0})
    layouts: list[dict[str, int]] = []
    order = sorted(remaining, key=lambda p: -(geometry.profile(p).size if geometry.profile(p) else 0))
    for _ in range(gpu_count):
        layout: dict[str, int] = {}
        for name in order:
            while remaining[name] > 0:
                trial = {**layout, name: layout.get(name, 0) + 1}
                if place(geometry, trial) is None:
                    break
                layout = trial
                remaining[name] -= 1
        layouts.append(layout)
    return layouts


def geometry_for_device(device_id: str) -> MigProduct | None:
    """The geometry for a PCI device ID as MIG Manager writes it ("0x233010DE"), case-insensitive."""
    wanted = device_id.strip().upper().replace("0X", "0x")
    for entry in CATALOGUE:
        if wanted in entry.pci_device_ids:
            return entry
    return None


def validate_placements(geometry: MigProduct, placements: list[tuple[str, int]]) -> list[str]:
    """Why the hardware would refuse these GPU instances (profile, start slot) on one GPU; [] if it accepts.

    The rules are those of the placement tables (``nvidia-smi mig -lgipp``): each profile only at its allowed
    start slots, within the GPU's memory slices, no two instances sharing a memory slice, at most the
    profile's instance count, compute slices adding up to at most the GPU's, and one ``+me`` instance at most.
    """
    errors: list[str] = []
    owner: dict[int, str] = {}
    counts: Counter[str] = Counter()
    compute = 0
    for name, start in placements:
        profile = geometry.profile(name)
        if profile is None:
            known = ", ".join(p.name for p in geometry.profiles)
            errors.append(f"{geometry.key} has no MIG profile {name} (it has {known}).")
            continue
        counts[name] += 1
        compute += profile.compute
        if start not in profile.starts:
            allowed = ", ".join(map(str, profile.starts))
            errors.append(f"{name} cannot start at slot {start}; it may start at {allowed}.")
            continue
        for slot in range(start, start + profile.size):
            if slot >= geometry.memory_slices:
                errors.append(f"{name} at slot {start} runs past the GPU's {geometry.memory_slices} memory slices.")
                break
            if slot in owner:
                errors.append(f"{name} at slot {start} overlaps {owner[slot]} on memory slice {slot}.")
                break
            owner[slot] = f"{name} at slot {start}"
    for name, n in counts.items():
        profile = geometry.profile(name)
        if profile is not None and n > profile.max_instances:
            errors.append(f"At most {profile.max_instances} × {name} fit on one {geometry.key}; {n} were asked for.")
    if compute > geometry.compute_slices:
        errors.append(f"The instances need {compute} compute slices; a {geometry.key} has {geometry.compute_slices}.")
    media = [name for name, _ in placements if takes_media_extensions(name)]
    if len(media) > 1:
        errors.append(f"Only one instance may take the media extensions (+me, +me.all); {len(media)} were asked for.")
    return errors


def parse_mig_parted(text: str) -> dict[str, list[dict]]:
    """The ``mig-configs`` of a mig-parted config (the YAML MIG Manager reads), checked for shape:
    {config name: [{"device_filter": [ids] or None, "devices": "all" or [indices], "enabled": bool,
    "mig_devices": {profile: count}}]}. Raises ValueError saying what is wrong."""
    document = yaml.safe_load(text)
    if not isinstance(document, dict) or document.get("version") != "v1":
        raise ValueError("A mig-parted config is a mapping with 'version: v1'.")
    configs = document.get(MIG_PARTED_CONFIGS)
    if not isinstance(configs, dict):
        raise ValueError("A mig-parted config needs a 'mig-configs' mapping of config names to lists of entries.")
    out: dict[str, list[dict]] = {}
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise ValueError(f"mig-configs.{name} must be a non-empty list of entries.")
        parsed = []
        for i, entry in enumerate(entries):
            if not isinstance(entry, dict) or "devices" not in entry or "mig-enabled" not in entry:
                raise ValueError(f"mig-configs.{name}[{i}] needs 'devices' and 'mig-enabled'.")
            device_filter = entry.get("device-filter")
            if isinstance(device_filter, str):
                device_filter = [device_filter]
            mig_devices = entry.get("mig-devices") or {}
            if not isinstance(mig_devices, dict) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in mig_devices.values()
            ):
                raise ValueError(f"mig-configs.{name}[{i}].mig-devices must map profile names to counts.")
            parsed.append(
                {
                    "device_filter": device_filter,
                    "devices": entry["devices"],
                    "enabled": bool(entry["mig-enabled"]),
                    "mig_devices": {str(k): v for k, v in mig_devices.items()},
                }
            )
        out[str(name)] = parsed
    return out


# -- GPU Operator presets and mig-parted configs ---------------------------------------------------------------

#: The config every MIG-capable node starts with under the GPU Operator (migManager.config.default).
ALL_DISABLED = "all-disabled"
ALL_ENABLED = "all-enabled"
ALL_BALANCED = "all-balanced"


def preset_name(profile: str) -> str:
    """The GPU Operator's name for "every GPU full of one profile": ``all-1g.10gb``; '+' is written '.'."""
    return "all-" + profile.replace("+", ".")


def balanced_layout(geometry: MigProduct) -> dict[str, int]:
    """The operator's ``all-balanced`` for a product: two of the smallest, one 2g and one 3g instance on the
    8-slice GPUs; two 1g and one 2g on the 4-slice ones (A30, RTX PRO 6000). Plain profiles only, no variants."""
    plain = [p for p in geometry.profiles if not p.variant]
    small = [p for p in plain if p.compute == 1 and p.size == 1]
    two = [p for p in plain if p.compute == 2]
    three = [p for p in plain if p.compute == 3]
    layout = {small[0].name: 2, two[0].name: 1} if small and two else {}
    if three:
        layout[three[0].name] = 1
    return layout


def preset_layouts(geometry: MigProduct) -> dict[str, dict[str, int] | None]:
    """Every preset of the operator's default mig-parted config that applies to this product, as the per-GPU
    ``mig-devices`` (None: MIG disabled). ``all-<profile>`` fills the GPU with as many as the profile allows."""
    presets: dict[str, dict[str, int] | None] = {ALL_DISABLED: None, ALL_ENABLED: {}}
    for profile in geometry.profiles:
        presets[preset_name(profile.name)] = {profile.name: profile.max_instances}
    presets[ALL_BALANCED] = balanced_layout(geometry)
    return presets


def preset_entries(name: str) -> list[dict]:
    """The mig-parted entries of a preset for every catalogued product that has it, each behind a
    ``device-filter`` of the product's PCI device IDs, the way the GPU Operator's default config is written.
    [] if no product has a preset of that name."""
    if name == ALL_DISABLED:
        return [{"devices": "all", "mig-enabled": False}]
    if name == ALL_ENABLED:
        return [{"devices": "all", "mig-enabled": True, "mig-devices": {}}]
    entries = []
    for geometry in CATALOGUE:
        layout = preset_layouts(geometry).get(name)
        if layout:
            entries.append(
                {
                    "device-filter": list(geometry.pci_device_ids),
                    "devices": "all",
                    "mig-enabled": True,
                    "mig-devices": dict(layout),
                }
            )
    return entries


def custom_entries(per_gpu: list[dict[str, int] | None]) -> list[dict]:
    """mig-parted entries for one node's GPUs (index -> mig-devices, None = MIG off), GPUs with the same layout
    grouped in one entry."""
    groups: dict[str, tuple[list[int], dict[str, int] | None]] = {}
    for index, layout in enumerate(per_gpu):
        key = "off" if layout is None else repr(sorted(layout.items()))
        groups.setdefault(key, ([], layout))[0].append(index)
    entries = []
    for indices, layout in groups.values():
        if layout is None:
            entries.append({"devices": indices, "mig-enabled": False})
        else:
            entries.append({"devices": indices, "mig-enabled": True, "mig-devices": dict(layout)})
    return entries


def render_mig_parted(configs: dict[str, list[dict]]) -> str:
    """The YAML MIG Manager reads (``version: v1`` + ``mig-configs``), configs in name order."""
    return yaml.safe_dump({"version": "v1", MIG_PARTED_CONFIGS: dict(sorted(configs.items()))}, sort_keys=False)


#: Longer than any real layout (eight instances with slots are about 120 characters); refused before parsing.
MAX_LAYOUT_CHARS = 400


def parse_slots(geometry: MigProduct, text: str) -> tuple[list[tuple[str, int]], list[str]]:
    """Read one GPU's layout as an admin types it: ``3g.40gb@4, 2g.20gb@2, 1g.10gb, 1g.10gb`` (``off`` or an
    empty field: MIG disabled). A profile without ``@slot`` goes where the driver would put it. Returns the
    placements and what is wrong with the text.

    The input is bounded before any search (audit finding 9): the text's length, each count by the profile's
    instance limit, and (before placing the instances without a slot) each profile's total by its limit and the
    compute slices by the GPU's; counts and slots are ASCII digits."""
    text = text.strip()
    if not text or text.lower() in ("off", "disabled", "none", "-"):
        return [], []
    if len(text) > MAX_LAYOUT_CHARS:
        return [], [
            f"A layout is at most {MAX_LAYOUT_CHARS} characters; a {geometry.key} holds at most "
            f"{geometry.compute_slices} instances."
        ]
    fixed: list[tuple[str, int]] = []
    floating: Counter[str] = Counter()
    errors: list[str] = []
    last_slot = geometry.memory_slices - 1
    for raw in text.replace(";", ",").split(","):
        item = raw.strip()
        if not item:
            continue
        name, _, slot = item.partition("@")
        name = name.strip()
        count = 1
        if "x" in name.split(".")[0] or "×" in name:
            head, _, rest = name.replace("×", "x").partition("x")
            head = head.strip()
            if head and not (head.isascii() and head.isdigit()):
                errors.append(f"{item!r}: the count before x must be a number, e.g. 2x1g.10gb.")
                continue
            if head:
                count, name = int(head), rest.strip()
        profile = geometry.profile(name)
        if profile is None:
            known = ", ".join(p.name for p in geometry.profiles)
            errors.append(f"{geometry.key} has no MIG profile {name!r} (it has {known}).")
            continue
        if not 1 <= count <= profile.max_instances:
            limit = profile.max_instances
            errors.append(f"At most {limit} × {name} fit on one {geometry.key}; {count} were asked for.")
            continue
        if slot.strip():
            slot = slot.strip()
            if not (slot.isascii() and slot.isdigit()) or len(slot) > 3:  # the range: validate_placements
                errors.append(f"{item!r}: the slot after @ must be a number 0-{last_slot}.")
                continue
            fixed.extend([(name, int(slot))] * count)
        else:
            floating[name] += count
    if errors:
        return [], errors
    if not floating:
        return fixed, []  # placed as typed; validate_placements says what the hardware would refuse
    # Bounded before the search: no profile past its instance limit, the compute slices within the GPU's.
    errors = count_problems(geometry, Counter(name for name, _ in fixed) + floating)
    if errors:
        return [], errors
    # Let the placement search put the unplaced instances around the fixed ones.
    taken = {s for name, start in fixed for s in range(start, start + geometry.profile(name).size)}
    placed = _place_around(geometry, taken, floating)
    if placed is None:
        wanted = ", ".join(f"{n}×{p}" for p, n in floating.items())
        return fixed, [f"{wanted} do not fit in the slots left free on this {geometry.key}."]
    return sorted(fixed + placed, key=lambda p: p[1]), []


def _place_around(geometry: MigProduct, taken: set[int], counts: Counter[str]) -> list[tuple[str, int]] | None:
    wanted = [geometry.profile(n) for n, k in counts.items() for _ in range(k)]
    chosen = _backtrack(geometry, wanted, taken)
    return None if chosen is None else [(p.profile, p.start) for p in chosen]


def advertised_after(
    geometry: MigProduct, per_gpu: list[dict[str, int] | None], strategy: str, product_label: str
) -> tuple[dict[str, int], str, list[str]]:
    """What a node will advertise once this layout is applied: (resources, nvidia.com/gpu.product, problems).

    mixed: one ``nvidia.com/mig-<profile>`` per profile, GPUs without MIG stay ``nvidia.com/gpu``; single: every
    MIG device is an ``nvidia.com/gpu`` and the product becomes ``<product>-MIG-<profile>``, which only works when
    every GPU carries the same one profile (GFD labels anything else ``-MIG-INVALID`` and advertises nothing);
    none: MIG devices are not advertised at all."""
    base = product_label.split(MIG_PRODUCT_INFIX)[0].removesuffix(SHARED_PRODUCT_SUFFIX)
    whole = sum(1 for layout in per_gpu if layout is None)
    counts: Counter[str] = Counter()
    for layout in per_gpu:
        counts.update({p: n for p, n in (layout or {}).items() if n})
    mig_gpus = len(per_gpu) - whole
    if strategy == MIG_STRATEGY_MIXED:
        resources = {mig_resource_name(p): n for p, n in sorted(counts.items())}
        if whole:
            resources = {GPU_RESOURCE: whole, **resources}
        return resources, base, []
    if strategy == MIG_STRATEGY_SINGLE:
        if not mig_gpus:
            return {GPU_RESOURCE: whole}, base, []
        if whole or len(counts) != 1 or any(not layout for layout in per_gpu):
            return (
                {},
                mig_product(base, MIG_INVALID_PROFILE),
                [
                    "This node runs the single MIG strategy: every GPU must be MIG-enabled with instances of one "
                    "and the same profile, otherwise GPU Feature Discovery marks it MIG-INVALID "
                    "and it advertises no GPUs. "
                    "Pick a uniform layout, or switch the node to the mixed strategy."
                ],
            )
        profile = next(iter(counts))
        return {GPU_RESOURCE: counts[profile]}, mig_product(base, profile), []
    problems = (
        []
        if not mig_gpus
        else ["This node's device plugin runs without a MIG strategy (none): MIG devices would not be advertised."]
    )
    return {GPU_RESOURCE: len(per_gpu)}, base, problems
