"""A stand-in for ``pynvml`` (nvidia-ml-py 13.x) whose GPUs come from real ``nvidia-smi -q -x`` captures.

An instance is used where the agent would use the module: it has the module's function names and signatures,
constants with the real values (``NVML_ERROR_GPU_IS_LOST = 15`` …), the ``NVMLError`` class whose constructor
returns the per-code subclass (``NVMLError(3)`` is an ``NVMLError_NotSupported``), and result objects with the
real attribute names and units (memory in bytes, power in milliwatts, ``nvmlDeviceGetMigMode`` → [current, pending]).

It fails where NVML fails (shared/research/gpu_ops_facts.md §6, NVML API reference):

- any device call before ``nvmlInit`` → Uninitialized; ``nvmlInit`` → the queued ``init_errors`` first
  (DriverNotLoaded, LibraryNotFound), as on a node whose driver is still being installed;
- utilisation of a MIG-enabled GPU and of a MIG device, power and temperature of a MIG device → NotSupported;
- MIG calls on a GPU without MIG (``<current_mig>N/A``) → NotSupported; an empty MIG slot → NotFound;
- a GPU marked lost → GpuIsLost from every metric (its handle and cached UUID still answer, as on real hardware
  where the driver keeps the UUID; ``lose(index, handle_too=True)`` makes the handle fail as well);
- ``nvmlDeviceGetGpuInstanceById`` → NoPermission unless ``privileged`` (GPU instance handles are for root).

The captures hold no MIG devices and no processes, so tests add them: ``carve(index, [("1g.10gb", 0), …])``
enables MIG with GPU instances at those placements, and ``add_process``. ``mig_device`` elements and
``process_info`` elements in an XML are read too (the layout nvidia-smi writes), so a test can also feed those.
"""

from __future__ import annotations

import ctypes
import re
import string
import uuid as uuidlib
import xml.etree.ElementTree as ET  # noqa: S405 - our own fixture files
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

MIB = 1024 * 1024

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
nvmlMemory_v2 = 0x02000028

_ERROR_TEXT = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """As in pynvml: ``NVMLError(code)`` builds the subclass registered for the code; ``.value`` is the code."""

    _valClassMapping: dict[int, type] = {}

    def __new__(cls, value):
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __init__(self, value):
        super().__init__(value)

    def __str__(self):
        return _ERROR_TEXT.get(self.value, f"NVML Error with code {self.value}")


def _error_classes() -> dict[str, type]:
    """NVML_ERROR_GPU_IS_LOST → NVMLError_GpuIsLost, the naming pynvml generates."""
    classes = {}
    for name, value in list(globals().items()):
        if name.startswith("NVML_ERROR_"):
            class_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
            subclass = type(class_name, (NVMLError,), {})
            NVMLError._valClassMapping[value] = subclass
            classes[class_name] = subclass
    return classes


_ERRORS = _error_classes()
globals().update(_ERRORS)


# MIG profiles of the two products in the captures: name → (compute slices, memory slices = placement size,
# allowed starts, memory MB as NVML reports it, SMs). Sources: gpu_ops_facts.md §1.2 tables (GFD labels, -lgip).
PROFILES = {
    "NVIDIA A100-SXM4-40GB": {
        "1g.5gb": (1, 1, range(7), 4864, 14),
        "2g.10gb": (2, 2, (0, 2, 4), 9984, 28),
        "3g.20gb": (3, 4, (0, 4), 20096, 42),
        "4g.20gb": (4, 4, (0,), 20096, 56),
        "7g.40gb": (7, 8, (0,), 40448, 98),
    },
    "NVIDIA H100 80GB HBM3": {
        "1g.10gb": (1, 1, range(7), 9984, 16),
        "1g.20gb": (1, 2, (0, 2, 4, 6), 20096, 26),
        "2g.20gb": (2, 2, (0, 2, 4), 20096, 32),
        "3g.40gb": (3, 4, (0, 4), 40320, 60),
        "4g.40gb": (4, 4, (0,), 40320, 64),
        "7g.80gb": (7, 8, (0,), 80896, 132),
    },
}


@dataclass(eq=False)
class FakeMigDevice:
    parent: FakeGpu
    gpu_instance_id: int
    compute_instance_id: int
    profile: str
    slices: int
    start: int
    size: int
    memory_mb: int
    sm_count: int
    memory_used_mib: int = 0

    @property
    def uuid(self) -> str:
        # Real MIG UUIDs (R470+) are "MIG-" + a UUID of their own; derive one stably from the parent and the ids.
        return "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_OID, f"{self.parent.uuid}/{self.gpu_instance_id}"))


@dataclass(eq=False)
class FakeGpu:
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    pci_device_id: int
    memory_total_mib: int
    memory_reserved_mib: int
    memory_used_mib: int
    util_gpu: int | None
    util_memory: int | None
    power_mw: int | None
    temp_c: int | None
    mig_current: int | None  # None: the GPU has no MIG (nvidia-smi writes N/A)
    mig_pending: int | None
    mig_devices: list[FakeMigDevice] = field(default_factory=list)
    #: The energy counter (mJ); None: NotSupported (nvidia-smi -q -x does not print it, so the captures give none).
    energy_mj: int | None = None
    # (pid, used bytes or None, gpu instance id or None, compute instance id or None)
    processes: list[tuple[int, int | None, int | None, int | None]] = field(default_factory=list)
    lost: bool = False
    handle_lost: bool = False

    @property
    def max_mig_devices(self) -> int:
        return 7


def _number(text: str | None) -> float | None:
    """'40960 MiB' → 40960, '49.68 W' → 49.68, 'N/A' → None."""
    if text is None:
        return None
    match = re.match(r"\s*(-?\d+(?:\.\d+)?)", text)
    return float(match.group(1)) if match else None


def _mig_mode(text: str | None) -> int | None:
    return {"Enabled": NVML_DEVICE_MIG_ENABLE, "Disabled": NVML_DEVICE_MIG_DISABLE}.get((text or "").strip())


class FakeNvml:
    """One node's NVML. ``FakeNvml.from_xml(path)`` reads an ``nvidia-smi -q -x`` capture."""

    NVMLError = NVMLError
    c_uint = ctypes.c_uint

    def __init__(self, gpus: list[FakeGpu], driver_version: str = "570.148.08"):
        self.gpus = gpus
        self.driver_version = driver_version
        self.initialised = 0
        self.init_errors: list[int] = []  # codes nvmlInit raises, one per call, before it succeeds
        self.init_calls = 0
        self.privileged = True
        self.calls: list[str] = []
        for name, cls in _ERRORS.items():
            setattr(self, name, cls)
        for name, value in globals().items():
            if name.startswith("NVML_") or name == "nvmlMemory_v2":
                setattr(self, name, value)

    # Building -------------------------------------------------------------------------------------------
    @classmethod
    def from_xml(cls, path: str | Path) -> FakeNvml:
        return cls.from_xml_text(Path(path).read_text())

    @classmethod
    def from_xml_text(cls, text: str) -> FakeNvml:
        root = ET.fromstring(text)  # noqa: S314 - trusted fixtures
        gpus = []
        for index, gpu in enumerate(root.findall("gpu")):
            power = gpu.findtext("gpu_power_readings/instant_power_draw") or gpu.findtext(
                "gpu_power_readings/power_draw"
            )
            if power is None:
                power = gpu.findtext("power_readings/power_draw")
            watts = _number(power)
            fake = FakeGpu(
                index=index,  # NVML orders GPUs by PCI bus id, as nvidia-smi lists them
                uuid=gpu.findtext("uuid").strip(),
                name=gpu.findtext("product_name").strip(),
                pci_bus_id=gpu.findtext("pci/pci_bus_id") or gpu.get("id"),
                pci_device_id=int(gpu.findtext("pci/pci_device_id") or "0", 16),
                memory_total_mib=int(_number(gpu.findtext("fb_memory_usage/total"))),
                memory_reserved_mib=int(_number(gpu.findtext("fb_memory_usage/reserved")) or 0),
                memory_used_mib=int(_number(gpu.findtext("fb_memory_usage/used"))),
                util_gpu=_int_or_none(_number(gpu.findtext("utilization/gpu_util"))),
                util_memory=_int_or_none(_number(gpu.findtext("utilization/memory_util"))),
                power_mw=None if watts is None else round(watts * 1000),
                temp_c=_int_or_none(_number(gpu.findtext("temperature/gpu_temp"))),
                mig_current=_mig_mode(gpu.findtext("mig_mode/current_mig")),
                mig_pending=_mig_mode(gpu.findtext("mig_mode/pending_mig")),
            )
            for mig in gpu.findall("mig_devices/mig_device"):
                _add_mig_from_xml(fake, mig)
            for process in gpu.findall("processes/process_info"):
                used = _number(process.findtext("used_memory"))
                fake.processes.append(
                    (
                        int(process.findtext("pid")),
                        None if used is None else int(used) * MIB,
                        _int_or_none(_number(process.findtext("gpu_instance_id"))),
                        _int_or_none(_number(process.findtext("compute_instance_id"))),
                    )
                )
            gpus.append(fake)
        return cls(gpus, driver_version=(root.findtext("driver_version") or "").strip())

    def carve(self, index: int, layout: list[tuple[str, int]]) -> list[FakeMigDevice]:
        """Enable MIG on GPU ``index`` with GPU instances (one compute instance each) of these profiles at these
        placement starts, as ``nvidia-smi mig -cgi <profile>:<start> -C`` would. Invalid layouts raise."""
        gpu = self.gpus[index]
        table = PROFILES[gpu.name]
        gpu.mig_current = gpu.mig_pending = NVML_DEVICE_MIG_ENABLE
        gpu.mig_devices = []
        taken: set[int] = set()
        for number, (profile, start) in enumerate(layout, start=1):
            slices, size, starts, memory_mb, sms = table[profile]
            span = set(range(start, start + size))
            if start not in starts or span & taken:
                raise ValueError(f"{profile} cannot start at {start} on {gpu.name} with {sorted(taken)} taken")
            taken |= span
            gpu.mig_devices.append(FakeMigDevice(gpu, number, 0, profile, slices, start, size, memory_mb, sms))
        return gpu.mig_devices

    def add_process(self, device: FakeGpu | FakeMigDevice, pid: int, used_mib: int | None) -> None:
        used = None if used_mib is None else used_mib * MIB
        if isinstance(device, FakeMigDevice):
            device.parent.processes.append((pid, used, device.gpu_instance_id, device.compute_instance_id))
            device.memory_used_mib += used_mib or 0
        else:
            device.processes.append((pid, used, None, None))

    def lose(self, index: int, handle_too: bool = False) -> None:
        self.gpus[index].lost = True
        self.gpus[index].handle_lost = handle_too

    # Checks shared by the calls ------------------------------------------------------------------------
    def _call(self, name: str) -> None:
        self.calls.append(name)
        if not self.initialised:
            raise NVMLError(NVML_ERROR_UNINITIALIZED)

    @staticmethod
    def _alive(handle) -> FakeGpu:
        gpu = handle.parent if isinstance(handle, FakeMigDevice) else handle
        if gpu.lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu

    @staticmethod
    def _gpu_only(handle) -> FakeGpu:
        if not isinstance(handle, FakeGpu):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return handle

    # The pynvml API ------------------------------------------------------------------------------------
    def nvmlInit(self):
        self.calls.append("nvmlInit")
        self.init_calls += 1
        if self.init_errors:
            raise NVMLError(self.init_errors.pop(0))
        self.initialised += 1

    def nvmlShutdown(self):
        self._call("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        self._call("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self):
        self._call("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._call("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if gpu.handle_lost:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetUUID(self, handle):
        self._call("nvmlDeviceGetUUID")
        return handle.uuid

    def nvmlDeviceGetName(self, handle):
        self._call("nvmlDeviceGetName")
        if isinstance(handle, FakeMigDevice):
            return f"{handle.parent.name} MIG {handle.profile}"
        return handle.name

    def nvmlDeviceGetPciInfo(self, handle):
        self._call("nvmlDeviceGetPciInfo")
        gpu = handle.parent if isinstance(handle, FakeMigDevice) else handle
        return SimpleNamespace(busId=gpu.pci_bus_id, pciDeviceId=gpu.pci_device_id)

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self._call("nvmlDeviceGetMemoryInfo")
        self._alive(handle)
        if isinstance(handle, FakeMigDevice):
            total, reserved, used = handle.memory_mb * MIB, 0, handle.memory_used_mib * MIB
        else:
            # A MIG-enabled GPU's used memory includes what its instances use.
            used_mib = handle.memory_used_mib + sum(mig.memory_used_mib for mig in handle.mig_devices)
            total, reserved, used = handle.memory_total_mib * MIB, handle.memory_reserved_mib * MIB, used_mib * MIB
        free = total - reserved - used
        if not version:
            # v1 has no "reserved": its used is everything not free, driver reservation included.
            return SimpleNamespace(total=total, free=free, used=total - free)
        if version != nvmlMemory_v2:
            raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        return SimpleNamespace(version=version, total=total, reserved=reserved, free=free, used=used)

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._call("nvmlDeviceGetUtilizationRates")
        gpu = self._alive(handle)
        if isinstance(handle, FakeMigDevice) or gpu.mig_current == NVML_DEVICE_MIG_ENABLE or gpu.util_gpu is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(gpu=gpu.util_gpu, memory=gpu.util_memory)

    def nvmlDeviceGetPowerUsage(self, handle):
        self._call("nvmlDeviceGetPowerUsage")
        gpu = self._alive(handle)
        if isinstance(handle, FakeMigDevice) or gpu.power_mw is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        self._call("nvmlDeviceGetTotalEnergyConsumption")
        gpu = self._alive(handle)
        if isinstance(handle, FakeMigDevice) or gpu.energy_mj is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.energy_mj

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._call("nvmlDeviceGetTemperature")
        gpu = self._alive(handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if isinstance(handle, FakeMigDevice) or gpu.temp_c is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.temp_c

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        """The parent lists every process on the GPU (with its GPU/compute instance ids); a MIG device its own."""
        self._call("nvmlDeviceGetComputeRunningProcesses")
        gpu = self._alive(handle)
        rows = gpu.processes
        if isinstance(handle, FakeMigDevice):
            rows = [row for row in rows if row[2] == handle.gpu_instance_id and row[3] == handle.compute_instance_id]
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=gi, computeInstanceId=ci)
            for pid, used, gi, ci in rows
        ]

    def nvmlDeviceGetMigMode(self, device):
        self._call("nvmlDeviceGetMigMode")
        gpu = self._gpu_only(device)
        self._alive(gpu)
        if gpu.mig_current is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return [gpu.mig_current, gpu.mig_pending]

    def nvmlDeviceGetMaxMigDeviceCount(self, device):
        self._call("nvmlDeviceGetMaxMigDeviceCount")
        gpu = self._gpu_only(device)
        if gpu.mig_current is None:
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device, index):
        self._call("nvmlDeviceGetMigDeviceHandleByIndex")
        gpu = self._gpu_only(device)
        self._alive(gpu)
        if gpu.mig_current != NVML_DEVICE_MIG_ENABLE or not 0 <= index < gpu.max_mig_devices:
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        if index >= len(gpu.mig_devices):
            raise NVMLError(NVML_ERROR_NOT_FOUND)
        return gpu.mig_devices[index]

    def nvmlDeviceIsMigDeviceHandle(self, device):
        self._call("nvmlDeviceIsMigDeviceHandle")
        return ctypes.c_uint(1 if isinstance(device, FakeMigDevice) else 0)

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice):
        self._call("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        if not isinstance(migDevice, FakeMigDevice):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        return migDevice.parent

    def nvmlDeviceGetGpuInstanceId(self, device):
        self._call("nvmlDeviceGetGpuInstanceId")
        if not isinstance(device, FakeMigDevice):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return device.gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, device):
        self._call("nvmlDeviceGetComputeInstanceId")
        if not isinstance(device, FakeMigDevice):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return device.compute_instance_id

    def nvmlDeviceGetAttributes(self, device):
        self._call("nvmlDeviceGetAttributes")
        if not isinstance(device, FakeMigDevice):
            raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(
            multiprocessorCount=device.sm_count,
            sharedCopyEngineCount=device.slices,
            sharedDecoderCount=0,
            sharedEncoderCount=0,
            sharedJpegCount=0,
            sharedOfaCount=0,
            gpuInstanceSliceCount=device.slices,
            computeInstanceSliceCount=device.slices,
            memorySizeMB=device.memory_mb,
        )

    def nvmlDeviceGetGpuInstanceById(self, device, gpuInstanceId):
        self._call("nvmlDeviceGetGpuInstanceById")
        gpu = self._gpu_only(device)
        if not self.privileged:
            raise NVMLError(NVML_ERROR_NO_PERMISSION)
        for mig in gpu.mig_devices:
            if mig.gpu_instance_id == gpuInstanceId:
                return SimpleNamespace(gpu=gpu, mig=mig)
        raise NVMLError(NVML_ERROR_NOT_FOUND)

    def nvmlGpuInstanceGetInfo(self, gpuInstance):
        self._call("nvmlGpuInstanceGetInfo")
        mig = gpuInstance.mig
        profile_id = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}.get(mig.slices, 0)
        return SimpleNamespace(
            device=gpuInstance.gpu,
            id=mig.gpu_instance_id,
            profileId=profile_id,
            placement=SimpleNamespace(start=mig.start, size=mig.size),
        )


def _int_or_none(value: float | None) -> int | None:
    return None if value is None else int(value)


def _add_mig_from_xml(gpu: FakeGpu, element: ET.Element) -> None:
    """A ``mig_device`` of nvidia-smi's XML: its profile is the product's profile with that SM count and memory,
    and it gets the first placement the earlier instances left free."""
    sms = int(_number(element.findtext("device_attributes/shared/multiprocessor_count")))
    memory = int(_number(element.findtext("fb_memory_usage/total")))
    table = PROFILES[gpu.name]
    profile = min((name for name, row in table.items() if row[4] == sms), key=lambda name: abs(table[name][3] - memory))
    slices, size, starts, memory_mb, _ = table[profile]
    taken = {s for mig in gpu.mig_devices for s in range(mig.start, mig.start + mig.size)}
    start = next(s for s in starts if not set(range(s, s + size)) & taken)
    mig = FakeMigDevice(
        gpu,
        int(element.findtext("gpu_instance_id")),
        int(element.findtext("compute_instance_id")),
        profile,
        slices,
        start,
        size,
        memory_mb,
        sms,
        memory_used_mib=int(_number(element.findtext("fb_memory_usage/used")) or 0),
    )
    gpu.mig_devices.append(mig)
