"""Inference services on the pages: the list, the "New service" form (every problem next to its field at once),
the detail page (address, health, rollout, autoscaling, replicas with utilisation, idle suggestion, timeline) and
its actions through jobs.service.ops, allowed to the owner, a lead or an admin only; other teams get 404."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import override_settings

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import ServiceState
from jobs.models.service import InferenceService
from jobs.service import ops as service_ops
from jobs.service import summary as service_summary
from telemetry.models import GpuSample
from tests import factories
from tests.sim_objects import H100

SPEC = {"name": "chat", "image": "vllm/vllm-openai:v0.4.0", "command": ["python", "serve.py"], "count": 1,
        "cpu_millicores": 4000, "memory_mb": 16384}  # fmt: skip
FIELDS = {"port": 8000, "readiness": {"type": "http", "path": "/health"}, "min_replicas": 2, "max_replicas": 6,
          "metric": "cpu", "metric_target": 70.0}  # fmt: skip


@pytest.fixture
def h100(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    return rc


@pytest.fixture
def member(people):
    """carol, a plain member of vision."""
    return factories.member(people["vision"])


@pytest.fixture
def svc(people, h100, member):
    """A service of carol's (a plain member of vision) with two ready replicas reported by the cycle."""
    service = service_ops.create_service(member, people["vision"], h100, SPEC, FIELDS)
    InferenceService.objects.filter(pk=service.pk).update(
        granted_replicas=3, borrowed_replicas=1,
        observed={"revision": 1, "replicas": 2, "updated": 2, "ready": 2, "available": 2, "desired": 2, "restarts": 1,
                  "last_probe_failure": "Readiness probe failed: HTTP 503 on /health",
                  "replica_pods": [{"pod": "chat-6d9f-abcde", "node": "gpu-h100-01", "ready": True, "restarts": 1},
                                   {"pod": "chat-6d9f-fghij", "node": "gpu-h100-02", "ready": False, "restarts": 0}]},
    )  # fmt: skip
    service.refresh_from_db()
    return service


def form_data(team, rc, **overrides):
    data = {
        "team": team.pk, "name": "chat", "image": "vllm/vllm-openai:v0.4.0", "command": "python serve.py",
        "args": "", "env": "", "secret_env": "", "secret_files": "", "resource_class": rc.pk, "count": "1",
        "cpu": "4", "memory_mb": "16384", "priority": "50", "labels": "", "working_dir": "", "port": "8000",
        "readiness_type": "http", "readiness_path": "/health", "readiness_port": "", "readiness_delay": "10",
        "liveness_type": "", "liveness_path": "", "liveness_port": "", "liveness_delay": "",
        "min_replicas": "2", "max_replicas": "4", "metric": "cpu", "metric_name": "", "metric_target": "70",
    }  # fmt: skip
    data.update(overrides)
    return data


def test_nav_has_services_and_the_list_shows_class_readiness_and_address(client, people, svc):
    client.force_login(people["alice"])
    page = client.get("/services/").content.decode()
    assert 'href="/services/" aria-current="page">Services</a>' in page
    assert f"2–6 × 1 {svc.job.resource_class.display_name}" in page
    assert 'data-role="ready" data-label="Ready / desired">2 / 2</td>' in page
    assert "chat.team-vision.svc.cluster.local:8000" in page.replace("<wbr>", "")  # break points for narrow columns


def test_other_teams_neither_list_nor_open_a_service(client, people, svc):
    client.force_login(people["bob"])
    assert "chat.team-vision" not in client.get("/services/").content.decode()
    assert client.get(f"/services/{svc.pk}/").status_code == 404
    assert client.post(f"/services/{svc.pk}/stop/").status_code == 404
    svc.refresh_from_db()
    assert svc.state == ServiceState.ACTIVE


def test_new_service_form_creates_a_queued_service(client, people, h100):
    client.force_login(people["alice"])
    response = client.post("/services/new/", form_data(people["vision"], h100))
    service = InferenceService.objects.get(name="chat")
    assert response.status_code == 302 and response.url == f"/services/{service.pk}/"
    assert (service.min_replicas, service.max_replicas, service.metric_target) == (2, 4, 70.0)
    assert service.readiness == {"type": "http", "path": "/health", "initial_delay_seconds": 10}
    assert service.liveness == {}
    assert service.job.kind == "service" and service.job.command == ["python", "serve.py"]
    assert service.job.cpu_millicores == 4000


def test_new_service_form_shows_every_problem_next_to_its_field(client, people, h100):
    client.force_login(people["alice"])
    data = form_data(
        people["vision"], h100, name="Bad Name", readiness_path="health", min_replicas="5", max_replicas="3",
        metric="pods", metric_name="", image="",
    )  # fmt: skip
    response = client.post("/services/new/", data)
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert {"name", "image", "readiness_path", "max_replicas", "metric_name"} <= set(errors)
    assert "at least the minimum (5)" in " ".join(errors["max_replicas"])
    assert not InferenceService.objects.exists()
    page = response.content.decode()
    assert 'data-field="readiness_path"' in page and "starting with /" in page


def test_the_minimum_above_the_quota_limit_is_refused_on_the_minimum(client, people, h100):
    client.force_login(people["alice"])
    response = client.post("/services/new/", form_data(people["vision"], h100, min_replicas="5", max_replicas="9",
                                                       count="2"))  # fmt: skip
    errors = response.context["form"].errors
    assert "limit of 8" in " ".join(errors["min_replicas"])
    assert len(errors["min_replicas"]) == 1  # said once, though the form and create_service both check it


@override_settings(PORTAL_SERVICE_URL_TEMPLATE="https://{name}-{team}.apps.example.com")
def test_detail_shows_address_health_rollout_autoscaling_and_replicas(client, people, svc):
    GpuSample.objects.create(ts=datetime.now(UTC) - timedelta(minutes=1), node_name="gpu-h100-01", gpu_uuid="GPU-1",
                             job_id=svc.job_id, util_pct=42.0, source="dcgm")  # fmt: skip
    client.force_login(people["alice"])
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert "chat.team-vision.svc.cluster.local:8000" in page
    assert 'href="https://chat-vision.apps.example.com"' in page
    assert 'data-ready="2" data-desired="2">2 of 2</dd>' in page
    assert "HTTP GET /health on port 8000" in page  # a probe without its own port checks the service's
    assert "Readiness probe failed: HTTP 503 on /health" in page
    assert "2 updated · 2 ready · 2 available of 2" in page
    assert 'data-testid="granted">3' in page and 'data-testid="borrowed">1' in page
    assert "takes it back with notice" in page
    assert 'data-pod="chat-6d9f-abcde" data-ready="true"' in page and ">42%</td>" in page
    assert 'data-pod="chat-6d9f-fghij" data-ready="false"' in page
    assert "HTTP GET /health on port" in page
    assert 'data-live="timeline"' in page and "Service chat created by carol" in page
    assert 'data-testid="service-pause"' in page  # alice leads the team


def test_no_external_url_without_a_template_and_no_buttons_for_members_not_owning(client, people, svc):
    other = factories.member(people["vision"], "dave")
    client.force_login(other)
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert 'data-testid="external-url"' not in page and "no external URL template" in page
    assert 'data-testid="service-pause"' not in page and 'data-testid="change-image"' not in page
    response = client.post(f"/services/{svc.pk}/pause/", follow=True)
    assert "Only the service&#x27;s owner" in response.content.decode()
    svc.refresh_from_db()
    assert svc.state == ServiceState.ACTIVE


def test_idle_for_a_day_suggests_lowering_the_minimum(client, people, svc):
    client.force_login(people["alice"])
    InferenceService.objects.filter(pk=svc.pk).update(idle_since=datetime.now(UTC) - timedelta(hours=2))
    assert 'data-testid="idle-flag"' not in client.get(f"/services/{svc.pk}/").content.decode()
    InferenceService.objects.filter(pk=svc.pk).update(idle_since=datetime.now(UTC) - timedelta(hours=25))
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert 'data-testid="idle-flag"' in page and "Consider lowering the minimum from 2" in page


def test_owner_changes_image_scales_pauses_resumes_rolls_back_and_stops(client, people, svc, member):
    client.force_login(member)
    client.post(f"/services/{svc.pk}/image/", {"image": "vllm/vllm-openai:v0.5.0"})
    svc.refresh_from_db()
    assert svc.job.image == "vllm/vllm-openai:v0.5.0" and svc.revision == 2
    assert svc.previous_spec["image"] == "vllm/vllm-openai:v0.4.0"
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert 'data-testid="service-rollback"' in page

    response = client.post(f"/services/{svc.pk}/scale/", {"min_replicas": "1", "max_replicas": "3"}, follow=True)
    assert "now runs 1 to 3 replicas" in response.content.decode()
    svc.refresh_from_db()
    assert (svc.min_replicas, svc.max_replicas) == (1, 3)

    response = client.post(f"/services/{svc.pk}/scale/", {"min_replicas": "4", "max_replicas": "2"}, follow=True)
    assert "at least the minimum (4)" in response.content.decode()

    client.post(f"/services/{svc.pk}/pause/")
    svc.refresh_from_db()
    assert svc.state == ServiceState.PAUSED
    client.post(f"/services/{svc.pk}/resume/")
    svc.refresh_from_db()
    assert svc.state == ServiceState.ACTIVE

    client.post(f"/services/{svc.pk}/rollback/")
    svc.refresh_from_db()
    assert svc.job.image == "vllm/vllm-openai:v0.4.0"

    client.post(f"/services/{svc.pk}/stop/")
    svc.refresh_from_db()
    assert svc.state == ServiceState.STOPPED
    actions = set(
        AuditEvent.objects.filter(object_type="jobs.InferenceService", object_id=str(svc.pk)).values_list(
            "action", flat=True
        )
    )
    assert len(actions) >= 5
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert "data-live-every" not in page and 'data-testid="service-stop"' not in page


def test_a_bad_image_change_is_refused_in_words(client, people, svc, member):
    client.force_login(member)
    response = client.post(f"/services/{svc.pk}/image/", {"image": "Not An Image"}, follow=True)
    assert response.status_code == 200
    svc.refresh_from_db()
    assert svc.revision == 1 and svc.job.image == "vllm/vllm-openai:v0.4.0"
    assert 'class="messages' in response.content.decode() or "error" in response.content.decode()


def test_a_new_revision_is_not_shown_complete_on_the_last_revisions_numbers(client, people, svc, member):
    """The cycle observes the Deployment before it applies a change: right after "Change image" the observed
    numbers are the old revision's, and a rollout with an old replica left is not complete either."""
    client.force_login(member)
    client.post(f"/services/{svc.pk}/image/", {"image": "vllm/vllm-openai:v0.5.0"})
    svc.refresh_from_db()
    assert svc.revision == 2 and svc.observed["revision"] == 1 and svc.observed["updated"] == 2
    progress = service_summary.rollout(svc)
    assert (progress.updated, progress.complete) == (0, False)
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert 'data-revision="2" data-complete="false"' in page and "0 updated" in page
    assert "in progress: 2 of 2 replicas ready, 0 of 2 on revision 2" in page
    # The Deployment now carries revision 2: one new replica ready, one of revision 1 still there (3 in all).
    observed = svc.observed | {"revision": 2, "replicas": 3, "updated": 2, "ready": 3, "available": 3}
    InferenceService.objects.filter(pk=svc.pk).update(observed=observed)
    svc.refresh_from_db()
    assert service_summary.rollout(svc).complete is False
    InferenceService.objects.filter(pk=svc.pk).update(observed=observed | {"replicas": 2, "available": 2})
    svc.refresh_from_db()
    assert service_summary.rollout(svc).complete is True


def test_a_rollout_under_way_says_how_many_replicas_are_ready(client, people, svc):
    # All 4 replicas already run the new revision but only 3 are ready: "in progress (100%)" said nothing useful.
    InferenceService.objects.filter(pk=svc.pk).update(
        granted_replicas=4,
        observed={"revision": 1, "replicas": 4, "updated": 4, "ready": 3, "available": 3, "desired": 4},
    )
    client.force_login(people["alice"])
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert "in progress: 3 of 4 replicas ready" in page
    assert "%)" not in page
    # Part-way through: how many run the new revision too.
    InferenceService.objects.filter(pk=svc.pk).update(
        observed={"revision": 1, "replicas": 5, "updated": 2, "ready": 4, "available": 4, "desired": 4},
    )
    page = client.get(f"/services/{svc.pk}/").content.decode()
    assert "in progress: 4 of 4 replicas ready, 2 of 4 on revision 1" in page
