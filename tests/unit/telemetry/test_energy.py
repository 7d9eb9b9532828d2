"""Issue 35 item 5: the energy each GPU drew, from DCGM's energy counter (millijoules since the driver loaded) or,
without it, its power readings integrated over time; a MIG instance takes its share of its GPU's energy; rollups
keep the sum, and a job's energy is its rows' sum."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from telemetry import samples
from telemetry.choices import TelemetrySource
from telemetry.models import GpuRollup, GpuSample
from tests.realdata import real_text
from tests.unit.telemetry.test_telemetry import A100_UUID, reading, running_job
from vocab import dcgm

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
A100_COUNTER = 319159391  # DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION in capture 08, mJ
T4_COUNTER = 128996013  # the same in capture 09


def scrape(text: str, at: datetime) -> list[samples.Reading]:
    return samples.readings_from_dcgm(dcgm.parse_scrape(text), at)


def test_the_energy_counter_of_real_exporter_captures_is_read_for_whole_gpus_only():
    a100 = {(r.gpu_uuid, r.gpu_instance_id): r for r in dcgm.parse_scrape(real_text("08"))}
    assert a100[(A100_UUID, None)].energy_mj == A100_COUNTER
    assert a100[(A100_UUID, 13)].energy_mj is None
    t4 = dcgm.parse_scrape(real_text("09"))
    assert [r.energy_mj for r in t4 if r.gpu_uuid == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"] == [T4_COUNTER]


def test_a_mig_gpu_s_energy_is_split_between_its_instance_and_its_unpartitioned_rest(inventory):
    text = real_text("08")
    samples.store(scrape(text, T0), TelemetrySource.DCGM)
    first = GpuSample.objects.get(gpu_instance_id__isnull=True)
    assert first.energy_mj == A100_COUNTER and first.energy_j is None  # nothing before it to measure from
    later = text.replace(str(A100_COUNTER), str(A100_COUNTER + 12_000_000))  # 12 kJ in 30 s: 400 W
    samples.store(scrape(later, T0 + timedelta(seconds=30)), TelemetrySource.DCGM)
    now = GpuSample.objects.filter(ts=T0 + timedelta(seconds=30))
    parent, instance = now.get(gpu_instance_id__isnull=True), now.get(gpu_instance_id=13)
    assert instance.energy_j == pytest.approx(12_000 / 7)  # a 1g.5gb slice is 1/7 of the A100
    assert parent.energy_j == pytest.approx(12_000 * 6 / 7)
    assert parent.energy_j + instance.energy_j == pytest.approx(12_000)


def test_without_a_counter_or_after_it_went_back_power_is_integrated_over_the_interval(inventory):
    uuid = "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    samples.store(scrape(real_text("09"), T0), TelemetrySource.DCGM)
    # The driver reloaded: the counter reads less than before, so the T4's 8.969 W over 60 s is what counts.
    restarted = real_text("09").replace(str(T4_COUNTER), "5000")
    samples.store(scrape(restarted, T0 + timedelta(seconds=60)), TelemetrySource.DCGM)
    assert GpuSample.objects.get(gpu_uuid=uuid, ts=T0 + timedelta(seconds=60)).energy_j == pytest.approx(8.969 * 60)
    # An agent without the counter: the trapezoid of its power readings.
    other = "GPU-22222222-0000-0000-0000-000000000000"
    samples.store(
        [reading(T0, 90.0, uuid=other, power_w=100.0), reading(T0 + timedelta(seconds=30), 90.0, uuid=other,
                                                               power_w=200.0)],
        TelemetrySource.AGENT,
    )  # fmt: skip
    assert GpuSample.objects.get(gpu_uuid=other, ts=T0 + timedelta(seconds=30)).energy_j == pytest.approx(4500)


def test_a_reading_after_a_long_silence_counts_no_energy(inventory):
    uuid = "GPU-33333333-0000-0000-0000-000000000000"
    samples.store([reading(T0, 50.0, uuid=uuid, energy_mj=1_000_000, power_w=300.0)], TelemetrySource.AGENT)
    late = T0 + samples.ENERGY_MAX_GAP + timedelta(seconds=1)
    samples.store([reading(late, 50.0, uuid=uuid, energy_mj=9_000_000, power_w=300.0)], TelemetrySource.AGENT)
    assert GpuSample.objects.get(gpu_uuid=uuid, ts=late).energy_j is None


def test_rollups_sum_the_energy_and_a_job_s_energy_adds_rollups_and_newer_samples(inventory, people, settings):
    settings.PORTAL_TELEMETRY_ROLLUP_LAG = 0
    job = running_job(people)
    readings = [
        reading(T0 + timedelta(seconds=30 * i), 80.0, energy_mj=10_000_000 + 9_000_000 * i)  # 300 W
        for i in range(21)  # 10:00 to 10:10
    ]
    samples.store(readings, TelemetrySource.AGENT)
    samples.rollup(now=T0 + timedelta(minutes=5))
    rolled = GpuRollup.objects.get(period="5m", start=T0)
    assert rolled.energy_j == pytest.approx(9 * 9_000)  # 10:00:30 … 10:04:30, 9 kJ each
    assert samples.job_energy(job.pk) == pytest.approx(20 * 9_000)  # the rollup plus the raw samples after it
