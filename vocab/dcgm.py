"""Reading NVIDIA's dcgm-exporter: one scrape (Prometheus text format) into one reading per GPU or MIG instance.

Pure Python over text, parsed with prometheus_client's parser. The exporter's label set changed across
versions (shared/research/gpu_ops_facts.md §5.2), so:

- the host label is read case-insensitively (``Hostname`` until 2026-05, ``hostname`` after), and the GPU
  UUID label as ``UUID`` or ``uuid`` (``--use-old-namespace``);
- Kubernetes attribution comes from ``pod``/``namespace``/``container`` or the old ``pod_name``/
  ``pod_namespace``/``container_name``; empty values mean no pod;
- a MIG instance has no UUID of its own: it is the parent GPU's UUID plus ``GPU_I_ID`` (and ``GPU_I_PROFILE``);
- ``DCGM_FI_DEV_GPU_UTIL`` reads 0 on MIG instances, so utilisation there (and wherever GPU_UTIL is missing)
  is ``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` × 100.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
FIELDS = {
    "DCGM_FI_DEV_FB_USED": "memory_used_mib",
    "DCGM_FI_DEV_FB_FREE": "memory_free_mib",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "energy_mj",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor_active",
    "DCGM_FI_PROF_DRAM_ACTIVE": "dram_active",
}


@dataclass
class DcgmReading:
    """One GPU (gpu_instance_id None) or one MIG instance of it, as one scrape saw it."""

    gpu_uuid: str
    gpu_index: int | None
    hostname: str
    model: str = ""
    gpu_instance_id: int | None = None
    mig_profile: str = ""
    pod: str = ""
    namespace: str = ""
    container: str = ""
    #: Percent busy: GPU_UTIL for whole GPUs, GR_ENGINE_ACTIVE × 100 on MIG instances (or without GPU_UTIL).
    utilisation: float | None = None
    memory_used_mib: float | None = None
    memory_free_mib: float | None = None
    power_w: float | None = None
    #: Energy since the driver loaded, in millijoules (a counter; whole GPUs only).
    energy_mj: float | None = None
    temperature_c: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    _gpu_util: float | None = field(default=None, repr=False)
    _engine_active: float | None = field(default=None, repr=False)

    @property
    def is_mig(self) -> bool:
        return self.gpu_instance_id is not None


def _label(labels: dict[str, str], *names: str) -> str:
    lowered = {k.lower(): v for k, v in labels.items()}
    for name in names:
        if name.lower() in lowered and lowered[name.lower()]:
            return lowered[name.lower()]
    return ""


def parse_scrape(text: str) -> list[DcgmReading]:
    """Readings keyed by (GPU UUID, GPU instance); series without a GPU UUID are ignored. Raises ValueError
    on text that is not in the Prometheus exposition format."""
    readings: dict[tuple[str, int | None], DcgmReading] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name not in FIELDS and name not in (GPU_UTIL, ENGINE_ACTIVE):
                continue
            uuid = _label(labels, "UUID")
            if not uuid:
                continue
            gi = _label(labels, "GPU_I_ID")
            key = (uuid, int(gi) if gi.isdigit() else None)
            reading = readings.get(key)
            if reading is None:
                index = _label(labels, "gpu")
                reading = readings[key] = DcgmReading(
                    gpu_uuid=uuid,
                    gpu_index=int(index) if index.isdigit() else None,
                    hostname=_label(labels, "Hostname"),
                    model=_label(labels, "modelName"),
                    gpu_instance_id=key[1],
                    mig_profile=_label(labels, "GPU_I_PROFILE"),
                )
            for attribute, names in (
                ("pod", ("pod", "pod_name")),
                ("namespace", ("namespace", "pod_namespace")),
                ("container", ("container", "container_name")),
            ):
                found = _label(labels, *names)
                if found:
                    setattr(reading, attribute, found)
            if name == GPU_UTIL:
                reading._gpu_util = value
            elif name == ENGINE_ACTIVE:
                reading._engine_active = value
            else:
                setattr(reading, FIELDS[name], value)
    for reading in readings.values():
        if not reading.is_mig and reading._gpu_util is not None:
            reading.utilisation = reading._gpu_util
        elif reading._engine_active is not None:
            reading.utilisation = reading._engine_active * 100
    return sorted(readings.values(), key=lambda r: (r.hostname, r.gpu_index or 0, r.gpu_instance_id or -1))
