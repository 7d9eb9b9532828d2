"""Job, notebook, service and node-operation transitions emit their webhook events (jobs.webhook_events,
gpus.webhook_events): after commit, with the actor and reason when a person acted."""

from __future__ import annotations

import pytest
from django.utils import timezone

from core import webhooks
from core.models import Delivery, Webhook
from gpus.models import Node, NodeConfigOperation
from gpus.nodeconfig import _fail
from jobs import lifecycle, webhook_events
from jobs.choices import JobState
from jobs.models import Job
from tests.factories import notebook_session, submit_job

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)


def received(webhook) -> list[tuple[str, dict]]:
    return [(d.event_type, d.payload) for d in Delivery.objects.filter(webhook=webhook).order_by("id")]


def test_a_jobs_life_reaches_the_teams_webhook(people, cluster, django_capture_on_commit_callbacks):
    hook = Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/", events=["job.*"])
    other = Webhook.objects.create(team=people["nlp"], name="x", url="https://h.example.org/", events=["job.*"])
    with django_capture_on_commit_callbacks(execute=True):
        job = submit_job(people["alice"], preemptible=True)
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, node_name="gpu-h100-01")
    job.refresh_from_db()
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.start(job, now, now, "pod-0")
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.cancel(job, now, "Cancelled by admin.", actor=people["admin"], reason="Over the fair share")
    events = received(hook)
    assert [e for e, _ in events] == ["job.queued", "job.running", "job.cancelled"]
    queued, _, cancelled = (payload for _, payload in events)
    assert queued["actor"] == "alice" and queued["data"]["owner"] == "alice" and queued["data"]["job"] == job.pk
    assert queued["data"]["url"].endswith(f"/jobs/{job.pk}/")
    assert (cancelled["actor"], cancelled["reason"]) == ("admin", "Over the fair share")
    assert cancelled["data"]["state"] == "cancelled"
    assert received(other) == [], "another team hears nothing"


def test_nothing_is_sent_for_a_transition_that_rolled_back(people, cluster, django_capture_on_commit_callbacks):
    hook = Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/", events=["job.*"])
    with django_capture_on_commit_callbacks(execute=True), pytest.raises(RuntimeError):
        from django.db import transaction

        with transaction.atomic():
            submit_job(people["alice"], preemptible=True)
            raise RuntimeError("rolled back")
    assert received(hook) == []


def test_a_failed_node_operation_reaches_every_subscribed_team(people, cluster, django_capture_on_commit_callbacks):
    vision = Webhook.objects.create(team=people["vision"], name="a", url="https://h.example.org/",
                                    events=["node_operation.failed"])  # fmt: skip
    nlp = Webhook.objects.create(
        team=people["nlp"], name="b", url="https://h.example.org/", events=["node_operation.*"]
    )
    node = Node.objects.order_by("name").first()
    op = NodeConfigOperation.objects.create(
        node=node, kind="time-slicing", state="applying", state_changed_at=timezone.now()
    )
    with django_capture_on_commit_callbacks(execute=True):
        assert _fail(op, timezone.now(), "MIG Manager reported failed.")
    for hook in (vision, nlp):
        [(event, payload)] = received(hook)
        assert event == "node_operation.failed" and payload["team"] is None
        assert payload["data"]["node"] == node.name and payload["reason"] == "MIG Manager reported failed."


def test_service_health_is_edge_triggered(people, monkeypatch):
    sent = []
    monkeypatch.setattr(webhook_events, "service", lambda svc, event, **kw: sent.append(event))

    class Svc:
        min_replicas = 2

    webhook_events.service_health(Svc, {}, {"ready": 1})
    webhook_events.service_health(Svc, {"ready": 1}, {"ready": 2})
    webhook_events.service_health(Svc, {"ready": 2}, {"ready": 3})
    webhook_events.service_health(Svc, {"ready": 3}, {"ready": 1})
    assert sent == ["service.ready", "service.degraded"]


def test_a_notebook_start_and_stop_reach_the_teams_webhook(people, cluster, django_capture_on_commit_callbacks):
    from jobs.choices import StopReason
    from jobs.notebook import sessions as notebooks

    hook = Webhook.objects.create(team=people["vision"], name="nb", url="https://h.example.org/", events=["notebook.*"])
    with django_capture_on_commit_callbacks(execute=True):
        nb = notebook_session(people["alice"]).notebook
    with django_capture_on_commit_callbacks(execute=True):
        notebooks.stop_notebook(people["admin"], nb, StopReason.ADMIN)
    with django_capture_on_commit_callbacks(execute=True):
        webhook_events.notebook_stopped(nb, StopReason.IDLE)
    events = received(hook)
    assert [e for e, _ in events] == ["notebook.started", "notebook.stopped", "notebook.culled"]
    assert events[1][1]["actor"] == "admin" and events[1][1]["reason"] == "Stopped by an admin or team lead"
    assert events[2][1]["reason"] == "Idle too long"
