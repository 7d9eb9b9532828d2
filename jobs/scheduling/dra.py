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


@dataclass(frozen=True)
class _Gpu:
    """A partitionable GPU's instances taken: (profile, start) pairs, or the whole GPU."""

    taken: tuple[tuple[str, int], ...] = ()

    @property
    def whole(self) -> bool:
        return any(profile == WHOLE for profile, _ in self.taken)

    def starts(self, product_label: str, profile: str) -> tuple[int, ...]:
        """The starts at which instances of ``profile`` could still be carved here, taken one after another from
        the lowest (what is left of the counters after each)."""
        return () if self.whole else _starts(product_label, self.taken, profile)


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

    @classmethod
    def of(cls, product_label: str, rows: Iterable[DraGpuRow], shared: Iterable[str] = ()) -> DraDevices:
        """A node's devices from its GPU rows, nothing taken; ``shared``: the shared resources of the fleet's
        classes (those whose base the node offers are offered too)."""
        geometry = _geometry(product_label)
        plain, static, dynamic, profiles = 0, {}, 0, set()
        for row in rows:
            if offers_nothing(row.taints):
                continue
            if row.partitionable and geometry is not None:
                dynamic += 1
                profiles.update(p for p in row.profiles if geometry.profile(p) is not None)
            elif row.static:
                for profile in row.static:
                    static[profile] = static.get(profile, 0) + 1
            else:  # a whole GPU (a partitionable one of a product vocab.mig has no geometry for: whole only)
                plain += 1
        return cls(
            product_label,
            plain=plain,
            static=tuple(sorted(static.items())),
            gpus=tuple(_Gpu() for _ in range(dynamic)),
            profiles=tuple(sorted(profiles)),
            shared=tuple(sorted(set(shared))),
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
            out[WHOLE_GPU] = self.plain - self.plain_taken + sum(1 for g in self.gpus if not g.taken)
        taken = dict(self.static_taken)
        for profile, n in self.static:
            out[mig_resource(profile)] = n - taken.get(profile, 0)
        for name in self.profiles:
            carvable = sum(len(g.starts(self.product_label, name)) for g in self.gpus)
            out[mig_resource(name)] = out.get(mig_resource(name), 0) + carvable
        for name, units in self.over:
            out[name] = out.get(name, 0) - units
        for name in self.shared:
            if base_of(name) in out:
                out[name] = out[base_of(name)] * replicas_of(name)
        return out

    def holding(self, held: dict[str, int]) -> DraDevices:
        """The devices after what a node's work already holds (resource → units) is placed: whole GPUs first, then
        MIG instances largest first (as a layout is carved, so the small ones fill around the large)."""
        geometry = self.geometry

        def order(name: str) -> tuple:
            profile = geometry.profile(profile_of(name)) if geometry is not None else None
            return (name != WHOLE_GPU, -(profile.size if profile else 0), -(profile.compute if profile else 0), name)

        devices = self
        for name in sorted(held, key=lambda name: order(base_of(name))):
            devices = devices.taking(name, held[name])
        return devices

    def taking(self, name: str, units: int) -> DraDevices:
        """The devices after ``units`` of resource ``name`` are taken (one at a time, each where the allocator
        would put it); what does not fit is counted as ``over``. Units of a shared resource are one workload's:
        they take ``devices_for`` whole devices of its base."""
        if base_of(name) != name:
            return self.taking(base_of(name), devices_for(name, units))
        devices = self
        for _ in range(units):
            devices = devices._take_one(name)
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

    def _take_one(self, name: str) -> DraDevices:
        if name == WHOLE_GPU:
            if self.plain_taken < self.plain:
                return replace(self, plain_taken=self.plain_taken + 1)
            for i, gpu in enumerate(self.gpus):
                if not gpu.taken:
                    return self._with_gpu(i, _Gpu(((WHOLE, 0),)))
            return self._over(name, +1)
        profile_name = profile_of(name)
        static, taken = dict(self.static), dict(self.static_taken)
        if taken.get(profile_name, 0) < static.get(profile_name, 0):
            taken[profile_name] = taken.get(profile_name, 0) + 1
            return replace(self, static_taken=tuple(sorted(taken.items())))
        if profile_name in self.profiles:
            for i, gpu in enumerate(self.gpus):
                starts = gpu.starts(self.product_label, profile_name)
                if starts:
                    return self._with_gpu(i, _Gpu((*gpu.taken, (profile_name, starts[0]))))
        return self._over(name, +1)

    def _give_back_one(self, name: str) -> DraDevices:
        if dict(self.over).get(name, 0) > 0:
            return self._over(name, -1)
        if name == WHOLE_GPU:
            for i in reversed(range(len(self.gpus))):
                if self.gpus[i].whole:
                    return self._with_gpu(i, _Gpu())
            return replace(self, plain_taken=max(0, self.plain_taken - 1))
        profile_name = profile_of(name)
        for i in reversed(range(len(self.gpus))):
            taken = self.gpus[i].taken
            for j in reversed(range(len(taken))):
                if taken[j][0] == profile_name:
                    return self._with_gpu(i, _Gpu(taken[:j] + taken[j + 1 :]))
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
