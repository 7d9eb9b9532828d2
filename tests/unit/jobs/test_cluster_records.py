"""What the portal records and tells about work in a cluster names the cluster (issue 32, item 6): audit records
(core.audit, through the object's ``audit_cluster`` or the caller's ``cluster``) and the audit page and CSV that
show and filter them, job and node-operation webhook events, and the job event streams."""

from __future__ import annotations

import csv
import io
import json

import pytest
from django.utils import timezone

from accounts.choices import AuditAction
from core import audit, webhooks
from core.models import AuditEvent, Delivery, Webhook
from gpus import fleet
from gpus.choices import ClusterHealth, InventoryAuditAction
from gpus.models import Cluster, Node, NodeConfigOperation
from gpus.nodeconfig import _fail
from jobs import actions, lifecycle, lifecycle_bulk
from jobs.choices import JobAuditAction, JobState
from jobs.models import Job
from tests.factories import submit_job
from tests.sse import events as sse_events

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def no_broker(monkeypatch):
    monkeypatch.setattr(webhooks, "kick", lambda webhook_id: None)


@pytest.fixture
def cloud(cluster):
    """A second cluster of the fleet (no nodes needed: jobs are written onto it directly)."""
    return Cluster.objects.create(name="cloud", connection="simulated", sim_scenario="cloud",
                                  health=ClusterHealth.REACHABLE)  # fmt: skip


def placed_on(job: Job, cluster: Cluster, state: str = JobState.RUNNING) -> Job:
    Job.objects.filter(pk=job.pk).update(state=state, cluster=cluster, node_name="gke-a3-h100-01",
                                         started_at=timezone.now())  # fmt: skip
    job.refresh_from_db()
    return job


# -- audit records ------------------------------------------------------------------------------------------------


def test_audit_records_name_the_cluster_of_what_they_concern(cloud, people):
    job = submit_job(people["alice"], clusters=["cloud", "default"])
    submitted = AuditEvent.objects.get(action=JobAuditAction.JOB_SUBMIT, object_id=str(job.pk))
    assert submitted.cluster == "", "not placed yet: no cluster"
    actions.cancel_job(people["alice"], placed_on(job, cloud))
    cancelled = AuditEvent.objects.get(action=JobAuditAction.JOB_CANCEL, object_id=str(job.pk))
    assert cancelled.cluster == "cloud"

    node = Node.objects.filter(cluster__name="default").order_by("name").first()
    op = NodeConfigOperation.objects.create(node=node, kind="time-slicing", state="applying",
                                            state_changed_at=timezone.now())  # fmt: skip
    assert _fail(op, timezone.now(), "MIG Manager reported failed.")
    assert AuditEvent.objects.get(action=InventoryAuditAction.NODE_CONFIG_FAIL).cluster == "default"

    team = audit.record(people["admin"], AuditAction.TEAM_UPDATE, people["vision"], team=people["vision"])
    assert team.cluster == "", "a team lives in no cluster"
    named = audit.record(None, InventoryAuditAction.NODE_GONE, object_type="gpus.Node", object_id="1", cluster="east")
    assert named.cluster == "east"


def test_registering_a_cluster_is_audited_under_its_name(cluster, people, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    fleet.register(people["admin"], fleet.ClusterInput(name="cloud", connection="simulated", sim_scenario="cloud"))
    assert AuditEvent.objects.get(action=InventoryAuditAction.CLUSTER_REGISTER).cluster == "cloud"


def test_the_audit_page_and_csv_show_and_filter_the_cluster(cloud, people, client):
    job = placed_on(submit_job(people["alice"]), cloud)
    actions.cancel_job(people["alice"], job)
    audit.record(people["admin"], AuditAction.TEAM_UPDATE, people["vision"], team=people["vision"])
    client.force_login(people["admin"])
    page = client.get("/audit/")
    assert page.status_code == 200 and page.context["show_cluster"]
    assert '<td data-col="cluster">cloud</td>' in page.text
    only = client.get("/audit/", {"cluster": "cloud"})
    assert [e.action for e in only.context["page"].object_list] == [JobAuditAction.JOB_CANCEL]
    assert client.get("/audit/", {"cluster": "elsewhere"}).context["page"].paginator.count == 0
    assert client.get("/audit/", {"cluster": "Not a name!"}).status_code == 400
    exported = client.get("/audit.csv", {"cluster": "cloud"})
    rows = list(csv.DictReader(io.StringIO(b"".join(exported.streaming_content).decode())))
    assert [(r["action"], r["cluster"]) for r in rows] == [(JobAuditAction.JOB_CANCEL, "cloud")]


def test_the_audit_page_has_no_cluster_column_while_no_record_names_one(people, client):
    audit.record(people["admin"], AuditAction.TEAM_UPDATE, people["vision"], team=people["vision"])
    client.force_login(people["admin"])
    page = client.get("/audit/")
    assert not page.context["show_cluster"] and 'data-col="cluster"' not in page.text


# -- webhooks -----------------------------------------------------------------------------------------------------


def received(hook) -> list[tuple[str, dict]]:
    return [(d.event_type, d.payload["data"]) for d in Delivery.objects.filter(webhook=hook).order_by("id")]


def test_job_webhook_events_carry_the_cluster(cloud, people, django_capture_on_commit_callbacks):
    hook = Webhook.objects.create(team=people["vision"], name="ci", url="https://h.example.org/", events=["job.*"])
    with django_capture_on_commit_callbacks(execute=True):
        job = submit_job(people["alice"], clusters=["cloud", "default"])
    placed_on(job, cloud, JobState.ADMITTED)
    now = timezone.now()
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle.start(job, now, now, "pod-0")
    other = placed_on(submit_job(people["alice"], name="mass"), cloud, JobState.ADMITTED)
    with django_capture_on_commit_callbacks(execute=True):
        lifecycle_bulk.start_many([(other, now, "pod-1")], now)  # the cycle's mass start, with its plain rows
    events = received(hook)
    assert [e for e, _ in events] == ["job.queued", "job.running", "job.running"]
    queued, running, mass = (data for _, data in events)
    assert (queued["cluster"], queued["clusters"]) == (None, ["cloud", "default"])
    assert (running["cluster"], running["clusters"]) == ("cloud", ["cloud", "default"])
    assert (mass["job"], mass["cluster"], mass["clusters"]) == (other.pk, "cloud", [])


def test_node_operation_webhook_events_carry_the_cluster(cluster, people, django_capture_on_commit_callbacks):
    hook = Webhook.objects.create(
        team=people["nlp"], name="b", url="https://h.example.org/", events=["node_operation.*"]
    )
    node = Node.objects.order_by("name").first()
    op = NodeConfigOperation.objects.create(node=node, kind="time-slicing", state="applying",
                                            state_changed_at=timezone.now())  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        _fail(op, timezone.now(), "MIG Manager reported failed.")
    [(event, data)] = received(hook)
    assert event == "node_operation.failed" and (data["node"], data["cluster"]) == (node.name, "default")


# -- event streams ------------------------------------------------------------------------------------------------


def test_a_job_event_stream_names_the_cluster(cloud, people, api_client, settings):
    settings.PORTAL_EVENT_STREAM_SECONDS = 0  # the timeline so far, then the end (the job has ended)
    job = placed_on(submit_job(people["alice"]), cloud)
    actions.cancel_job(people["alice"], job)
    queued = submit_job(people["alice"], name="waiting")
    api_client.force_authenticate(people["alice"])
    sent = sse_events(api_client.get(f"/api/v1/jobs/{job.pk}/events/stream/"))
    data = [json.loads(e["data"]) for e in sent if e.get("event") in ("submitted", "cancelled")]
    assert [d["cluster"] for d in data] == ["cloud", "cloud"]
    waiting = sse_events(api_client.get(f"/api/v1/jobs/{queued.pk}/events/stream/"))
    assert [json.loads(e["data"])["cluster"] for e in waiting if e.get("event") == "submitted"] == [None]
