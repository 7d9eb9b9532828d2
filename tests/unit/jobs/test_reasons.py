"""Acting on someone else's work (issue 18): a lead or an admin who cancels a member's job, stops a member's
notebook or stops a member's service says why — over the API and on the pages — and the owner is told (the bell
and an e-mail); the reason is in the timeline and the audit record. The owner's own work needs no reason and
sends no notice."""

from __future__ import annotations

import pytest
from django.core import mail

from core.models import AuditEvent, Notification
from gpus.models import ResourceClass
from jobs import actions, notices
from jobs.choices import JobState, NotebookState, ServiceState
from jobs.models import Job, JobEvent, Notebook
from jobs.models.service import InferenceService
from tests.factories import member
from tests.sim_objects import H100

REASON = "Node gpu-07 goes down for a driver upgrade at 14:00."
SERVICE = {"team": "vision", "name": "chat", "image": "vllm/vllm-openai:v0.4.0", "command": ["python", "serve.py"],
           "resource_class": H100, "count": 1, "cpu": "4", "memory_mb": 16384, "port": 8000,
           "min_replicas": 1, "max_replicas": 2}  # fmt: skip


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    carol = member(people["vision"])
    return {**people, "carol": carol, "rc": rc}


def queued(setup, owner="carol") -> Job:
    fields = {
        "name": "train", "image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04", "command": ["sleep", "60"], "args": [],
        "env": [], "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "priority": 50, "preemptible": False,
        "max_runtime_seconds": 3600,
    }  # fmt: skip
    return actions.submit_job(setup[owner], setup["vision"], setup["rc"], fields).job


def notebook_of_carol(api_client, setup) -> Notebook:
    api_client.force_authenticate(setup["carol"])
    body = {"team": "vision", "name": "scratch", "resource_class": H100}
    response = api_client.post("/api/v1/notebooks/", body, format="json")
    assert response.status_code == 201, response.json()
    return Notebook.objects.get(pk=response.json()["id"])


def service_of_carol(api_client, setup) -> InferenceService:
    api_client.force_authenticate(setup["carol"])
    response = api_client.post("/api/v1/services/", SERVICE, format="json")
    assert response.status_code == 201, response.data
    return InferenceService.objects.get(pk=response.data["id"])


def assert_carol_was_told(setup, what: str, reason: str = REASON) -> None:
    note = Notification.objects.get(user=setup["carol"])
    assert note.title.startswith(f"alice {what}") and reason in note.body and note.url
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == ["carol@example.org"] and sent.subject == note.title and reason in sent.body
    assert note.url in sent.body


# -- jobs -----------------------------------------------------------------------------------------------------


def test_cancelling_someone_elses_job_over_the_api_needs_a_reason(api_client, setup):
    job = queued(setup)
    api_client.force_authenticate(setup["alice"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 400
    assert response.json()["reason"] == ["Say why you are stopping someone else's job: the owner is told your reason."]
    too_long = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"reason": "x" * 501}, format="json")
    assert too_long.status_code == 400 and "reason" in too_long.json()
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and not Notification.objects.exists() and not mail.outbox


def test_the_reason_is_in_the_timeline_and_audit_and_the_owner_is_told(api_client, setup):
    job = queued(setup)
    api_client.force_authenticate(setup["alice"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"reason": REASON}, format="json")
    assert response.status_code == 200 and response.json()["state"] == "cancelled"
    event = JobEvent.objects.filter(job=job).latest("pk")
    assert event.message == f"Cancelled by alice: {REASON}" and event.data["reason"] == REASON
    audit = AuditEvent.objects.get(action="job.cancel", object_id=str(job.pk))
    assert audit.actor == setup["alice"] and audit.after == {"state": "cancelled", "reason": REASON}
    assert_carol_was_told(setup, f"cancelled your job #{job.pk} train")
    # The job page's timeline shows who and why.
    client = api_client
    client.force_login(setup["carol"])
    assert f"Cancelled by alice: {REASON}" in client.get(job.get_absolute_url()).content.decode()


def test_the_owner_cancels_without_a_reason_and_is_not_told(api_client, setup):
    job = queued(setup)
    api_client.force_authenticate(setup["carol"])
    assert api_client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    assert JobEvent.objects.filter(job=job).latest("pk").message == "Cancelled by carol."
    assert not Notification.objects.exists() and not mail.outbox


def test_the_job_page_asks_a_lead_for_the_reason(client, setup):
    job = queued(setup)
    client.force_login(setup["carol"])
    assert 'name="reason"' not in client.get(job.get_absolute_url()).content.decode()  # her own job
    client.force_login(setup["alice"])
    assert 'name="reason"' in client.get(job.get_absolute_url()).content.decode()
    page = client.post(f"/jobs/{job.pk}/cancel/", follow=True).content.decode()
    assert "Say why you are stopping someone else&#x27;s job" in page
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
    client.post(f"/jobs/{job.pk}/cancel/", {"reason": REASON})
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    assert_carol_was_told(setup, f"cancelled your job #{job.pk} train")


# -- notebooks ------------------------------------------------------------------------------------------------


def test_stopping_someone_elses_notebook_needs_a_reason_and_tells_the_owner(api_client, setup):
    notebook = notebook_of_carol(api_client, setup)
    api_client.force_authenticate(setup["admin"])
    refused = api_client.post(f"/api/v1/notebooks/{notebook.pk}/stop/")
    assert refused.status_code == 400 and "someone else's notebook" in refused.json()["reason"][0]
    assert Notebook.objects.get(pk=notebook.pk).state == NotebookState.ACTIVE
    api_client.force_authenticate(setup["alice"])
    response = api_client.post(f"/api/v1/notebooks/{notebook.pk}/stop/", {"reason": REASON}, format="json")
    assert response.status_code == 200 and response.json()["stop_reason"] == "admin"
    event = JobEvent.objects.filter(job_id=notebook.session_id).latest("pk")
    assert event.message.endswith(f"(alice): {REASON}") and event.data["reason"] == REASON
    audit = AuditEvent.objects.get(action="notebook.stop")
    assert audit.actor == setup["alice"] and audit.after["reason"] == REASON
    assert_carol_was_told(setup, "stopped your notebook scratch")


def test_the_notebook_page_stop_takes_the_reason(client, api_client, setup):
    notebook = notebook_of_carol(api_client, setup)
    client.force_login(setup["alice"])
    assert 'data-testid="stop-reason-input"' in client.get(notebook.get_absolute_url()).content.decode()
    client.post(f"/notebooks/{notebook.pk}/stop/")
    assert Notebook.objects.get(pk=notebook.pk).state == NotebookState.ACTIVE
    client.post(f"/notebooks/{notebook.pk}/stop/", {"reason": REASON})
    assert Notebook.objects.get(pk=notebook.pk).state == NotebookState.STOPPED
    assert_carol_was_told(setup, "stopped your notebook scratch")


# -- services -------------------------------------------------------------------------------------------------


def test_stopping_someone_elses_service_needs_a_reason_and_tells_the_owner(api_client, setup):
    service = service_of_carol(api_client, setup)
    api_client.force_authenticate(setup["alice"])
    refused = api_client.delete(f"/api/v1/services/{service.pk}/")
    assert refused.status_code == 400 and "someone else's service" in refused.json()["reason"][0]
    assert InferenceService.objects.get(pk=service.pk).state != ServiceState.STOPPED
    assert api_client.delete(f"/api/v1/services/{service.pk}/?reason={REASON}").status_code == 204
    assert InferenceService.objects.get(pk=service.pk).state == ServiceState.STOPPED
    event = JobEvent.objects.filter(job_id=service.job_id).latest("pk")
    assert f"stopped by alice: {REASON}" in event.message and event.data["reason"] == REASON
    audit = AuditEvent.objects.get(action="service.stop")
    assert audit.actor == setup["alice"] and audit.after["reason"] == REASON
    assert_carol_was_told(setup, "stopped your service chat")


def test_the_service_page_stop_takes_the_reason(client, api_client, setup):
    service = service_of_carol(api_client, setup)
    client.force_login(setup["carol"])
    assert 'data-testid="stop-reason-input"' not in client.get(service.get_absolute_url()).content.decode()
    client.force_login(setup["admin"])
    client.post(f"/services/{service.pk}/stop/")
    assert InferenceService.objects.get(pk=service.pk).state != ServiceState.STOPPED
    client.post(f"/services/{service.pk}/stop/", {"reason": "Quota review."})
    assert InferenceService.objects.get(pk=service.pk).state == ServiceState.STOPPED
    note = Notification.objects.get(user=setup["carol"])
    assert note.title == "admin stopped your service chat" and "Quota review." in note.body


# -- the notice itself ----------------------------------------------------------------------------------------


def test_tell_owner_is_silent_for_the_owners_own_action_and_survives_a_mail_failure(setup, monkeypatch):
    notices.tell_owner(setup["carol"], setup["carol"], "", "cancelled your job #1 x")
    assert not Notification.objects.exists() and not mail.outbox

    def broken(*args, **kwargs):
        raise OSError("SMTP is down")

    monkeypatch.setattr(notices, "send_mail", broken)
    notices.tell_owner(setup["carol"], setup["admin"], "Drain.", "cancelled your job #1 x")
    assert Notification.objects.get(user=setup["carol"]).body == "Reason: Drain."


def test_the_teams_webhooks_get_the_reason_of_each_stop(api_client, setup, monkeypatch,
                                                        django_capture_on_commit_callbacks):  # fmt: skip
    from core import webhooks
    from core.models import Delivery, Webhook

    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)
    hook = Webhook.objects.create(team=setup["vision"], name="ops", url="https://h.example.org/",
                                  events=["job.cancelled", "notebook.stopped", "service.stopped"])  # fmt: skip
    job = queued(setup)
    notebook = notebook_of_carol(api_client, setup)
    service = service_of_carol(api_client, setup)
    api_client.force_authenticate(setup["alice"])
    with django_capture_on_commit_callbacks(execute=True):
        api_client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"reason": "one"}, format="json")
        api_client.post(f"/api/v1/notebooks/{notebook.pk}/stop/", {"reason": "two"}, format="json")
        api_client.delete(f"/api/v1/services/{service.pk}/?reason=three")
    deliveries = list(Delivery.objects.filter(webhook=hook))
    sent = {(d.event_type, d.payload.get("actor"), d.payload.get("reason")) for d in deliveries}
    assert {("job.cancelled", "alice", "one"), ("notebook.stopped", "alice", "two"),
            ("service.stopped", "alice", "three")} <= sent  # fmt: skip
