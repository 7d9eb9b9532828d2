"""The jobs and quotas API: who may do what (anonymous, other team, member, lead, admin, read-only token),
what a bad request is told, idempotent retries, and the audit trail."""

from __future__ import annotations

import pytest

from gpus.models import ResourceClass
from jobs import services
from jobs.choices import JobState
from jobs.models import Job, Quota
from portal.choices import MembershipRole
from portal.models import APIToken, AuditEvent, Membership
from tests.factories import UserFactory

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
A40G = "nvidia.com/gpu@NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"  # nodes with an older driver: CUDA 12.2


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        services.set_quota(people["admin"], people[slug], rc, 8, 16)
    carol = UserFactory(username="carol")
    Membership.objects.create(user=carol, team=people["vision"], role=MembershipRole.MEMBER)
    return {**people, "carol": carol, "rc": rc}


def body(**overrides):
    data = {
        "team": "vision",
        "name": "resnet",
        "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": ["python", "train.py"],
        "env": {"EPOCHS": "10"},
        "resource_class": H100,
        "count": 2,
        "cpu": 4,
        "memory_mb": 16384,
    }
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def submit_as(client, user, **overrides):
    client.force_login(user)
    return client.post("/api/v1/jobs/", body(**overrides), format="json")


def test_member_submits_and_sees_the_queued_job(api_client, setup):
    response = submit_as(api_client, setup["carol"])
    assert response.status_code == 201, response.json()
    data = response.json()
    job = Job.objects.get(pk=data["id"])
    assert (job.owner, job.team, job.count, job.cpu_millicores) == (setup["carol"], setup["vision"], 2, 4000)
    assert job.env == [{"name": "EPOCHS", "value": "10"}]
    assert data["state"] == "queued" and data["priority"] == "normal" and data["cpu"] == 4.0
    assert data["resource_class"] == setup["rc"].pk and data["gpu_units"] == 2.0
    audit = AuditEvent.objects.get(action="job.submit")
    assert audit.actor == setup["carol"] and audit.object_id == str(job.pk) and audit.team == setup["vision"]


def test_who_sees_which_jobs(api_client, setup):
    job = services.submit_job(setup["carol"], setup["vision"], setup["rc"], _fields()).job
    expectations = {"alice": 200, "carol": 200, "admin": 200, "bob": 404, "outsider": 404}
    for name, code in expectations.items():
        api_client.force_login(setup[name])
        assert api_client.get(f"/api/v1/jobs/{job.pk}/").status_code == code, name
        listed = [j["id"] for j in api_client.get("/api/v1/jobs/").json()["results"]]
        assert (job.pk in listed) == (code == 200), name
        assert api_client.get(f"/api/v1/jobs/{job.pk}/events/").status_code == code, name
    api_client.logout()
    assert api_client.get("/api/v1/jobs/").status_code in (401, 403)
    assert api_client.post("/api/v1/jobs/", body(), format="json").status_code in (401, 403)


def _fields(**overrides):
    fields = dict(
        name="train", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "60"], args=[], env=[],
        count=1, cpu_millicores=1000, memory_mb=4096, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    fields.update(overrides)
    return fields


@pytest.mark.parametrize(
    ("actor", "code", "state"),
    [("carol", 200, "cancelled"), ("alice", 200, "cancelled"), ("admin", 200, "cancelled"),
     ("bob", 404, "queued"), ("outsider", 404, "queued")],
)  # fmt: skip
def test_cancel_rights(api_client, setup, actor, code, state):
    job = services.submit_job(setup["carol"], setup["vision"], setup["rc"], _fields()).job
    api_client.force_login(setup[actor])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == code
    job.refresh_from_db()
    assert job.state == state
    assert AuditEvent.objects.filter(action="job.cancel").count() == (1 if code == 200 else 0)


def test_a_member_cannot_cancel_a_teammates_job(api_client, setup):
    job = services.submit_job(setup["alice"], setup["vision"], setup["rc"], _fields()).job
    api_client.force_login(setup["carol"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 403
    assert "owner, a lead of its team or an admin" in response.json()["detail"]
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
    # Cancelling twice says why.
    api_client.force_login(setup["alice"])
    assert api_client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    again = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 400 and "nothing to cancel" in str(again.json())


def test_resubmit_makes_a_new_job_from_an_ended_one(api_client, setup):
    job = services.submit_job(setup["carol"], setup["vision"], setup["rc"], _fields(name="sweep")).job
    api_client.force_login(setup["carol"])
    assert api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/").status_code == 400  # still queued
    services.cancel_job(setup["carol"], job)
    response = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert response.status_code == 201
    new = Job.objects.get(pk=response.json()["id"])
    assert new.pk != job.pk and new.name == "sweep" and new.resubmitted_from == job and new.state == "queued"
    assert AuditEvent.objects.filter(action="job.resubmit", object_id=str(new.pk)).exists()
    api_client.force_login(setup["bob"])
    assert api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/").status_code == 404


def test_submitting_for_a_team_you_are_not_in_is_forbidden(api_client, setup):
    response = submit_as(api_client, setup["bob"], team="vision")
    assert response.status_code == 403 and "not a member of team Computer Vision" in response.json()["detail"]
    response = submit_as(api_client, setup["outsider"], team=None)
    assert response.status_code == 400 and "you belong to: none" in str(response.json()["team"])
    assert Job.objects.count() == 0


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"resource_class": "nvidia.com/gpu@NO-SUCH-GPU"}, "resource_class", "No resource class"),
        ({"count": 0}, "count", "greater than or equal to 1"),
        ({"count": -1}, "count", "greater than or equal to 1"),
        ({"count": "two"}, "count", "valid integer"),
        ({"count": 9}, "count", "largest has 8"),
        ({"image": "Not An Image!"}, "image", "not a container image reference"),
        ({"image": "UPPER/case"}, "image", "not a container image reference"),
        ({"env": {"1ABC": "x"}}, "env", "not a valid environment variable name"),
        ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, "env", "set by the NVIDIA device plugin"),
        ({"image": "nvidia/cuda:13.0.0-runtime-ubuntu24.04"}, "image", "support at most CUDA 12.4"),
        ({"name": "Has Capitals"}, "name", "lowercase letters"),
        ({"gpus": 4}, "gpus", "Unknown field"),
        ({"cpu": 0}, "cpu", "greater than or equal to 0.1"),
        ({"max_runtime_seconds": 10}, "max_runtime_seconds", "greater than or equal to 60"),
        ({"priority": "urgent"}, "priority", "not a valid choice"),
        ({"command": "python train.py"}, "command", "list"),
    ],
)
def test_bad_requests_say_what_to_fix_and_store_nothing(api_client, setup, overrides, field, words):
    before = Job.objects.count()
    response = submit_as(api_client, setup["carol"], **overrides)
    assert response.status_code == 400, response.json()
    assert words in " ".join(map(str, response.json()[field])), response.json()
    assert Job.objects.count() == before


def test_hidden_and_unquoted_classes(api_client, setup):
    rc = setup["rc"]
    ResourceClass.objects.filter(pk=rc.pk).update(hidden=True)
    response = submit_as(api_client, setup["carol"])
    assert response.status_code == 400 and "No resource class" in str(response.json()["resource_class"])
    ResourceClass.objects.filter(pk=rc.pk).update(hidden=False)
    old = ResourceClass.objects.get(key=A40G)
    response = submit_as(api_client, setup["carol"], resource_class=old.pk, count=1)
    assert response.status_code == 400 and "no quota for" in str(response.json()["resource_class"])
    # With a quota, an image newer than those nodes' driver (CUDA 12.2) is refused for that class only.
    services.set_quota(setup["admin"], setup["vision"], old, 2, 2)
    response = submit_as(api_client, setup["carol"], resource_class=old.pk, count=1)
    assert response.status_code == 400 and "support at most CUDA 12.2" in str(response.json()["image"])
    assert Job.objects.count() == 0


def test_idempotency_key(api_client, setup):
    api_client.force_login(setup["carol"])
    headers = {"HTTP_IDEMPOTENCY_KEY": "pipeline-run-42"}
    first = api_client.post("/api/v1/jobs/", body(), format="json", **headers)
    again = api_client.post("/api/v1/jobs/", body(), format="json", **headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and Job.objects.count() == 1
    other = api_client.post("/api/v1/jobs/", body(count=3), format="json", **headers)
    assert other.status_code == 422 and "different request" in other.json()["detail"]
    long = api_client.post("/api/v1/jobs/", body(), format="json", HTTP_IDEMPOTENCY_KEY="x" * 101)
    assert long.status_code == 400 and Job.objects.count() == 1


def test_read_only_token_reads_but_cannot_submit(api_client, setup):
    _, raw = APIToken.issue(setup["carol"], "dashboards", read_only=True)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert api_client.get("/api/v1/jobs/", **headers).status_code == 200
    response = api_client.post("/api/v1/jobs/", body(), format="json", **headers)
    assert response.status_code == 403 and "read-only" in response.json()["detail"]
    _, raw = APIToken.issue(setup["carol"], "pipeline")
    response = api_client.post("/api/v1/jobs/", body(), format="json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 201 and Job.objects.get().owner == setup["carol"]


def test_logs_need_a_pod(api_client, setup):
    job = services.submit_job(setup["carol"], setup["vision"], setup["rc"], _fields()).job
    api_client.force_login(setup["carol"])
    response = api_client.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert response.status_code == 404 and "no pod yet" in response.json()["detail"]
    assert api_client.get(f"/api/v1/jobs/{job.pk}/logs/?tail=0").status_code == 400


def test_quota_api_rights_and_validation(api_client, setup):
    quota = Quota.objects.get(team=setup["vision"], resource_class=setup["rc"])
    services.submit_job(setup["carol"], setup["vision"], setup["rc"], _fields(count=3))
    Job.objects.update(state=JobState.RUNNING, node_name="gpu-h100-01")
    api_client.force_login(setup["carol"])
    listed = api_client.get("/api/v1/quotas/").json()["results"]
    assert [(q["team"], q["used"], q["guaranteed"], q["limit"]) for q in listed] == [("vision", 3, 8, 16)]
    assert api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 20}, format="json").status_code == 403
    api_client.force_login(setup["bob"])
    assert api_client.get(f"/api/v1/quotas/{quota.pk}/").status_code == 404

    api_client.force_login(setup["admin"])
    bad = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 4}, format="json")
    assert bad.status_code == 400 and "at least the guaranteed amount (8)" in str(bad.json()["limit"])
    quota.refresh_from_db()
    assert quota.limit == 16
    ok = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 24, "monthly_gpu_hours": "500"}, format="json")
    assert ok.status_code == 200 and ok.json()["limit"] == 24 and ok.json()["monthly_gpu_hours"] == "500.0"
    event = AuditEvent.objects.filter(action="quota.set", object_id=str(quota.pk)).latest("when")
    assert event.before["limit"] == 16 and event.after["limit"] == 24 and event.actor == setup["admin"]
    dup = api_client.post(
        "/api/v1/quotas/",
        {"team": "vision", "resource_class": setup["rc"].pk, "guaranteed": 1, "limit": 1},
        format="json",
    )
    assert dup.status_code == 400 and f"PATCH /api/v1/quotas/{quota.pk}/" in str(dup.json())
    a40 = ResourceClass.objects.get(key=A40G)
    created = api_client.post(
        "/api/v1/quotas/", {"team": "nlp", "resource_class": a40.pk, "guaranteed": 7, "limit": 14}, format="json"
    )
    assert created.status_code == 201 and created.json()["used"] == 0
    assert api_client.delete(f"/api/v1/quotas/{created.json()['id']}/").status_code == 204
    assert AuditEvent.objects.filter(action="quota.delete").count() == 1
    assert not Quota.objects.filter(pk=created.json()["id"]).exists()


def test_resubmitting_twice_makes_one_new_job(api_client, setup):
    job = services.submit_job(setup["carol"], setup["vision"], setup["rc"], _fields()).job
    services.cancel_job(setup["carol"], job)
    api_client.force_login(setup["carol"])
    first = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/").json()["id"]
    second = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/").json()["id"]
    assert first == second and Job.objects.filter(resubmitted_from=job).count() == 1
    assert job.events.filter(kind="resubmitted").count() == 1


def test_anonymous_gets_nothing_from_any_endpoint(api_client, setup):
    job = services.submit_job(setup["carol"], setup["vision"], setup["rc"], _fields()).job
    quota = Quota.objects.get(team=setup["vision"], resource_class=setup["rc"])
    calls = [
        ("get", "/api/v1/jobs/"), ("post", "/api/v1/jobs/"), ("get", f"/api/v1/jobs/{job.pk}/"),
        ("post", f"/api/v1/jobs/{job.pk}/cancel/"), ("post", f"/api/v1/jobs/{job.pk}/resubmit/"),
        ("get", f"/api/v1/jobs/{job.pk}/events/"), ("get", f"/api/v1/jobs/{job.pk}/logs/"),
        ("get", "/api/v1/quotas/"), ("post", "/api/v1/quotas/"), ("get", f"/api/v1/quotas/{quota.pk}/"),
        ("patch", f"/api/v1/quotas/{quota.pk}/"), ("delete", f"/api/v1/quotas/{quota.pk}/"),
    ]  # fmt: skip
    for method, url in calls:
        response = getattr(api_client, method)(url, {}, format="json")
        assert response.status_code in (401, 403), (method, url, response.status_code)
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED and Quota.objects.filter(pk=quota.pk).exists()


@pytest.mark.parametrize("actor", ["carol", "alice", "bob", "outsider"])
def test_only_admins_write_quotas(api_client, setup, actor):
    quota = Quota.objects.get(team=setup["vision"], resource_class=setup["rc"])
    api_client.force_login(setup[actor])
    assert api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 99}, format="json").status_code in (403, 404)
    assert api_client.delete(f"/api/v1/quotas/{quota.pk}/").status_code in (403, 404)
    body = {"team": "vision", "resource_class": setup["rc"].pk, "guaranteed": 1, "limit": 1}
    assert api_client.post("/api/v1/quotas/", body, format="json").status_code == 403
    quota.refresh_from_db()
    assert quota.limit == 16
