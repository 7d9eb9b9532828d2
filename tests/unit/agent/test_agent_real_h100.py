"""The fake NVML against a real GPU: tests/fixtures/gpu_node/h100-80gb-hbm3-busy holds nvidia-smi's XML of a busy
H100 and what the agent read from the same GPU through the real pynvml a moment later. Fed the XML, the fake
must give the agent the same readings (the moving figures — power, memory in use — within what a second
changes)."""

import json
from pathlib import Path

import pytest

from agent.nvml import NvmlCollector

from .fake_nvml import FakeNvml

CAPTURE = Path(__file__).resolve().parents[2] / "fixtures" / "gpu_node" / "h100-80gb-hbm3-busy"


def _read(nvml):
    collector = NvmlCollector(nvml)
    collector.start()
    try:
        return collector.collect("2026-11-24T00:00:00Z")
    finally:
        collector.stop()


@pytest.fixture(scope="module")
def fake_readings():
    return _read(FakeNvml.from_xml(CAPTURE / "nvidia-smi-q-x.xml"))


def test_the_fake_gives_the_inventory_the_real_library_gave(fake_readings):
    real = json.loads((CAPTURE / "real_inventory.json").read_text())
    assert [r.to_inventory() for r in fake_readings] == real
    assert real[0]["name"] == "NVIDIA H100 80GB HBM3" and real[0]["mem_total_mb"] == 81559


def test_the_fake_gives_the_samples_the_real_library_gave(fake_readings):
    real = json.loads((CAPTURE / "real_samples.json").read_text())
    fake = [r.to_sample() for r in fake_readings]
    assert len(fake) == len(real) == 1
    (f,), (r,) = fake, real
    # The recording predates the energy counter in samples (a new one has it); nvidia-smi's XML prints none, so the
    # fake reads None.
    assert set(f) | {"energy_mj"} == set(r) | {"energy_mj"} and f["energy_mj"] is None
    moving = {"power_w", "mem_used_mb", "energy_mj"}
    assert {k: v for k, v in f.items() if k not in moving} == {k: v for k, v in r.items() if k not in moving}
    assert f["processes"] == [{"pid": 619, "used_mb": 1002}]
    assert abs(f["power_w"] - r["power_w"]) < 0.05 * r["power_w"]
    assert abs(f["mem_used_mb"] - r["mem_used_mb"]) <= 8
    assert type(f["power_w"]) is type(r["power_w"]) and type(f["mem_used_mb"]) is type(r["mem_used_mb"])
