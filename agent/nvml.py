"""One collection tick: every GPU of the node, and every MIG device of a MIG-enabled GPU, read through NVML.

The NVML module is a parameter (``NvmlCollector(nvml=...)``): the real ``pynvml`` by default, the fake of the
tests otherwise. Only its public API is used, as nvidia-ml-py 13.x spells it (shared/research/gpu_ops_facts.md §6).

How NVML fails, and what a sample says then:

- ``NVMLError_NotSupported`` (utilisation of a MIG-enabled GPU and of every MIG device; power and temperature
  of a MIG device; MIG mode of a GPU without MIG), ``NoPermission``, ``NoData``: that one field is null.
- ``NVMLError_GpuIsLost``: the GPU fell off the bus. Its sample says ``"lost": true`` with no metrics, and its
  MIG devices are not read; the other GPUs are.
- ``NVMLError_DriverNotLoaded`` / ``LibraryNotFound`` / ``Uninitialized`` (at init, or mid-run when the driver
  is being upgraded): :class:`NvmlUnavailable`, which the runner answers by retrying init with backoff.
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)

MIB = 1024 * 1024

# "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", "... MIG 1g.10gb+me"
MIG_PROFILE_IN_NAME = re.compile(r"\bMIG\s+((?:\d+c\.)?\d+g\.\d+gb(?:\+[a-z]+)?)\b", re.IGNORECASE)

# The errors that mean "NVML itself is not usable now": the driver is missing, unloaded or being replaced.
UNAVAILABLE_ERRORS = ("NVMLError_DriverNotLoaded", "NVMLError_LibraryNotFound", "NVMLError_Uninitialized")
# The errors that mean "this one value cannot be read here": the field is reported as null.
FIELD_ERRORS = ("NVMLError_NotSupported", "NVMLError_NoPermission", "NVMLError_NoData", "NVMLError_NotFound")


class NvmlUnavailable(Exception):
    """NVML cannot be used at all right now (no driver, no library, not initialised). ``hint`` says what to check."""

    def __init__(self, error: Exception, hint: str):
        super().__init__(f'{hint}; NVML said "{error}"')
        self.error = error
        self.hint = hint


@dataclass
class DeviceReading:
    """One GPU (``mig_uuid`` None) or one MIG device, as one tick read it.

    ``to_sample`` gives the contract's fields; the rest (index, name, PCI bus id, placement) is inventory the
    agent logs at start and prints with ``--inventory``.
    """

    ts: str
    gpu_uuid: str
    mig_uuid: str | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    mig_profile: str | None = None
    util_pct: float | None = None
    mem_used_mb: int | None = None
    mem_total_mb: int | None = None
    power_w: float | None = None
    #: Energy since the driver loaded, millijoules (whole GPUs; NVML gives none for a MIG device).
    energy_mj: int | None = None
    temp_c: float | None = None
    lost: bool = False
    processes: list[dict[str, Any]] = field(default_factory=list)
    # Inventory, not sent.
    index: int | None = None
    name: str | None = None
    pci_bus_id: str | None = None
    mig_enabled: bool | None = None
    placement_start: int | None = None
    placement_size: int | None = None

    def to_sample(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "gpu_uuid": self.gpu_uuid,
            "gpu_index": self.index,
            "mig_uuid": self.mig_uuid,
            "gpu_instance_id": self.gpu_instance_id,
            "mig_profile": self.mig_profile,
            "util_pct": self.util_pct,
            "mem_used_mb": self.mem_used_mb,
            "mem_total_mb": self.mem_total_mb,
            "power_w": self.power_w,
            "energy_mj": self.energy_mj,
            "temp_c": self.temp_c,
            "lost": self.lost,
            "processes": self.processes,
        }

    def to_inventory(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "gpu_uuid": self.gpu_uuid,
            "mig_uuid": self.mig_uuid,
            "name": self.name,
            "pci_bus_id": self.pci_bus_id,
            "mem_total_mb": self.mem_total_mb,
            "mig_enabled": self.mig_enabled,
            "gpu_instance_id": self.gpu_instance_id,
            "compute_instance_id": self.compute_instance_id,
            "mig_profile": self.mig_profile,
            "placement": None
            if self.placement_start is None
            else {"start": self.placement_start, "size": self.placement_size},
            "lost": self.lost,
        }


def _text(value: Any) -> str:
    """pynvml ≥ 11.5 returns str; older releases returned bytes."""
    return value.decode() if isinstance(value, bytes) else str(value)


def mig_profile_name(device_name: str | None, attributes: Any = None) -> str | None:
    """The MIG profile ("1g.10gb", "1c.3g.40gb") of a MIG device.

    NVML names a MIG device after its parent plus the profile ("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), which is the
    name the device plugin advertises too. Without it, the profile is rebuilt from the device attributes: the GPU
    instance's slice count and its memory rounded up to whole GB (A100-40GB 1g: 4864 MB → "5gb"), prefixed by the
    compute slices when the compute instance is smaller than its GPU instance.
    """
    if device_name:
        match = MIG_PROFILE_IN_NAME.search(device_name)
        if match:
            return match.group(1).lower()
    if attributes is None:
        return None
    slices = getattr(attributes, "gpuInstanceSliceCount", 0)
    memory_mb = getattr(attributes, "memorySizeMB", 0)
    if not slices or not memory_mb:
        return None
    name = f"{slices}g.{math.ceil(memory_mb / 1024)}gb"
    compute = getattr(attributes, "computeInstanceSliceCount", slices)
    return name if not compute or compute == slices else f"{compute}c.{name}"


class NvmlCollector:
    """Reads the node's GPUs through an NVML module (``pynvml`` or a fake with the same API)."""

    def __init__(self, nvml: Any = None):
        if nvml is None:
            import pynvml as nvml  # noqa: PLC0415 - only where the agent really runs
        self.nvml = nvml
        self.ready = False
        self._unavailable = tuple(getattr(nvml, name) for name in UNAVAILABLE_ERRORS if hasattr(nvml, name))
        self._field_errors = tuple(getattr(nvml, name) for name in FIELD_ERRORS if hasattr(nvml, name))
        self._lost = nvml.NVMLError_GpuIsLost
        self._warned: set[tuple[str, str]] = set()

    # Life cycle ---------------------------------------------------------------------------------------
    def start(self) -> None:
        """nvmlInit. Raises :class:`NvmlUnavailable` with a hint when the driver or library is missing."""
        try:
            self.nvml.nvmlInit()
        except self._unavailable as error:
            raise NvmlUnavailable(error, self._hint(error)) from error
        self.ready = True

    def stop(self) -> None:
        if not self.ready:
            return
        self.ready = False
        try:
            self.nvml.nvmlShutdown()
        except self.nvml.NVMLError as error:  # already gone with the driver: nothing to release
            log.debug("nvmlShutdown: %s", error)

    def _hint(self, error: Exception) -> str:
        if isinstance(error, getattr(self.nvml, "NVMLError_LibraryNotFound", ())):
            return (
                "libnvidia-ml.so.1 is not in the container: run the agent with runtimeClassName nvidia (or "
                "NVIDIA_VISIBLE_DEVICES=all under the NVIDIA container toolkit) on a node with the NVIDIA driver"
            )
        if isinstance(error, getattr(self.nvml, "NVMLError_DriverNotLoaded", ())):
            return "the NVIDIA kernel driver is not loaded on this node (still installing or being upgraded?)"
        return "NVML is not initialised"

    # Collection ---------------------------------------------------------------------------------------
    def collect(self, ts: str) -> list[DeviceReading]:
        """One reading per GPU and per MIG device. Raises :class:`NvmlUnavailable` if NVML went away mid-run."""
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
            readings: list[DeviceReading] = []
            for index in range(count):
                readings.extend(self._read_gpu(index, ts))
            return readings
        except self._unavailable as error:
            self.ready = False
            raise NvmlUnavailable(error, self._hint(error)) from error
        except self.nvml.NVMLError as error:  # the GPU count itself failed: treat NVML as broken and restart it
            self.ready = False
            raise NvmlUnavailable(error, "NVML could not count the GPUs") from error

    def _read_gpu(self, index: int, ts: str) -> list[DeviceReading]:
        nvml = self.nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        except self._lost:
            # Without a UUID the portal cannot tell which GPU this is; the next ticks say it by its absence.
            log.error("GPU %d is lost (it fell off the bus before its UUID could be read); it is skipped.", index)
            return []
        except self._unavailable:
            raise
        except self.nvml.NVMLError as error:  # NoPermission, Unknown …: skip this GPU, keep the others
            log.error("GPU %d cannot be opened (%s); it is skipped.", index, error)
            return []
        reading = DeviceReading(ts=ts, gpu_uuid=uuid, index=index)
        try:
            reading.name = self._optional(uuid, "name", lambda: _text(nvml.nvmlDeviceGetName(handle)))
            reading.pci_bus_id = self._optional(uuid, "pci", lambda: _text(nvml.nvmlDeviceGetPciInfo(handle).busId))
            self._read_metrics(reading, handle)
            mode = self._optional(uuid, "mig_mode", lambda: nvml.nvmlDeviceGetMigMode(handle))
            reading.mig_enabled = bool(mode is not None and mode[0] == nvml.NVML_DEVICE_MIG_ENABLE)
            migs = self._read_mig_devices(reading, handle) if reading.mig_enabled else []
        except self._lost:
            log.error(
                "GPU %d (%s) is lost: NVML says it fell off the bus. Reported as lost, without metrics.", index, uuid
            )
            return [
                DeviceReading(
                    ts=ts, gpu_uuid=uuid, index=index, name=reading.name, pci_bus_id=reading.pci_bus_id, lost=True
                )
            ]
        return [reading, *migs]

    def _read_mig_devices(self, parent: DeviceReading, handle: Any) -> list[DeviceReading]:
        nvml = self.nvml
        slots = self._optional(parent.gpu_uuid, "mig_count", lambda: nvml.nvmlDeviceGetMaxMigDeviceCount(handle))
        readings = []
        for slot in range(slots or 0):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                mig_uuid = _text(nvml.nvmlDeviceGetUUID(mig))
            except (nvml.NVMLError_NotFound, nvml.NVMLError_InvalidArgument):
                continue  # an empty slot: fewer instances than the maximum
            except (self._lost, *self._unavailable):
                raise
            except nvml.NVMLError as error:
                log.error("%s: MIG device %d cannot be opened (%s); it is skipped.", parent.gpu_uuid, slot, error)
                continue
            reading = DeviceReading(ts=parent.ts, gpu_uuid=parent.gpu_uuid, mig_uuid=mig_uuid, index=parent.index)
            reading.gpu_instance_id = self._optional(mig_uuid, "gi", lambda m=mig: nvml.nvmlDeviceGetGpuInstanceId(m))
            reading.compute_instance_id = self._optional(
                mig_uuid, "ci", lambda m=mig: nvml.nvmlDeviceGetComputeInstanceId(m)
            )
            reading.name = self._optional(mig_uuid, "name", lambda m=mig: _text(nvml.nvmlDeviceGetName(m)))
            reading.mig_profile = mig_profile_name(reading.name)
            if reading.mig_profile is None:
                attributes = self._optional(mig_uuid, "attributes", lambda m=mig: nvml.nvmlDeviceGetAttributes(m))
                reading.mig_profile = mig_profile_name(None, attributes)
            self._read_placement(reading, handle)
            self._read_metrics(reading, mig)
            readings.append(reading)
        return readings

    def _read_placement(self, reading: DeviceReading, parent_handle: Any) -> None:
        """Where the GPU instance sits (start/size in memory slices). Needs the GPU instance handle, which NVML may
        refuse to an unprivileged process; then the placement stays unknown."""
        nvml = self.nvml
        if reading.gpu_instance_id is None or not hasattr(nvml, "nvmlDeviceGetGpuInstanceById"):
            return
        gpu_instance_id = reading.gpu_instance_id

        def placement():
            instance = nvml.nvmlDeviceGetGpuInstanceById(parent_handle, gpu_instance_id)
            return nvml.nvmlGpuInstanceGetInfo(instance).placement

        where = self._optional(reading.mig_uuid, "placement", placement)
        if where is not None:
            reading.placement_start, reading.placement_size = int(where.start), int(where.size)

    def _read_metrics(self, reading: DeviceReading, handle: Any) -> None:
        nvml = self.nvml
        key = reading.mig_uuid or reading.gpu_uuid
        utilisation = self._optional(key, "util", lambda: nvml.nvmlDeviceGetUtilizationRates(handle))
        reading.util_pct = None if utilisation is None else float(utilisation.gpu)
        memory = self._memory(key, handle)
        if memory is not None:
            reading.mem_used_mb = int(memory.used) // MIB
            reading.mem_total_mb = int(memory.total) // MIB
        milliwatts = self._optional(key, "power", lambda: nvml.nvmlDeviceGetPowerUsage(handle))
        reading.power_w = None if milliwatts is None else round(milliwatts / 1000.0, 3)
        if reading.mig_uuid is None:
            energy = self._optional(key, "energy", lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle))
            reading.energy_mj = None if energy is None else int(energy)
        celsius = self._optional(key, "temp", lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU))
        reading.temp_c = None if celsius is None else float(celsius)
        processes = self._optional(key, "processes", lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        reading.processes = [
            {"pid": int(p.pid), "used_mb": None if p.usedGpuMemory is None else int(p.usedGpuMemory) // MIB}
            for p in processes or []
        ]

    def _memory(self, key: str, handle: Any) -> Any:
        """Memory in the v2 layout where the driver has it: its ``used`` leaves out what the driver reserves for
        itself (518 MiB on an idle A100-40GB), which the v1 ``used`` counts. Older drivers: v1."""
        nvml = self.nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
            except self._lost:
                raise
            except nvml.NVMLError as error:
                log.debug("%s: memory info v2 unavailable (%s); using v1", key, error)
        return self._optional(key, "memory", lambda: nvml.nvmlDeviceGetMemoryInfo(handle))

    def _optional(self, key: str | None, what: str, read):
        """Run one NVML read; a field NVML cannot give here is None. GpuIsLost propagates (the GPU is gone)."""
        try:
            return read()
        except self._lost:
            raise
        except self._unavailable:
            raise
        except self._field_errors:
            return None
        except self.nvml.NVMLError as error:
            # An unexpected error on one field must not cost the whole tick; say it once per device and field.
            if (str(key), what) not in self._warned:
                self._warned.add((str(key), what))
                log.warning("%s: reading %s failed (%s); reported as null.", key, what, error)
            return None


def log_inventory(readings: list[DeviceReading]) -> None:
    """One log line per GPU and MIG device: what an operator checks first when the portal shows nothing."""
    if not readings:
        log.warning(
            "NVML started but sees no GPU: the container was given none. Check that NVIDIA_VISIBLE_DEVICES=all "
            "reaches the NVIDIA runtime (runtimeClassName nvidia) and that the toolkit accepts it from this pod."
        )
    for r in readings:
        if r.mig_uuid is None:
            mig = "enabled" if r.mig_enabled else "disabled"
            lost = " — LOST" if r.lost else ""
            log.info(
                "GPU %s %s %s at %s, %s MiB, MIG %s%s",
                r.index,
                r.gpu_uuid,
                r.name,
                r.pci_bus_id,
                r.mem_total_mb,
                mig,
                lost,
            )
        else:
            where = "unknown" if r.placement_start is None else f"{r.placement_start}:{r.placement_size}"
            log.info(
                "  MIG %s %s GI %s CI %s placement %s",
                r.mig_uuid,
                r.mig_profile,
                r.gpu_instance_id,
                r.compute_instance_id,
                where,
            )
