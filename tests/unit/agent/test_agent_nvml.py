"""The agent's NVML collection, against the fake NVML fed by real nvidia-smi captures, and the fake against pynvml."""

from __future__ import annotations

import inspect
import logging
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest

from agent.nvml import NvmlCollector, NvmlUnavailable, mig_profile_name
from tests.realdata import real_path
from tests.unit.agent.fake_nvml import FakeNvml

REPO = Path(__file__).resolve().parents[3]
TS = "2026-11-23T15:00:00Z"
A100 = "03"
H100 = "04"


def xml_gpus(prefix: str) -> list[dict]:
    """What the capture says, read here with ElementTree and nothing of the fake: the expected values."""
    root = ET.parse(real_path(prefix)).getroot()
    gpus = []
    for index, gpu in enumerate(root.findall("gpu")):  # NVML enumerates in the order nvidia-smi lists
        gpus.append(
            {
                "index": index,
                "uuid": gpu.findtext("uuid"),
                "name": gpu.findtext("product_name"),
                "bus": gpu.findtext("pci/pci_bus_id"),
                "total": int(gpu.findtext("fb_memory_usage/total").split()[0]),
                "used": int(gpu.findtext("fb_memory_usage/used").split()[0]),
                "util": float(gpu.findtext("utilization/gpu_util").split()[0]),
                "power": float(gpu.findtext("gpu_power_readings/instant_power_draw").split()[0]),
                "temp": float(gpu.findtext("temperature/gpu_temp").split()[0]),
            }
        )
    return gpus


def collector_for(prefix: str) -> tuple[FakeNvml, NvmlCollector]:
    fake = FakeNvml.from_xml(real_path(prefix))
    collector = NvmlCollector(fake)
    collector.start()
    return fake, collector


# The fake is shaped like pynvml -------------------------------------------------------------------------------
def test_fake_has_pynvml_error_codes_classes_and_constants():
    fake = FakeNvml([])
    codes = {name: value for name, value in vars(pynvml).items() if name.startswith("NVML_ERROR_")}
    assert codes["NVML_ERROR_NOT_SUPPORTED"] == 3 and codes["NVML_ERROR_GPU_IS_LOST"] == 15
    for name, value in codes.items():
        assert getattr(fake, name) == value, name
        real_class = type(pynvml.NVMLError(value)).__name__
        assert type(fake.NVMLError(value)).__name__ == real_class, name
        assert isinstance(fake.NVMLError(value), getattr(fake, real_class))
    for name in ("NVML_TEMPERATURE_GPU", "NVML_DEVICE_MIG_ENABLE", "NVML_DEVICE_MIG_DISABLE", "nvmlMemory_v2"):
        assert getattr(fake, name) == getattr(pynvml, name), name
    assert str(fake.NVMLError(3)) == str(pynvml.NVMLError(3)) == "Not Supported"


def test_fake_functions_have_pynvml_signatures():
    fake = FakeNvml([])
    functions = [name for name in dir(FakeNvml) if name.startswith("nvml") and callable(getattr(FakeNvml, name))]
    assert len(functions) >= 20
    for name in functions:
        real = inspect.signature(getattr(pynvml, name))
        ours = inspect.signature(getattr(fake, name))
        assert list(ours.parameters) == list(real.parameters), name


def test_real_pynvml_without_a_driver_raises_what_the_agent_handles():
    """On this machine there is no libnvidia-ml: nvmlInit fails the way the agent expects (LibraryNotFound)."""
    collector = NvmlCollector(pynvml)
    try:
        collector.start()
    except NvmlUnavailable as error:
        assert isinstance(error.error, (pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded))
        assert "runtimeClassName nvidia" in str(error) or "driver" in str(error)
    else:  # a machine with a GPU: then collection must work for real
        readings = collector.collect(TS)
        collector.stop()
        assert readings and all(r.gpu_uuid.startswith("GPU-") for r in readings)


# Collection from the captures --------------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", [A100, H100])
def test_collection_matches_the_capture(prefix):
    expected = xml_gpus(prefix)
    _, collector = collector_for(prefix)
    readings = collector.collect(TS)
    assert [r.gpu_uuid for r in readings] == [g["uuid"] for g in expected]
    assert len({r.gpu_uuid for r in readings}) == len(expected)
    for reading, gpu in zip(readings, expected, strict=True):
        sample = reading.to_sample()
        assert sample == {
            "ts": TS,
            "gpu_uuid": gpu["uuid"],
            "gpu_index": gpu["index"],
            "mig_uuid": None,
            "gpu_instance_id": None,
            "mig_profile": None,
            "util_pct": gpu["util"],
            "mem_used_mb": gpu["used"],
            "mem_total_mb": gpu["total"],
            "power_w": gpu["power"],
            "energy_mj": None,  # nvidia-smi -q -x prints no energy counter, so the fake has none
            "temp_c": gpu["temp"],
            "lost": False,
            "processes": [],
        }
        assert (reading.name, reading.pci_bus_id, reading.mig_enabled) == (gpu["name"], gpu["bus"], False)


def test_capture_values_are_the_real_ones():
    """Guards the expected values themselves: the captures are the A100 and the 8× H100 they claim to be."""
    a100, h100 = xml_gpus(A100), xml_gpus(H100)
    assert [(g["name"], g["total"], g["power"], g["temp"]) for g in a100] == [
        ("NVIDIA A100-SXM4-40GB", 40960, 49.68, 33.0)
    ]
    assert len(h100) == 8 and {g["total"] for g in h100} == {81559}
    assert [g["power"] for g in h100[:2]] == [68.92, 67.16]
    assert len({g["uuid"] for g in h100}) == 8


def test_used_memory_leaves_out_the_driver_reservation():
    """The A100 capture: 0 MiB used, 518 MiB reserved. v2 memory info says 0; v1 would have said 518."""
    fake, collector = collector_for(A100)
    assert collector.collect(TS)[0].mem_used_mb == 0
    v1 = fake.nvmlDeviceGetMemoryInfo(fake.nvmlDeviceGetHandleByIndex(0))
    assert v1.used // (1024 * 1024) == 518


def test_memory_falls_back_to_v1_where_the_driver_has_no_v2():
    fake, collector = collector_for(A100)
    original = fake.nvmlDeviceGetMemoryInfo

    def v1_only(handle, version=None):
        if version:
            raise fake.NVMLError(fake.NVML_ERROR_FUNCTION_NOT_FOUND)
        return original(handle)

    fake.nvmlDeviceGetMemoryInfo = v1_only
    reading = collector.collect(TS)[0]
    assert (reading.mem_used_mb, reading.mem_total_mb) == (518, 40960)


# MIG ---------------------------------------------------------------------------------------------------------
def test_mig_devices_are_sampled_with_their_parent_uuid_profile_and_placement():
    fake, collector = collector_for(H100)
    migs = fake.carve(2, [("3g.40gb", 4), ("2g.20gb", 0), ("1g.10gb", 2), ("1g.10gb", 3)])
    fake.add_process(migs[0], 31337, 2048)
    readings = collector.collect(TS)
    assert len(readings) == 8 + 4
    parent = readings[2]
    assert parent.mig_enabled is True and parent.mig_uuid is None
    assert parent.util_pct is None  # NVML has no utilisation for a MIG-enabled GPU
    assert parent.power_w == 67.74 and parent.temp_c == 29.0  # these still work on the parent
    assert parent.mem_used_mb == 2048
    children = readings[3:7]
    assert [r.gpu_uuid for r in children] == [parent.gpu_uuid] * 4
    assert [r.mig_uuid for r in children] == [m.uuid for m in migs]
    assert all(r.mig_uuid.startswith("MIG-") for r in children)
    assert [(r.mig_profile, r.gpu_instance_id, r.placement_start, r.placement_size) for r in children] == [
        ("3g.40gb", 1, 4, 4),
        ("2g.20gb", 2, 0, 2),
        ("1g.10gb", 3, 2, 1),
        ("1g.10gb", 4, 3, 1),
    ]
    samples = [r.to_sample() for r in children]
    assert [s["mem_total_mb"] for s in samples] == [40320, 20096, 9984, 9984]
    assert samples[0]["mem_used_mb"] == 2048 and samples[0]["processes"] == [{"pid": 31337, "used_mb": 2048}]
    # Utilisation, power and temperature are not supported on MIG devices: null, not a crash, not zero.
    assert all(s["util_pct"] is None and s["power_w"] is None and s["temp_c"] is None for s in samples)
    assert readings[7].gpu_uuid == xml_gpus(H100)[3]["uuid"]


def test_the_fake_raises_not_supported_where_nvml_does():
    fake, _ = collector_for(H100)
    (mig,) = fake.carve(0, [("7g.80gb", 0)])
    gpu = fake.nvmlDeviceGetHandleByIndex(0)
    for call in (
        lambda: fake.nvmlDeviceGetUtilizationRates(gpu),
        lambda: fake.nvmlDeviceGetUtilizationRates(mig),
        lambda: fake.nvmlDeviceGetPowerUsage(mig),
        lambda: fake.nvmlDeviceGetTemperature(mig, fake.NVML_TEMPERATURE_GPU),
    ):
        with pytest.raises(fake.NVMLError_NotSupported):
            call()
    with pytest.raises(fake.NVMLError_NotFound):
        fake.nvmlDeviceGetMigDeviceHandleByIndex(gpu, 1)
    assert fake.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    assert fake.nvmlDeviceGetMigMode(gpu) == [fake.NVML_DEVICE_MIG_ENABLE, fake.NVML_DEVICE_MIG_ENABLE]
    assert fake.nvmlDeviceGetUtilizationRates(fake.nvmlDeviceGetHandleByIndex(1)).gpu == 0
    with pytest.raises(ValueError, match="cannot start"):
        fake.carve(1, [("3g.40gb", 2)])


def test_placement_is_null_when_nvml_refuses_gpu_instance_handles():
    fake, collector = collector_for(H100)
    fake.carve(0, [("1g.20gb", 6)])
    fake.privileged = False
    mig = collector.collect(TS)[1]
    assert (mig.mig_profile, mig.gpu_instance_id) == ("1g.20gb", 1)
    assert (mig.placement_start, mig.placement_size) == (None, None)
    assert mig.to_inventory()["placement"] is None


def test_mig_devices_written_by_nvidia_smi_are_read_from_the_xml():
    """The fake also reads the mig_device/process_info layout of nvidia-smi -q -x (a MIG-enabled A100)."""
    text = real_path(A100).read_text()
    mig_xml = """<mig_devices>
        <mig_device><index>0</index><gpu_instance_id>1</gpu_instance_id><compute_instance_id>0</compute_instance_id>
          <device_attributes><shared><multiprocessor_count>42</multiprocessor_count></shared></device_attributes>
          <fb_memory_usage><total>19968 MiB</total><reserved>0 MiB</reserved><used>300 MiB</used>
          <free>19668 MiB</free></fb_memory_usage></mig_device>
        <mig_device><index>1</index><gpu_instance_id>7</gpu_instance_id><compute_instance_id>0</compute_instance_id>
          <device_attributes><shared><multiprocessor_count>14</multiprocessor_count></shared></device_attributes>
          <fb_memory_usage><total>4864 MiB</total><reserved>0 MiB</reserved><used>0 MiB</used>
          <free>4864 MiB</free></fb_memory_usage></mig_device>
      </mig_devices>"""
    processes = """<processes><process_info><gpu_instance_id>1</gpu_instance_id>
        <compute_instance_id>0</compute_instance_id><pid>4711</pid><type>C</type><process_name>python</process_name>
        <used_memory>290 MiB</used_memory></process_info></processes>"""
    text = text.replace("<current_mig>Disabled</current_mig>", "<current_mig>Enabled</current_mig>")
    text = text.replace("<pending_mig>Disabled</pending_mig>", "<pending_mig>Enabled</pending_mig>")
    text = text.replace("<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>", mig_xml)
    text = text.replace("<processes>\n\t\t</processes>", processes)
    assert text.count("<mig_device>") == 2 and "<pid>4711</pid>" in text
    collector = NvmlCollector(FakeNvml.from_xml_text(text))
    collector.start()
    parent, big, small = collector.collect(TS)
    assert parent.util_pct is None and parent.processes == [{"pid": 4711, "used_mb": 290}]
    assert (big.mig_profile, big.gpu_instance_id, big.mem_used_mb, big.placement_start) == ("3g.20gb", 1, 300, 0)
    assert big.processes == [{"pid": 4711, "used_mb": 290}]
    assert (small.mig_profile, small.gpu_instance_id, small.placement_start, small.processes) == ("1g.5gb", 7, 4, [])


@pytest.mark.parametrize(
    ("name", "attributes", "profile"),
    [
        ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", None, "1g.5gb"),
        ("NVIDIA H100 80GB HBM3 MIG 1c.3g.40gb", None, "1c.3g.40gb"),
        ("NVIDIA A100-SXM4-80GB MIG 1g.10gb+me", None, "1g.10gb+me"),
        (b"NVIDIA A30 MIG 2g.12gb".decode(), None, "2g.12gb"),
        (None, SimpleNamespace(gpuInstanceSliceCount=1, computeInstanceSliceCount=1, memorySizeMB=4864), "1g.5gb"),
        (None, SimpleNamespace(gpuInstanceSliceCount=3, computeInstanceSliceCount=3, memorySizeMB=20096), "3g.20gb"),
        (
            "MIG device",
            SimpleNamespace(gpuInstanceSliceCount=3, computeInstanceSliceCount=1, memorySizeMB=40320),
            "1c.3g.40gb",
        ),
        ("NVIDIA H100 80GB HBM3", None, None),
    ],
)
def test_mig_profile_name(name, attributes, profile):
    assert mig_profile_name(name, attributes) == profile


def test_profile_comes_from_attributes_when_the_name_does_not_carry_it():
    fake, collector = collector_for(A100)
    fake.carve(0, [("2g.10gb", 2)])
    fake.nvmlDeviceGetName = lambda handle: "MIG device"
    assert collector.collect(TS)[1].mig_profile == "2g.10gb"


def test_gpu_without_mig_support_reports_mig_disabled():
    fake, collector = collector_for(A100)
    fake.gpus[0].mig_current = fake.gpus[0].mig_pending = None  # nvidia-smi's N/A: a T4, an L40S
    (reading,) = collector.collect(TS)
    assert reading.mig_enabled is False and reading.util_pct == 0.0
    assert "nvmlDeviceGetMaxMigDeviceCount" not in fake.calls


# Failures ----------------------------------------------------------------------------------------------------
def test_lost_gpu_is_reported_lost_without_metrics_and_the_others_still_sampled(caplog):
    fake, collector = collector_for(H100)
    fake.carve(3, [("7g.80gb", 0)])
    fake.lose(3)
    with caplog.at_level(logging.ERROR):
        readings = collector.collect(TS)
    assert len(readings) == 8  # the lost GPU's MIG device is not read
    lost = readings[3].to_sample()
    assert lost["lost"] is True and lost["gpu_uuid"] == xml_gpus(H100)[3]["uuid"]
    assert [lost[k] for k in ("util_pct", "mem_used_mb", "mem_total_mb", "power_w", "temp_c")] == [None] * 5
    assert lost["processes"] == []
    assert [r.lost for r in readings].count(True) == 1
    assert readings[4].power_w == 66.34
    assert "GPU 3" in caplog.text and "lost" in caplog.text


def test_gpu_lost_before_its_uuid_is_skipped():
    fake, collector = collector_for(H100)
    fake.lose(0, handle_too=True)
    readings = collector.collect(TS)
    assert [r.gpu_uuid for r in readings] == [g["uuid"] for g in xml_gpus(H100)[1:]]


@pytest.mark.parametrize(
    ("code", "hint"),
    [(9, "kernel driver is not loaded"), (12, "runtimeClassName nvidia")],
)
def test_init_failure_says_what_to_check(code, hint):
    fake = FakeNvml.from_xml(real_path(A100))
    fake.init_errors = [code]
    collector = NvmlCollector(fake)
    with pytest.raises(NvmlUnavailable, match=hint):
        collector.start()
    assert collector.ready is False
    collector.start()
    assert collector.ready is True and len(collector.collect(TS)) == 1


def test_nvml_going_away_mid_run_is_unavailable_not_a_crash():
    fake, collector = collector_for(A100)
    fake.initialised = 0  # the driver was unloaded under the agent: every call is Uninitialized
    with pytest.raises(NvmlUnavailable):
        collector.collect(TS)
    assert collector.ready is False


def test_unexpected_error_on_one_field_is_null_and_logged_once(caplog):
    fake, collector = collector_for(A100)

    def broken(handle):
        raise fake.NVMLError(fake.NVML_ERROR_UNKNOWN)

    fake.nvmlDeviceGetPowerUsage = broken
    with caplog.at_level(logging.WARNING):
        first = collector.collect(TS)[0]
        second = collector.collect(TS)[0]
    assert first.power_w is None and second.power_w is None and first.temp_c == 33.0
    assert caplog.text.count("reading power failed") == 1


def test_the_agent_does_not_import_django():
    code = (
        "import sys, agent.cli, agent.runner, agent.sender, agent.nvml; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'rest_framework', 'celery', 'portal'}); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_gpu_that_cannot_be_opened_is_skipped_and_a_broken_mig_slot_too(caplog):
    fake, collector = collector_for(H100)
    fake.carve(4, [("3g.40gb", 0), ("3g.40gb", 4)])
    open_gpu, open_uuid = fake.nvmlDeviceGetHandleByIndex, fake.nvmlDeviceGetUUID

    def handle(index):
        if index == 1:
            raise fake.NVMLError(fake.NVML_ERROR_UNKNOWN)
        return open_gpu(index)

    def uuid(device):
        if getattr(device, "gpu_instance_id", None) == 2:
            raise fake.NVMLError(fake.NVML_ERROR_NO_PERMISSION)
        return open_uuid(device)

    fake.nvmlDeviceGetHandleByIndex, fake.nvmlDeviceGetUUID = handle, uuid
    with caplog.at_level(logging.ERROR):
        readings = collector.collect(TS)
    assert [r.index for r in readings if r.mig_uuid is None] == [0, 2, 3, 4, 5, 6, 7]
    assert [r.gpu_instance_id for r in readings if r.mig_uuid] == [1]
    assert "GPU 1 cannot be opened (Unknown Error)" in caplog.text and "MIG device 1 cannot be opened" in caplog.text


def test_a_failing_gpu_count_restarts_nvml():
    fake, collector = collector_for(A100)
    fake.nvmlDeviceGetCount = lambda: (_ for _ in ()).throw(fake.NVMLError(fake.NVML_ERROR_UNKNOWN))
    with pytest.raises(NvmlUnavailable, match="could not count"):
        collector.collect(TS)
    assert collector.ready is False
