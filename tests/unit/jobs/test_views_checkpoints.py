"""Checkpoints on the pages (issue 34, item 3): the submit form declares a signal and a grace, every problem at once;
the job page shows the declaration, the last checkpoint and the GPU-hours preemption lost; the team page shows the
team's minimum runtime and its leads set it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Job
from tests.factories import member
from tests.sim_objects import H100


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    return {**people, "rc": rc, "carol": member(people["vision"])}


def form_data(setup, **overrides) -> dict:
    data = {
        "team": setup["vision"].pk, "name": "resnet", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": "python train.py", "args": "", "env": "", "resource_class": setup["rc"].pk,
        "count": 1, "cpu": "4", "memory_mb": 16384, "priority": 50, "max_runtime_hours": "1.5",
        "idempotency_key": "form-token-1",
    }  # fmt: skip
    return data | overrides


def test_the_form_declares_a_checkpoint_and_the_job_page_shows_it(client, setup):
    client.force_login(setup["carol"])
    response = client.post("/jobs/new/", form_data(setup, checkpoint_signal="SIGUSR1", checkpoint_grace=120))
    job = Job.objects.get()
    assert response.status_code == 302, response.context["form"].errors
    assert job.checkpoint == {"signal": "SIGUSR1", "grace_seconds": 120, "report": "api"}
    Job.objects.filter(pk=job.pk).update(
        last_checkpoint_at=datetime(2026, 11, 2, 10, 30, tzinfo=UTC), preemption_lost_gpu_seconds=1800.0
    )
    page = client.get(job.get_absolute_url()).content.decode()
    assert "gets <code>SIGUSR1</code> and 120 s to checkpoint" in page
    assert "2026-11-02 10:30:00 UTC" in page and "0.50 GPU-hours lost to preemption so far" in page
    # "Resubmit with changes" starts from the same declaration.
    again = client.get(f"/jobs/new/?from={job.pk}")
    initial = again.context["form"].initial
    assert (initial["checkpoint_signal"], initial["checkpoint_grace"]) == ("SIGUSR1", 120)


def test_a_bad_checkpoint_is_said_with_the_forms_other_problems(client, setup, settings):
    settings.PORTAL_CHECKPOINT_GRACE_MAX = 600
    client.force_login(setup["carol"])
    response = client.post("/jobs/new/", form_data(setup, checkpoint_signal="SIGUSR2", checkpoint_grace=5, count=99))
    errors = response.context["form"].errors
    assert response.status_code == 200 and not Job.objects.exists()
    assert "from 30 to 600, not 5" in " ".join(errors["checkpoint_grace"]) and "count" in errors
    missing = client.post("/jobs/new/", form_data(setup, checkpoint_signal="SIGUSR2"))
    assert "Give the grace" in " ".join(missing.context["form"].errors["checkpoint_grace"])


def test_the_team_page_shows_the_minimum_runtime_and_its_lead_sets_it(client, setup):
    client.force_login(setup["carol"])
    page = client.get("/teams/vision/").content.decode()
    assert "Minimum runtime before preemption" in page and 'name="min_runtime_minutes"' not in page
    assert client.post("/teams/vision/preemption/", {"min_runtime_minutes": "30"}).status_code == 403
    client.force_login(setup["alice"])
    assert 'name="min_runtime_minutes"' in client.get("/teams/vision/").content.decode()
    bad = client.post("/teams/vision/preemption/", {"min_runtime_minutes": "-3"}, follow=True)
    assert "a whole number of minutes from 0 (none) to 1440" in bad.content.decode()
    ok = client.post("/teams/vision/preemption/", {"min_runtime_minutes": "30"})
    assert ok.status_code == 302
    assert AuditEvent.objects.get(action="team.min_runtime").after == {"min_runtime_seconds": 1800}
    assert "30 min" in client.get("/teams/vision/").content.decode()
