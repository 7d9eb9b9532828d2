"""Notifications name work by the one id its owner knows (issue 31, item 15): a notebook by the notebook's id and
page, never by the id of its session's job."""

from __future__ import annotations

import pytest
from django.utils import timezone

from core.models import Notification
from gpus.models import settings_cluster_pk
from gpus.nodeconfig_control import ForcedDrain
from jobs import actions
from jobs.choices import JobState
from jobs.cycle import draining
from jobs.models import Job
from tests.factories import notebook_session, submit_job

pytestmark = pytest.mark.django_db


def running(job: Job, node: str) -> Job:
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, node_name=node, started_at=timezone.now())
    job.refresh_from_db()
    return job


def test_a_forced_drain_names_a_notebook_by_its_own_id(cluster, people, monkeypatch):
    submit_job(people["bob"], team="nlp")  # job ids run ahead of notebook ids, as they do in a real portal
    session = notebook_session(people["alice"])
    notebook = session.notebook
    job = running(Job.objects.get(pk=notebook.session_id), "gpu-h100-01")
    assert job.pk != notebook.pk
    node = (settings_cluster_pk(), "gpu-h100-01")
    monkeypatch.setattr(draining, "nodes_draining", lambda now: {node: 7})
    monkeypatch.setattr(draining, "nodes_forced", lambda: {node: ForcedDrain(7, "carving", people["admin"])})

    assert draining.preempt_on_draining_nodes() == 1
    notice = Notification.objects.get(user=people["alice"])
    assert f"notebook #{notebook.pk} {notebook.name}" in notice.title
    assert f"#{job.pk}" not in notice.title
    assert notice.url == notebook.get_absolute_url()


def test_a_cancelled_job_is_still_named_by_its_job_id(cluster, people):
    job = submit_job(people["alice"])
    actions.cancel_job(people["admin"], job, "the node goes down")
    notice = Notification.objects.get(user=people["alice"])
    assert f"job #{job.pk} {job.name}" in notice.title and notice.url == job.get_absolute_url()
