"""Allocated but idle: the edges of the rule (threshold, window, coverage, no data) and one notification per
idle spell."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.models import Notification
from gpus.models import ResourceClass
from jobs.choices import JobState
from jobs.idle import detect_idle
from jobs.models import Job
from telemetry import samples

T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)
WINDOW = timedelta(minutes=30)


@pytest.fixture(autouse=True)
def _rule(settings):
    settings.PORTAL_IDLE_THRESHOLD_PCT = 10.0
    settings.PORTAL_IDLE_WINDOW_SECONDS = 1800
    settings.PORTAL_DCGM_SCRAPE_INTERVAL = 30.0


@pytest.fixture
def job(inventory, people):
    return Job.objects.create(
        team=people["vision"], owner=people["alice"], name="notebook-ish", image="x/y:1",
        resource_class=ResourceClass.objects.filter(kind="gpu").first(), state=JobState.RUNNING,
        node_name="gpu-h100-01", started_at=T0,
    )  # fmt: skip


def feed(job, start: datetime, minutes: int, util, every: int = 30, gpus: int = 1):
    """Readings for the job's GPUs every ``every`` seconds for ``minutes``; util may be a function of the time."""
    rows = []
    for i in range(minutes * 60 // every + 1):
        ts = start + timedelta(seconds=i * every)
        for g in range(gpus):
            value = util(ts) if callable(util) else util
            rows.append(
                samples.Reading(ts=ts, node_name=job.node_name, gpu_uuid=f"GPU-0000000{g}-aaaa", util_pct=value)
            )
    samples.store(rows, "agent")  # one running job on the node: the agent's readings are its


def test_flagged_after_the_window_under_threshold_with_one_notification(job):
    feed(job, T0, 40, 3.0)
    assert detect_idle(now=T0 + timedelta(minutes=29))["flagged"] == 0  # not running long enough yet
    assert detect_idle(now=T0 + timedelta(minutes=31))["flagged"] == 1
    job.refresh_from_db()
    assert job.idle_since == T0 and job.gpu_util_recent == pytest.approx(3.0)
    note = Notification.objects.get(user=job.owner)
    assert note.kind == "job.idle" and note.url == f"/jobs/{job.pk}/" and "under 10%" in note.body
    # Running again (or twice at once) does not notify again.
    assert detect_idle(now=T0 + timedelta(minutes=35))["flagged"] == 0
    assert Notification.objects.count() == 1


def test_a_reading_at_the_threshold_counts_as_busy(job):
    feed(job, T0, 40, lambda ts: 10.0 if ts == T0 + timedelta(minutes=20) else 1.0)
    assert detect_idle(now=T0 + timedelta(minutes=40))["flagged"] == 0
    # Thirty minutes after that reading it is idle, and idle since that reading.
    feed(job, T0 + timedelta(minutes=40, seconds=30), 11, 1.0)
    assert detect_idle(now=T0 + timedelta(minutes=50, seconds=30))["flagged"] == 1
    job.refresh_from_db()
    assert job.idle_since == T0 + timedelta(minutes=20)


def test_any_gpu_of_the_job_over_threshold_keeps_it_busy(job):
    feed(job, T0, 40, lambda ts: 1.0, gpus=3)
    samples.store(
        [samples.Reading(ts=T0 + timedelta(minutes=35), node_name=job.node_name, gpu_uuid="GPU-0000000x-aaaa",
                           util_pct=55.0)], "agent",
    )  # fmt: skip
    assert detect_idle(now=T0 + timedelta(minutes=40))["flagged"] == 0


def test_no_data_or_partial_coverage_is_not_idle(job):
    assert detect_idle(now=T0 + timedelta(hours=2))["flagged"] == 0  # no readings at all
    feed(job, T0 + timedelta(minutes=25), 15, 0.0)  # readings cover only the last 15 minutes of the window
    assert detect_idle(now=T0 + timedelta(minutes=40))["flagged"] == 0
    # Readings that stopped (agent gone) are not evidence either.
    assert detect_idle(now=T0 + timedelta(minutes=50))["flagged"] == 0


def test_busy_again_clears_the_flag_and_a_new_spell_notifies_again(job):
    feed(job, T0, 40, 2.0)
    detect_idle(now=T0 + timedelta(minutes=40))
    feed(job, T0 + timedelta(minutes=40, seconds=30), 2, 90.0)
    assert detect_idle(now=T0 + timedelta(minutes=42, seconds=30))["cleared"] == 1
    job.refresh_from_db()
    assert job.idle_since is None and job.gpu_util_recent > 2.0
    feed(job, T0 + timedelta(minutes=43), 40, 2.0)
    assert detect_idle(now=T0 + timedelta(minutes=83))["flagged"] == 1
    assert Notification.objects.filter(kind="job.idle").count() == 2


def test_finished_jobs_lose_the_flag(job):
    feed(job, T0, 40, 2.0)
    detect_idle(now=T0 + timedelta(minutes=40))
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED)
    detect_idle(now=T0 + timedelta(minutes=41))
    job.refresh_from_db()
    assert job.idle_since is None


def test_idle_flag_shows_in_the_api_and_the_job_page(job, client, api_client):
    feed(job, T0, 40, 2.0)
    detect_idle(now=T0 + timedelta(minutes=40))
    api_client.force_authenticate(job.owner)
    body = api_client.get(f"/api/v1/jobs/{job.pk}/").json()
    assert body["idle_since"].startswith("2026-11-02T10:00") and body["gpu_util_recent"] == pytest.approx(2.0)
    client.force_login(job.owner)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="idle-flag"' in page and "Allocated but idle" in page
    listing = client.get("/jobs/").content.decode()
    assert 'data-role="idle"' in listing
    # The bell counts it; the notifications page shows it (reading it changes nothing); "Mark all read" reads it.
    assert 'data-testid="unread-count"' in listing
    notes = client.get("/notifications/").content.decode()
    assert "holds GPUs it is not using" in notes
    assert Notification.objects.unread().count() == 1
    client.post("/notifications/read/")
    assert Notification.objects.unread().count() == 0
    assert 'data-testid="unread-count"' not in client.get("/jobs/").content.decode()
