"""/api/v1/services/: team-visible list, create (400 with every problem at once), retrieve (address, health,
rollout, granted/borrowed, pods), PATCH (rollout or autoscaler), scale / pause / resume / rollback, DELETE (stop);
owner, lead or admin for changes, 403 for other members, 404 for other teams; the schema documents it."""

from __future__ import annotations

import pytest
from django.test import override_settings

from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import ServiceState
from jobs.models.service import InferenceService
from tests.sim_objects import H100

from ...factories import member

BODY = {"team": "vision", "name": "chat", "image": "vllm/vllm-openai:v0.4.0", "command": ["python", "serve.py"],
        "resource_class": H100, "count": 1, "cpu": "4", "memory_mb": 16384, "port": 8000,
        "readiness": {"type": "http", "path": "/health", "initial_delay_seconds": 5},
        "min_replicas": 2, "max_replicas": 6, "metric": "pods", "metric_name": "requests_per_second",
        "metric_target": 20}  # fmt: skip


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    carol = member(people["vision"])
    dave = member(people["vision"], "dave")
    return {**people, "carol": carol, "dave": dave, "rc": rc}


def create(client, user, **overrides):
    client.force_authenticate(user)
    return client.post("/api/v1/services/", {**BODY, **overrides}, format="json")


@override_settings(PORTAL_SERVICE_URL_TEMPLATE="https://{name}-{team}.apps.example.com")
def test_create_and_retrieve_show_spec_address_health_and_rollout(api_client, setup):
    response = create(api_client, setup["carol"])
    assert response.status_code == 201, response.data
    data = response.data
    assert data["state"] == "active" and data["job_state"] == "queued"
    assert (data["min_replicas"], data["max_replicas"], data["metric"]) == (2, 6, "pods")
    assert data["readiness"] == {"type": "http", "path": "/health", "initial_delay_seconds": 5}
    assert data["liveness"] == {}
    assert data["address"] == {"dns": "chat.team-vision.svc.cluster.local:8000",
                               "url": "https://chat-vision.apps.example.com"}  # fmt: skip
    assert data["size"].startswith("2–6 × 1 ")
    service = InferenceService.objects.get(pk=data["id"])
    InferenceService.objects.filter(pk=service.pk).update(
        granted_replicas=3, borrowed_replicas=1,
        observed={"revision": 1, "updated": 1, "ready": 2, "available": 2, "desired": 3, "restarts": 4,
                  "last_probe_failure": "Liveness probe failed", "replica_pods": [
                      {"pod": "chat-a", "node": "gpu-h100-01", "ready": True, "restarts": 4}]},
    )  # fmt: skip
    got = api_client.get(f"/api/v1/services/{service.pk}/").data
    assert got["health"] == {"ready": 2, "desired": 3, "restarts": 4, "last_probe_failure": "Liveness probe failed"}
    assert got["rollout"] == {"revision": 1, "updated": 1, "ready": 2, "available": 2, "desired": 3,
                              "complete": False}  # fmt: skip
    assert (got["granted_replicas"], got["borrowed_replicas"], got["hpa_desired"]) == (3, 1, 3)
    assert got["replica_pods"] == [{"pod": "chat-a", "node": "gpu-h100-01", "ready": True, "restarts": 4,
                                    "gpu_util": None}]  # fmt: skip


def test_create_answers_every_problem_at_once(api_client, setup):
    response = create(
        api_client, setup["carol"], name="Bad Name", image="", readiness={"type": "http", "path": "health"},
        min_replicas=5, max_replicas=3, metric_name="", replicas=4,
    )  # fmt: skip
    assert response.status_code == 400
    assert "replicas" in response.data  # an unknown field is named, not ignored
    response = create(
        api_client, setup["carol"], readiness={"type": "http", "path": "health"}, min_replicas=5, max_replicas=3,
        metric_name="", count=2,
    )  # fmt: skip
    assert response.status_code == 400
    assert {"readiness", "max_replicas", "metric_name", "min_replicas"} <= set(response.data), response.data
    assert not InferenceService.objects.exists()


def test_list_is_team_visible_only(api_client, setup):
    create(api_client, setup["carol"])
    api_client.force_authenticate(setup["bob"])
    assert api_client.get("/api/v1/services/").data["results"] == []
    api_client.force_authenticate(setup["dave"])
    assert [s["name"] for s in api_client.get("/api/v1/services/").data["results"]] == ["chat"]


def test_changes_are_for_owner_lead_or_admin(api_client, setup):
    pk = create(api_client, setup["carol"]).data["id"]
    api_client.force_authenticate(setup["bob"])  # another team
    assert api_client.patch(f"/api/v1/services/{pk}/", {"image": "x/y:2"}, format="json").status_code == 404
    assert api_client.delete(f"/api/v1/services/{pk}/").status_code == 404
    api_client.force_authenticate(setup["dave"])  # a member, not the owner
    assert api_client.patch(f"/api/v1/services/{pk}/", {"image": "x/y:2"}, format="json").status_code == 403
    assert api_client.post(f"/api/v1/services/{pk}/pause/").status_code == 403
    api_client.force_authenticate(setup["alice"])  # the team's lead
    assert api_client.post(f"/api/v1/services/{pk}/pause/").data["state"] == ServiceState.PAUSED
    api_client.force_authenticate(setup["admin"])
    assert api_client.post(f"/api/v1/services/{pk}/resume/").data["state"] == ServiceState.ACTIVE


def test_patch_rolls_out_scale_changes_the_autoscaler_rollback_and_delete(api_client, setup):
    pk = create(api_client, setup["carol"]).data["id"]
    data = api_client.patch(f"/api/v1/services/{pk}/", {"image": "vllm/vllm-openai:v0.5.0"}, format="json").data
    assert (data["image"], data["revision"]) == ("vllm/vllm-openai:v0.5.0", 2)
    data = api_client.patch(f"/api/v1/services/{pk}/", {"max_replicas": 4}, format="json").data
    assert (data["max_replicas"], data["revision"]) == (4, 2)
    bad = api_client.patch(f"/api/v1/services/{pk}/", {"count": 2, "image": "Bad Image"}, format="json")
    assert bad.status_code == 400 and {"count", "image"} <= set(bad.data)
    data = api_client.post(f"/api/v1/services/{pk}/scale/", {"min_replicas": 1, "max_replicas": 3}, format="json")
    assert (data.data["min_replicas"], data.data["max_replicas"]) == (1, 3)
    bad = api_client.post(f"/api/v1/services/{pk}/scale/", {"min_replicas": 4, "max_replicas": 2}, format="json")
    assert bad.status_code == 400 and "max_replicas" in bad.data
    data = api_client.post(f"/api/v1/services/{pk}/rollback/").data
    assert data["image"] == "vllm/vllm-openai:v0.4.0"
    assert api_client.delete(f"/api/v1/services/{pk}/").status_code == 204
    assert InferenceService.objects.get(pk=pk).state == ServiceState.STOPPED
    assert api_client.get("/api/v1/services/").data["results"] == []
    assert [s["id"] for s in api_client.get("/api/v1/services/?state=stopped").data["results"]] == [pk]


def test_schema_documents_the_service_endpoints(openapi_schema):
    schema = openapi_schema
    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/services/"])
    assert {"get", "patch", "delete"} <= set(paths["/api/v1/services/{id}/"])
    for name in ("scale", "pause", "resume", "rollback"):
        assert "post" in paths[f"/api/v1/services/{{id}}/{name}/"]
