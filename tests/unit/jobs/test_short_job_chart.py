"""A short job's GPU chart (issue 31, item 15): a 90-second job's utilisation is drawn over the job's own run,
so its few readings show (a lone reading as a dot), instead of a sliver at the edge of an hour; a run that got no
reading at all says so in words."""

from __future__ import annotations

import html as html_text
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job
from telemetry.models import GpuSample
from tests.sim_objects import H100

REQUEST = dict(
    name="short", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
    count=1, cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=3600,
)  # fmt: skip


@pytest.fixture
def short_job(inventory, people) -> Job:
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    job = actions.submit_job(people["alice"], people["vision"], rc, dict(REQUEST)).job
    finished = timezone.now() - timedelta(minutes=20)
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, node_name="gpu-h100-01", exit_code=0,
                                         started_at=finished - timedelta(seconds=90), finished_at=finished)  # fmt: skip
    job.refresh_from_db()
    return job


def chart(html: str) -> str:
    found = re.search(r'<section class="card" aria-labelledby="util-title".*?</section>', html, re.S)
    assert found, "the job page has no utilisation card"
    return html_text.unescape(found.group(0))


def test_a_90_second_jobs_readings_are_drawn_over_its_run(client, people, short_job):
    # Two readings 40 s apart (a 30-second exporter, one scrape missed under load).
    for seconds, util in ((20, 85.0), (60, 91.0)):
        GpuSample.objects.create(ts=short_job.started_at + timedelta(seconds=seconds), node_name="gpu-h100-01",
                                 gpu_uuid="GPU-1", job_id=short_job.pk, util_pct=util, source="dcgm")  # fmt: skip
    client.force_login(people["alice"])
    card = chart(client.get(short_job.get_absolute_url()).content.decode())
    # The axis is the run (with one step either side), not the last hour.
    start, end = short_job.started_at - timedelta(seconds=30), short_job.finished_at + timedelta(seconds=30)
    assert f"from {start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} UTC" in card
    assert "peak 91%" in card
    dots = re.findall(r'<circle class="series-dot"', card)
    lines = re.findall(r'<polyline class="series" points="([^"]+)"', card)
    assert len(dots) + sum(len(p.split()) for p in lines) >= 2, card
    assert 'aria-current="page">run<' in card


def test_a_lone_reading_is_a_dot(client, people, short_job):
    GpuSample.objects.create(ts=short_job.started_at + timedelta(seconds=45), node_name="gpu-h100-01",
                             gpu_uuid="GPU-1", job_id=short_job.pk, util_pct=70.0, source="dcgm")  # fmt: skip
    client.force_login(people["alice"])
    card = chart(client.get(short_job.get_absolute_url()).content.decode())
    assert card.count('<circle class="series-dot"') == 1


def test_a_run_without_readings_says_it_was_too_brief(client, people, short_job):
    client.force_login(people["alice"])
    card = chart(client.get(short_job.get_absolute_url()).content.decode())
    assert "No utilisation reading was taken during this job's run (1 min 30 s)" in card
    assert "No utilisation readings for this period yet." not in card
