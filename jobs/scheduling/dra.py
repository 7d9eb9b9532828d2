"""DRA devices as admission counts them: the units a node offers per DRA resource class, and what taking some of
one leaves of the others (issue 33, item 3). Pure Python, no Django.

A node NVIDIA's DRA driver publishes offers, per DRA class, devices that admission counts exactly as it counts
device-plugin units (one unit per device): the class's resource on the node (``NodeView.allocatable`` and ``free``)
is named ``resource(device class, profile)`` (``dra:gpu.nvidia.com``, ``dra:mig.nvidia.com/3g.20gb``), so no two
classes of a node share a name and none is an extended resource's.

* Whole GPUs (device class ``gpu.nvidia.com``) and static MIG devices (``mig.nvidia.com``, one class per profile)
  exist as they are: a node offers as many as it publishes untainted, and taking one takes one.
* Dynamic MIG (partitionable GPUs): a GPU publishes every placement of every profile, each consuming counters of
  its GPU's counter set, and the GPU itself, which consumes all of them. The counters are the GPU's memory slices,
  its compute slices and its one set of media extensions (how NVIDIA's driver builds them, cmd/gpu-kubelet-plugin
  partitions.go; the MIG geometry of vocab.mig says where each profile may start and what it takes). Taking an
  instance consumes them on one GPU, so what the other profiles could still carve there drops at once: two jobs
  are never admitted onto counters only one of them can get. An instance goes where kube-scheduler's allocator
  puts it (the devices in slice order: the lowest GPU where it fits, the lowest start there); what a profile can
  still carve on a GPU is counted the same way, so the count is exactly how many could be taken one after another.
  Instances allocated already stay where the inventory saw them; those not yet allocated are counted only if all of
  a node's fit in every order the allocator could meet their claims (``_order_safe``: a claim cannot pin a start,
  and a 3g.20gb met before a 4g.20gb takes the slices the 4g.20gb needs).
* Devices that claims other than the portal's hold (``DraGpuRow.foreign``) are taken from the start, as other pods'
  requests are on a device-plugin node.

* A shared class (an admin gave a DRA class time-slicing or MPS with ``replicas`` users per device,
  gpus.class_admin) counts units of 1/replicas of a device, as the device plugin's time-slicing does: its resource is
  ``shared_resource(base, strategy, replicas)`` (``dra:gpu.nvidia.com~time-slicing*4``), and a node offers
  ``replicas`` units of it per device the base resource has free. Sharing goes through one ResourceClaim whose pods
  share its device (jobs.dra_claims), and a claim is one workload's, so pods of two workloads never share a device:
  ``taking`` u units takes ``ceil(u / replicas)`` devices of the base resource (one call is one workload's pods on
  the node), ``giving_back`` the same, and what a node's work already holds is placed per workload
  (``held_units`` rounds each up to whole devices). Placement therefore never admits work whose claims could not
  all get a device; quota counts the units asked for, as for the device plugin.

``DraDevices`` is a value: taking or giving back returns a new one, so copies of a NodeView (the cycle's, an
estimate's) never share a change. A GPU with a NoSchedule or NoExecute device taint offers nothing (the portal's
claims tolerate no device taint), as the inventory's classes count it (gpus.dra_inventory).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from math import ceil

from gpus.dra_inventory import CLASS_KEY_PREFIX
from vocab.dra import GPU_DEVICE_CLASS, MIG_DEVICE_CLASS
from vocab.mig import MigProduct, product_geometry, takes_media_extensions
from vocab.names import NO_EXECUTE, NO_SCHEDULE

#: A whole GPU taken from a partitionable GPU: it holds every counter.
WHOLE = ""
#: What every DRA resource's name starts with.
DRA_PREFIX = CLASS_KEY_PREFIX


def resource(device_class: str, profile: str = "") -> str:
    """The name admission counts a DRA class's units under on a node: ``dra:gpu.nvidia.com``,
    ``dra:mig.nvidia.com/3g.20gb`` (the class key without its product label)."""
    return f"{CLASS_KEY_PREFIX}{device_class}{'/' + profile if profile else ''}"


WHOLE_GPU = resource(GPU_DEVICE_CLASS)


def mig_resource(profile: str) -> str:
    return resource(MIG_DEVICE_CLASS, profile)


def profile_of(name: str) -> str:
    """The MIG profile of a DRA resource ("" for a whole GPU)."""
    return base_of(name).partition("/")[2]


#: What separates a shared resource's base from its sharing ("dra:gpu.nvidia.com~mps*4"); neither a device class, a
#: MIG profile nor a strategy holds it.
SHARED_MARK = "~"


def shared_resource(base: str, strategy: str, replicas: int) -> str:
    """The resource a shared class's units are counted under: ``replicas`` units per device of ``base``
    (``dra:gpu.nvidia.com~time-slicing*4``, ``dra:mig.nvidia.com/1g.10gb~mps*7``)."""
    return f"{base}{SHARED_MARK}{strategy}*{int(replicas)}"


def base_of(name: str) -> str:
    """The device resource under a shared resource (itself for any other)."""
    return name.partition(SHARED_MARK)[0]


def replicas_of(name: str) -> int:
    """How many units of resource ``name`` one device is (1 unless shared)."""
    sharing = name.partition(SHARED_MARK)[2]
    return int(sharing.rpartition("*")[2]) if sharing else 1


def devices_for(name: str, units: int) -> int:
    """The devices one workload's ``units`` of ``name`` hold on a node: whole devices, rounded up for a shared
    resource (its claims' pods share their devices among themselves only)."""
    replicas = replicas_of(name)
    return units if replicas == 1 else ceil(units / replicas) if units >= 0 else -ceil(-units / replicas)


def held_units(name: str, units: int) -> int:
    """What one workload holding ``units`` of ``name`` on a node takes from it, in units of ``name``: for a shared
    resource, the whole devices its claims hold (so summing over a node's work counts each claim's device)."""
    return devices_for(name, units) * replicas_of(name)


def offers_nothing(taints: Iterable[dict]) -> bool:
    """Whether a device's taints keep new claims off it (NoSchedule, NoExecute)."""
    return any(t.get("effect") in (NO_SCHEDULE, NO_EXECUTE) for t in taints)


@dataclass(frozen=True)
class DraGpuRow:
    """One GPU of a node as the inventory records it (gpus.models.GPU with ``dra``): the input of ``DraDevices.of``."""

    #: Its device taints.
    taints: tuple = ()
    #: Static MIG devices carved from it, by profile (a GPU with any is not published whole).
    static: tuple[str, ...] = ()
    #: Partitionable (dynamic MIG): the profiles it publishes placements of.
    partitionable: bool = False
    profiles: tuple[str, ...] = ()
    #: What claims that are not the portal's hold of it: (profile, start) per device, profile ``WHOLE`` for the GPU
    #: itself (a static MIG device by its profile).
    foreign: tuple[tuple[str, int], ...] = ()
    #: Partitionable: what the portal's claims hold of it, allocated: (profile, start) per device.
    placed: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class _Gpu:
    """A partitionable GPU's instances taken: (profile, start) pairs, or the whole GPU. ``taken``: those admission
    placed that no allocation pins yet (where the allocator puts them depends on the order it meets their claims);
    ``placed``: the portal's allocated ones, ``foreign``: those of claims not the portal's, both where they are."""

    taken: tuple[tuple[str, int], ...] = ()
    placed: tuple[tuple[str, int], ...] = ()
    foreign: tuple[tuple[str, int], ...] = ()

    @property
    def held(self) -> tuple[tuple[str, int], ...]:
        return (*self.foreign, *self.placed, *self.taken)

    @property
    def whole(self) -> bool:
        return any(profile == WHOLE for profile, _ in self.held)

    @property
    def fixed(self) -> tuple[tuple[str, int], ...]:
        """What allocations hold of it, in a canonical order."""
        return tuple(sorted((*self.foreign, *self.placed)))

    def starts(self, product_label: str, profile: str) -> tuple[int, ...]:
        """The starts at which instances of ``profile`` could still be carved here, taken one after another from
        the lowest (what is left of the counters after each)."""
        return () if self.whole else _starts(product_label, tuple(sorted(self.held)), profile)


Layout = tuple[tuple[tuple[str, int], ...], ...]
#: The most instances not yet allocated a node's partitionable GPUs take when they are of more than one profile (of
#: one profile they are alike, so order cannot matter and any number that fits is taken): checking every order costs
#: up to n! first-fits, so beyond this a different profile waits until the inventory sees the pending ones allocated.
MIXED_PENDING = 4


def _first_fit(product_label: str, layout: Layout, profile: str) -> Layout | None:
    """``layout`` (per GPU, in device order, what is held) after one instance of ``profile`` (``WHOLE``: a GPU) is
    allocated where the allocator puts it: the lowest GPU it fits on, the lowest start there; None if none."""
    for i, held in enumerate(layout):
        if any(p == WHOLE for p, _ in held):
            continue
        if profile == WHOLE:
            if held:
                continue
            start = 0
        else:
            starts = _starts(product_label, held, profile)
            if not starts:
                continue
            start = starts[0]
        return (*layout[:i], tuple(sorted((*held, (profile, start)))), *layout[i + 1 :])
    return None


@lru_cache(maxsize=65536)
def _order_safe(product_label: str, layout: Layout, pending: tuple[tuple[str, int], ...]) -> bool:
    """Whether instances not yet allocated (``pending``: profile → how many) all get a device from what ``layout``
    leaves, whatever order the allocator meets their claims in (each taken first-fit)."""
    for i, (profile, n) in enumerate(pending):
        after = _first_fit(product_label, layout, profile)
        if after is None:
            return False
        rest = (*pending[:i], (profile, n - 1), *pending[i + 1 :]) if n > 1 else (*pending[:i], *pending[i + 1 :])
        if not _order_safe(product_label, after, rest):
            return False
    return True


@lru_cache(maxsize=65536)
def _starts(product_label: str, taken: tuple[tuple[str, int], ...], name: str) -> tuple[int, ...]:
    """``_Gpu.starts`` for a GPU holding ``taken`` (a few hundred layouts a GPU can hold: remembered)."""
    geometry = _geometry(product_label)
    profile = geometry.profile(name)
    slots: set[int] = set()
    compute, media = 0, False
    for held, start in taken:
        carved = geometry.profile(held)
        slots.update(range(start, start + carved.size))
        compute += carved.compute
        media = media or takes_media_extensions(held)
    out = []
    for start in sorted(profile.starts):
        span = set(range(start, start + profile.size))
        if start + profile.size > geometry.memory_slices or span & slots:
            continue
        if compute + profile.compute > geometry.compute_slices or (media and takes_media_extensions(name)):
            break
        out.append(start)
        slots |= span
        compute += profile.compute
        media = media or takes_media_extensions(name)
    return tuple(out)


@cache
def _geometry(product_label: str) -> MigProduct | None:
    return product_geometry(product_label)


@dataclass(frozen=True)
class DraDevices:
    """A node's DRA devices and what of them is taken (by the portal's active work, and as admission places more).
    Values: ``taking`` and ``giving_back`` return a new one."""

    product_label: str
    #: Untainted GPUs that can only be claimed whole (not partitionable, no static MIG), and how many are taken.
    plain: int = 0
    plain_taken: int = 0
    #: Untainted static MIG devices per profile, and how many are taken.
    static: tuple[tuple[str, int], ...] = ()
    static_taken: tuple[tuple[str, int], ...] = ()
    #: Untainted partitionable GPUs (in device order) with what is taken of each, and the profiles they publish
    #: (those vocab.mig knows the geometry of).
    gpus: tuple[_Gpu, ...] = ()
    profiles: tuple[str, ...] = ()
    #: Units taken beyond what the devices hold (the portal's work on a node that offers less than it holds now):
    #: resource → units; they count against what is free.
    over: tuple[tuple[str, int], ...] = ()
    #: The shared resources (``shared_resource``) the node's devices are offered as too.
    shared: tuple[str, ...] = ()
    #: The portal's allocated instances on the partitionable GPUs (``_Gpu.placed``), per resource: ``holding``
    #: counts them as part of what the portal's work holds.
    placed: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, product_label: str, rows: Iterable[DraGpuRow], shared: Iterable[str] = ()) -> DraDevices:
        """A node's devices from its GPU rows, less what allocated claims hold of them (those not the portal's, and
        the portal's own on partitionable GPUs, where they are); ``shared``: the shared resources of the fleet's
        classes (those whose base the node offers are offered too)."""
        geometry = _geometry(product_label)
        plain, plain_taken, static, static_taken, gpus, profiles = 0, 0, {}, {}, [], set()
        placed: dict[str, int] = {}
        for row in rows:
            if offers_nothing(row.taints):
                continue
            if row.partitionable and geometry is not None:
                known = {p for p in row.profiles if geometry.profile(p) is not None} | {WHOLE}
                gpus.append(
                    _Gpu(
                        placed=tuple((p, s) for p, s in row.placed if p in known),
                        foreign=tuple((p, s) for p, s in row.foreign if p in known),
                    )
                )
                profiles.update(p for p in row.profiles if geometry.profile(p) is not None)
                for profile, _ in row.placed:
                    name = WHOLE_GPU if profile == WHOLE else mig_resource(profile)
                    placed[name] = placed.get(name, 0) + 1
            elif row.static:
                for profile in row.static:
                    static[profile] = static.get(profile, 0) + 1
                for profile, _ in row.foreign:
                    static_taken[profile] = static_taken.get(profile, 0) + 1
            else:  # a whole GPU (a partitionable one of a product vocab.mig has no geometry for: whole only)
                plain += 1
                plain_taken += 1 if row.foreign else 0
        return cls(
            product_label,
            plain=plain,
            plain_taken=plain_taken,
            static=tuple(sorted(static.items())),
            static_taken=tuple(sorted(static_taken.items())),
            gpus=tuple(gpus),
            profiles=tuple(sorted(profiles)),
            shared=tuple(sorted(set(shared))),
            placed=tuple(sorted(placed.items())),
        )

    @property
    def geometry(self) -> MigProduct | None:
        return _geometry(self.product_label)

    def allocatable(self) -> dict[str, int]:
        """Units per resource on the node with nothing taken (each resource alone)."""
        empty = replace(self, plain_taken=0, static_taken=(), gpus=tuple(_Gpu() for _ in self.gpus), over=())
        return empty.free()

    def free(self) -> dict[str, int]:
        """Units per resource that could still be taken now, each resource alone (taking some of one dynamic MIG
        profile lowers what the others and the whole GPU have: ``taking`` says by how much)."""
        out: dict[str, int] = {}
        if self.plain or self.gpus:
            out[WHOLE_GPU] = self.plain - self.plain_taken + self._more(WHOLE)
        taken = dict(self.static_taken)
        for profile, n in self.static:
            out[mig_resource(profile)] = n - taken.get(profile, 0)
        for name in self.profiles:
            out[mig_resource(name)] = out.get(mig_resource(name), 0) + self._more(name)
        for name, units in self.over:
            out[name] = out.get(name, 0) - units
        for name in self.shared:
            if base_of(name) in out:
                out[name] = out[base_of(name)] * replicas_of(name)
        return out

    def _more(self, profile: str) -> int:
        """How many more instances of ``profile`` (``WHOLE``: GPUs) the partitionable GPUs take, one after
        another, each only where ``_carve`` takes it."""
        return _more(self.product_label, self.profiles, self.gpus, profile) if self.gpus else 0

    def holding(self, held: dict[str, int]) -> DraDevices:
        """The devices after what a node's work already holds (resource → units) is placed: the portal's allocated
        instances (``placed``) are where the inventory saw them; the rest goes whole GPUs first, then MIG instances
        largest first (as a layout is carved, so the small ones fill around the large), as instances no allocation
        pins yet."""
        geometry = self.geometry

        def order(name: str) -> tuple:
            profile = geometry.profile(profile_of(name)) if geometry is not None else None
            return (name != WHOLE_GPU, -(profile.size if profile else 0), -(profile.compute if profile else 0), name)

        devices: dict[str, int] = {}
        for name, units in held.items():
            devices[base_of(name)] = devices.get(base_of(name), 0) + devices_for(name, units)
        for name, n in self.placed:
            if name in devices:
                devices[name] -= min(n, devices[name])
        out = self
        for name in sorted(devices, key=order):
            out = out._taking(name, devices[name], checked=False)
        return out

    def taking(self, name: str, units: int) -> DraDevices:
        """The devices after ``units`` of resource ``name`` are taken (one at a time, each where the allocator
        would put it); what does not fit is counted as ``over``. Units of a shared resource are one workload's:
        they take ``devices_for`` whole devices of its base."""
        if base_of(name) != name:
            return self.taking(base_of(name), devices_for(name, units))
        return self._taking(name, units, checked=True)

    def _taking(self, name: str, units: int, checked: bool) -> DraDevices:
        devices = self
        for _ in range(units):
            devices = devices._take_one(name, checked)
        return devices

    def giving_back(self, name: str, units: int) -> DraDevices:
        """The mirror of ``taking``: ``units`` of ``name`` are handed back (what was over first, then the most
        recently placed)."""
        if base_of(name) != name:
            return self.giving_back(base_of(name), devices_for(name, units))
        devices = self
        for _ in range(units):
            devices = devices._give_back_one(name)
        return devices

    def _pending(self, profile: str = "", more: int = 0) -> tuple[tuple[str, int], ...]:
        """The instances admission placed that no allocation pins yet (profile → how many), with ``more`` of
        ``profile``."""
        counts: dict[str, int] = {}
        for gpu in self.gpus:
            for held, _ in gpu.taken:
                counts[held] = counts.get(held, 0) + 1
        if more:
            counts[profile] = counts.get(profile, 0) + more
        return tuple(sorted(counts.items()))

    def _carve(self, profile: str, checked: bool) -> DraDevices | None:
        """One more instance of ``profile`` (``WHOLE``: a GPU) on the partitionable GPUs, where the allocator puts
        it; None where it does not fit. ``checked``: only if every instance not yet allocated then still gets a
        device whatever order the allocator meets their claims in (``_order_safe``): kube-scheduler allocates each
        pod's claims on its own, first come first served, and a claim cannot name the placement admission chose
        (the driver's placement devices carry no attribute a selector could tell their start by)."""
        if profile != WHOLE and profile not in self.profiles:
            return None
        spots = (
            (i, (0,) if profile == WHOLE else gpu.starts(self.product_label, profile))
            for i, gpu in enumerate(self.gpus)
            if not gpu.whole and not (profile == WHOLE and gpu.held)
        )
        i, starts = next(((i, starts) for i, starts in spots if starts), (-1, ()))
        if not starts:
            return None
        gpu = self.gpus[i]
        if checked:
            pending = self._pending(profile, 1)
            if len(pending) > 1 and sum(n for _, n in pending) > MIXED_PENDING:
                return None
            if not _order_safe(self.product_label, tuple(g.fixed for g in self.gpus), pending):
                return None
        return self._with_gpu(i, replace(gpu, taken=(*gpu.taken, (profile, starts[0]))))

    def _take_one(self, name: str, checked: bool = True) -> DraDevices:
        if name == WHOLE_GPU:
            if self.plain_taken < self.plain:
                return replace(self, plain_taken=self.plain_taken + 1)
            return self._carve(WHOLE, checked) or self._over(name, +1)
        profile_name = profile_of(name)
        static, taken = dict(self.static), dict(self.static_taken)
        if taken.get(profile_name, 0) < static.get(profile_name, 0):
            taken[profile_name] = taken.get(profile_name, 0) + 1
            return replace(self, static_taken=tuple(sorted(taken.items())))
        return self._carve(profile_name, checked) or self._over(name, +1)

    def _give_back_one(self, name: str) -> DraDevices:
        if dict(self.over).get(name, 0) > 0:
            return self._over(name, -1)
        profile_name = WHOLE if name == WHOLE_GPU else profile_of(name)
        for field in ("taken", "placed"):
            for i in reversed(range(len(self.gpus))):
                held = getattr(self.gpus[i], field)
                for j in reversed(range(len(held))):
                    if held[j][0] == profile_name:
                        return self._with_gpu(i, replace(self.gpus[i], **{field: held[:j] + held[j + 1 :]}))
        if name == WHOLE_GPU:
            return replace(self, plain_taken=max(0, self.plain_taken - 1))
        taken = dict(self.static_taken)
        if taken.get(profile_name, 0) > 0:
            taken[profile_name] -= 1
        return replace(self, static_taken=tuple(sorted(taken.items())))

    def _with_gpu(self, i: int, gpu: _Gpu) -> DraDevices:
        return replace(self, gpus=(*self.gpus[:i], gpu, *self.gpus[i + 1 :]))

    def _over(self, name: str, sign: int) -> DraDevices:
        over = dict(self.over)
        over[name] = over.get(name, 0) + sign
        return replace(self, over=tuple(sorted((k, v) for k, v in over.items() if v)))


@lru_cache(maxsize=65536)
def _more(product_label: str, profiles: tuple[str, ...], gpus: tuple[_Gpu, ...], profile: str) -> int:
    """``DraDevices._more`` for partitionable GPUs ``gpus`` (nodes alike share the answer: remembered)."""
    devices, n = DraDevices(product_label, gpus=gpus, profiles=profiles), 0
    while (devices := devices._carve(profile, checked=True)) is not None:
        n += 1
    return n
