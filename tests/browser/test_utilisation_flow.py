"""Utilisation in the browser: the bell tells alice her job holds idle GPUs, the job page shows the flag and
the chart, node pages draw charts with a range switch, and the team page exports showback CSV."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest

from gpus.models import ResourceClass
from jobs.choices import JobState
from jobs.idle import detect_idle
from jobs.models import Job
from telemetry import samples

from .conftest import login

expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture
def idle_job(inventory, people):
    now = datetime.now(UTC)
    job = Job.objects.create(
        team=people["vision"], owner=people["alice"], name="forgotten-shell", image="nvcr.io/nvidia/pytorch:24.01-py3",
        resource_class=ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"), count=2,
        state=JobState.RUNNING, node_name="gpu-h100-04", started_at=now - timedelta(minutes=50),
    )  # fmt: skip
    readings = []
    for i in range(0, 50 * 60, 30):
        ts = now - timedelta(minutes=50) + timedelta(seconds=i)
        busy = i < 10 * 60  # ten busy minutes at the start, then nothing
        for g in range(2):
            readings.append(samples.Reading(ts=ts, node_name="gpu-h100-04", gpu_uuid=f"GPU-0000000{g}-bbbb",
                                              gpu_index=g, util_pct=88.0 if busy else 1.5))  # fmt: skip
    samples.store(readings, "agent")
    assert detect_idle(now=now)["flagged"] == 1
    return job


def test_idle_job_notification_chart_and_node_ranges(page, live_server, idle_job, artifacts):
    login(page, "alice")
    bell = page.get_by_test_id("notifications")
    expect(bell.get_by_test_id("unread-count")).to_contain_text("1")
    expect(page.get_by_test_id("idle-jobs")).to_contain_text("forgotten-shell")
    page.screenshot(path=artifacts / "overview-utilisation.png", full_page=True)
    bell.click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Notifications")
    item = page.get_by_test_id("notification-list").locator("li").first
    expect(item).to_contain_text("Job forgotten-shell holds GPUs it is not using")
    expect(page.get_by_test_id("unread-count")).to_contain_text("1")  # reading the page changes nothing
    page.get_by_test_id("mark-read").click()  # a POST
    expect(page.get_by_test_id("unread-count")).to_have_count(0)
    item = page.get_by_test_id("notification-list").locator("li").first
    item.get_by_role("link").click()

    expect(page.get_by_test_id("idle-flag")).to_contain_text("Allocated but idle")
    chart = page.get_by_test_id("utilisation").locator("svg.chart")
    expect(chart).to_be_visible()
    label = chart.get_attribute("aria-label")
    assert "peak 88%" in label and "latest 2%" in label
    expect(chart.locator("polyline.series")).to_have_count(1)
    expect(chart.locator("line.threshold")).to_have_count(1)
    page.screenshot(path=artifacts / "job-idle.png", full_page=True)

    page.goto("/nodes/")
    row = page.locator('tr[data-node="gpu-h100-04"]')
    expect(row.get_by_test_id("node-sparkline").locator("svg.sparkline")).to_be_visible()
    page.goto("/nodes/gpu-h100-04/")
    section = page.get_by_test_id("utilisation")
    expect(section.locator('a[aria-current="page"]')).to_have_text("1h")
    section.get_by_role("link", name="24h").click()
    expect(page.get_by_test_id("utilisation").locator('a[aria-current="page"]')).to_have_text("24h")
    expect(page.get_by_test_id("utilisation").locator("svg.chart")).to_be_visible()
    expect(page.get_by_test_id("gpu-sparkline").first.locator("svg.sparkline")).to_be_visible()
    page.screenshot(path=artifacts / "node-utilisation.png", full_page=True)


def test_team_showback_chart_range_and_csv(page, live_server, idle_job, artifacts):
    login(page, "alice")
    page.goto("/teams/vision/")
    usage = page.get_by_test_id("team-usage")
    expect(usage.locator("svg.chart rect.bar-allocated").first).to_be_attached()
    expect(page.get_by_test_id("usage-summary")).to_contain_text("GPU-hours allocated")
    page.screenshot(path=artifacts / "team-usage.png", full_page=True)

    today = datetime.now(UTC).date()
    form = page.get_by_test_id("usage-form")
    form.locator('input[name="start"]').fill((today - timedelta(days=2)).isoformat())
    form.locator('input[name="end"]').fill(today.isoformat())
    with page.expect_download() as download_info:
        page.get_by_test_id("usage-csv").click()
    download = download_info.value
    assert download.suggested_filename == f"gpu-usage-vision-{today - timedelta(days=2)}-{today}.csv"
    rows = list(csv.reader(io.StringIO(open(download.path()).read())))
    assert rows[0][:4] == ["date", "team", "allocated_gpu_hours", "used_gpu_hours"]
    assert len(rows) == 4 and rows[-1][0] == today.isoformat()
    assert float(rows[-1][2]) > 0  # the idle job has held 2 GPUs since it started

    # A backwards range is explained, not silently swapped.
    form.locator('input[name="start"]').fill(today.isoformat())
    form.locator('input[name="end"]').fill((today - timedelta(days=5)).isoformat())
    form.get_by_role("button", name="Show").click()
    expect(page.get_by_test_id("usage-form").get_by_role("alert")).to_contain_text("swap them")
