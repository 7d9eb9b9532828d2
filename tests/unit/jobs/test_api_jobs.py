"""The jobs API: who may do what (anonymous, other team, member, lead, admin, read-only token), what a bad
request is told, defaults and the two env forms, filters, idempotent retries, the timeline, logs from the
simulated cluster, the audit trail and the OpenAPI schema."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from accounts.choices import MembershipRole
from accounts.models import APIToken, Membership
from cluster.base import ClusterError, NotFound
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job
from jobs.validation import class_limits
from tests.factories import api_job_body, member
from tests.sim_objects import DEMO_SCENARIO, H100

A40G = "nvidia.com/gpu@NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"  # nodes with an older driver: CUDA 12.2


@pytest.fixture
def setup(inventory, people):
    """Quotas of 8 guaranteed / 16 H100 for vision and nlp; carol is a plain member of vision (alice leads it)."""
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 8, 16)
    carol = member(people["vision"])
    return {**people, "carol": carol, "rc": rc}


def submit_as(client, user, **overrides):
    client.force_login(user)
    return client.post("/api/v1/jobs/", api_job_body(**overrides), format="json")


def _fields(**overrides):
    fields = dict(
        name="train", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "60"], args=[], env=[],
        count=1, cpu_millicores=1000, memory_mb=4096, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    fields.update(overrides)
    return fields


def queued(setup, owner="carol", team="vision", **overrides) -> Job:
    return actions.submit_job(setup[owner], setup[team], setup["rc"], _fields(**overrides)).job


def ids(response) -> list[int]:
    return [j["id"] for j in response.json()["results"]]


# -- submit ---------------------------------------------------------------------------------------------------


def test_member_submits_and_sees_the_queued_job(api_client, setup):
    response = submit_as(api_client, setup["carol"])
    assert response.status_code == 201, response.json()
    data = response.json()
    job = Job.objects.get(pk=data["id"])
    assert (job.owner, job.team, job.count, job.cpu_millicores) == (setup["carol"], setup["vision"], 2, 4000)
    assert job.env == [{"name": "EPOCHS", "value": "10"}] and job.command == ["python", "train.py"]
    assert job.workload_name == f"gpj-{job.pk}-resnet"
    assert data["state"] == "queued" and data["priority"] == "normal" and data["cpu"] == 4.0
    assert data["resource_class"] == setup["rc"].pk and data["resource_class_name"] == "H100 80GB HBM3"
    assert (data["team"], data["owner"], data["gpu_units"]) == ("vision", "carol", 2.0)
    assert data["url"].endswith(f"/api/v1/jobs/{job.pk}/")
    assert data["wait_message"] == "Waiting for the next admission cycle."
    audit = AuditEvent.objects.get(action="job.submit")
    assert audit.actor == setup["carol"] and audit.object_id == str(job.pk) and audit.team == setup["vision"]
    assert audit.after["resource_class"] == H100 and audit.after["count"] == 2


def test_defaults_the_only_team_and_the_other_ways_to_say_things(api_client, setup):
    """Left out: team (carol has one), count, cpu, memory, priority, preemptible, runtime. The class by id, env as a
    list, fractional cores, a high priority."""
    minimal = {"name": "tiny", "image": "busybox", "resource_class": setup["rc"].pk}
    api_client.force_login(setup["carol"])
    response = api_client.post("/api/v1/jobs/", minimal, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert job.team == setup["vision"] and (job.count, job.cpu_millicores, job.memory_mb) == (1, 2000, 8192)
    assert (job.priority, job.preemptible, job.max_runtime_seconds) == (50, False, 14400)
    assert (job.command, job.args, job.env) == ([], [], [])
    assert response.json()["cpu"] == 2.0 and response.json()["priority"] == "normal"

    env = [{"name": "B", "value": "2"}, {"name": "A", "value": "1"}]
    response = submit_as(
        api_client, setup["carol"], name="half", cpu="0.5", env=env, priority="high", preemptible=True, count=1
    )
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    assert (job.cpu_millicores, job.priority, job.preemptible) == (500, 100, True)
    assert job.env == env  # order kept
    assert (response.json()["cpu"], response.json()["priority"]) == (0.5, "high")
    # {NAME: number} becomes text, as a container's environment is.
    response = submit_as(api_client, setup["carol"], name="numbers", env={"EPOCHS": 10})
    assert Job.objects.get(pk=response.json()["id"]).env == [{"name": "EPOCHS", "value": "10"}]


def test_someone_in_two_teams_must_say_which(api_client, setup):
    Membership.objects.create(user=setup["carol"], team=setup["nlp"], role=MembershipRole.MEMBER)
    response = submit_as(api_client, setup["carol"], team=None)
    assert response.status_code == 400
    assert response.json()["team"] == ["Say which team the job is for (you belong to: nlp, vision)."]
    response = submit_as(api_client, setup["carol"], team="nlp")
    assert response.status_code == 201 and Job.objects.get().team == setup["nlp"]


def test_submitting_for_a_team_you_are_not_in_is_refused_as_for_no_such_team(api_client, setup):
    response = submit_as(api_client, setup["bob"], team="vision")
    assert response.status_code == 400
    assert response.json()["team"] == ["No team 'vision'. GET /api/v1/me/ lists your teams."]
    response = submit_as(api_client, setup["outsider"], team=None)
    assert response.status_code == 400 and "you belong to: none" in str(response.json()["team"])
    response = submit_as(api_client, setup["carol"], team="no-such-team")
    assert response.status_code == 400 and response.json()["team"] == [
        "No team 'no-such-team'. GET /api/v1/me/ lists your teams."
    ]
    assert Job.objects.count() == 0 and not AuditEvent.objects.filter(action="job.submit").exists()


def test_an_admin_submits_for_any_team_and_to_hidden_classes(api_client, setup):
    ResourceClass.objects.filter(pk=setup["rc"].pk).update(hidden=True)
    response = submit_as(api_client, setup["admin"], team="nlp")
    assert response.status_code == 201, response.json()
    job = Job.objects.get()
    assert (job.team, job.owner) == (setup["nlp"], setup["admin"])


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"resource_class": "nvidia.com/gpu@NO-SUCH-GPU"}, "resource_class", "No resource class 'nvidia.com/gpu@NO-"),
        ({"resource_class": 99999}, "resource_class", "No resource class '99999'"),
        ({"count": 0}, "count", "greater than or equal to 1"),
        ({"count": -1}, "count", "greater than or equal to 1"),
        ({"count": "two"}, "count", "valid integer"),
        ({"count": 9}, "count", "No single node can hold 9 × H100 80GB HBM3: the largest has 8."),
        ({"count": 17}, "count", "17 is more than team Computer Vision's limit of 16"),
        ({"image": "Not An Image!"}, "image", "'Not An Image!' is not a container image reference."),
        ({"image": "UPPER/case"}, "image", "'UPPER/case' is not a container image reference."),
        ({"env": {"1ABC": "x"}}, "env", "'1ABC' is not a valid environment variable name"),
        ({"env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}, "env", "set by the NVIDIA device plugin"),
        ({"env": [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}]}, "env", "A is given twice"),
        ({"env": "A=1"}, "env", 'Give a list of {"name": ..., "value": ...} objects'),
        (
            {"image": "nvidia/cuda:13.0.0-runtime-ubuntu24.04"},
            "image",
            "needs CUDA 13.0, but the drivers on the H100 80GB HBM3 nodes support at most CUDA 12.4.",
        ),
        ({"image": "nvcr.io/nvidia/pytorch:25.01-py3"}, "image", "needs CUDA 12.8, but the drivers on the H100"),
        ({"name": "Has Capitals"}, "name", "lowercase letters"),
        ({"name": None}, "name", "This field is required."),
        (
            {"gpus": 4},
            "gpus",
            "Unknown field. A job takes: team, kind, name, image, command, args, env, secret_env, secret_files, "
            "resource_class",
        ),
        ({"state": "running"}, "state", "Set by the portal; leave it out of the request."),
        ({"cpu": 0}, "cpu", "greater than or equal to 0.1"),
        ({"cpu": 300}, "cpu", "less than or equal to 256"),
        ({"memory_mb": 0}, "memory_mb", "greater than or equal to 64"),
        ({"max_runtime_seconds": 10}, "max_runtime_seconds", "greater than or equal to 60"),
        ({"max_runtime_seconds": 8 * 24 * 3600}, "max_runtime_seconds", "At most 604800 seconds (168 hours)"),
        ({"priority": "urgent"}, "priority", "not a valid choice"),
        ({"priority": 50}, "priority", "not a valid choice"),
        ({"command": "python train.py"}, "command", "list"),
        ({"args": ["x"] * 201}, "args", "args must be a list of at most 200 strings"),
    ],
)
def test_bad_requests_say_what_to_fix_and_store_nothing(api_client, setup, overrides, field, words):
    before = Job.objects.count()
    response = submit_as(api_client, setup["carol"], **overrides)
    assert response.status_code == 400, response.json()
    assert words in " ".join(map(str, response.json()[field])), response.json()
    assert Job.objects.count() == before
    assert not AuditEvent.objects.filter(action="job.submit").exists()


def test_more_cores_than_any_node_is_refused_with_the_largest(api_client, setup):
    largest = class_limits(setup["rc"]).max_cpu_m / 1000
    assert 0 < largest < 250
    response = submit_as(api_client, setup["carol"], cpu=250)
    assert response.status_code == 400
    assert response.json()["cpu"] == [f"No node of this class has 250 CPUs; the largest has {largest:g}."]
    assert Job.objects.count() == 0


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
    actions.set_quota(setup["admin"], setup["vision"], old, 2, 2)
    response = submit_as(api_client, setup["carol"], resource_class=old.pk, count=1)
    assert response.status_code == 400 and "support at most CUDA 12.2" in str(response.json()["image"])
    assert Job.objects.count() == 0


def test_idempotency_key(api_client, setup):
    api_client.force_login(setup["carol"])
    headers = {"HTTP_IDEMPOTENCY_KEY": "pipeline-run-42"}
    first = api_client.post("/api/v1/jobs/", api_job_body(), format="json", **headers)
    again = api_client.post("/api/v1/jobs/", api_job_body(), format="json", **headers)
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and Job.objects.count() == 1
    assert AuditEvent.objects.filter(action="job.submit").count() == 1
    # Spelling out a default is the same request.
    same = api_client.post(
        "/api/v1/jobs/", api_job_body(priority="normal", preemptible=False), format="json", **headers
    )
    assert same.status_code == 200 and same.json()["id"] == first.json()["id"]
    other = api_client.post("/api/v1/jobs/", api_job_body(count=3), format="json", **headers)
    assert other.status_code == 422
    assert other.json()["detail"] == (
        f"Idempotency-Key 'pipeline-run-42' was already used for job #{first.json()['id']} with a different "
        "request; use a new key for a new job."
    )
    long = api_client.post("/api/v1/jobs/", api_job_body(), format="json", HTTP_IDEMPOTENCY_KEY="x" * 101)
    assert long.status_code == 400 and long.json()["Idempotency-Key"] == ["At most 100 characters."]
    assert Job.objects.count() == 1
    # Keys belong to their user: alice's pipeline may use the same one.
    api_client.force_login(setup["alice"])
    hers = api_client.post("/api/v1/jobs/", api_job_body(), format="json", **headers)
    assert hers.status_code == 201 and hers.json()["id"] != first.json()["id"] and Job.objects.count() == 2


# -- who sees and does what -----------------------------------------------------------------------------------


def test_who_sees_which_jobs(api_client, setup):
    job = queued(setup)
    expectations = {"alice": 200, "carol": 200, "admin": 200, "bob": 404, "outsider": 404}
    for name, code in expectations.items():
        api_client.force_login(setup[name])
        detail = api_client.get(f"/api/v1/jobs/{job.pk}/")
        assert detail.status_code == code, name
        if code == 200:
            assert (detail.json()["id"], detail.json()["owner"]) == (job.pk, "carol")
        assert (job.pk in ids(api_client.get("/api/v1/jobs/"))) == (code == 200), name
        assert api_client.get(f"/api/v1/jobs/{job.pk}/events/").status_code == code, name
        assert api_client.get(f"/api/v1/jobs/{job.pk}/logs/").status_code == 404, name  # no pod yet, or not theirs


def test_anonymous_gets_nothing_from_any_jobs_endpoint(api_client, setup):
    job = queued(setup)
    calls = [
        ("get", "/api/v1/jobs/"), ("post", "/api/v1/jobs/"), ("get", f"/api/v1/jobs/{job.pk}/"),
        ("post", f"/api/v1/jobs/{job.pk}/cancel/"), ("post", f"/api/v1/jobs/{job.pk}/resubmit/"),
        ("get", f"/api/v1/jobs/{job.pk}/events/"), ("get", f"/api/v1/jobs/{job.pk}/logs/"),
    ]  # fmt: skip
    for method, url in calls:
        response = getattr(api_client, method)(url, api_job_body() if method == "post" else {}, format="json")
        assert response.status_code in (401, 403), (method, url, response.status_code)
        assert "Authentication required" in response.json()["detail"] or "credentials" in response.json()["detail"]
    assert Job.objects.get().state == JobState.QUEUED and Job.objects.count() == 1


def test_jobs_cannot_be_edited_or_deleted(api_client, setup):
    job = queued(setup)
    api_client.force_login(setup["admin"])
    assert api_client.patch(f"/api/v1/jobs/{job.pk}/", {"count": 4}, format="json").status_code == 405
    assert api_client.delete(f"/api/v1/jobs/{job.pk}/").status_code == 405
    job.refresh_from_db()
    assert job.count == 1


@pytest.mark.parametrize(
    ("actor", "code", "state"),
    [("carol", 200, "cancelled"), ("alice", 200, "cancelled"), ("admin", 200, "cancelled"),
     ("bob", 404, "queued"), ("outsider", 404, "queued")],
)  # fmt: skip
def test_cancel_rights(api_client, setup, actor, code, state):
    job = queued(setup)
    api_client.force_login(setup[actor])
    # Someone else's job (a lead's or an admin's cancel) takes a reason; the owner's own does not.
    reason = "" if actor == "carol" else "The node is going down for repair."
    response = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"reason": reason} if reason else None, format="json")
    assert response.status_code == code
    if code == 200:
        assert response.json()["state"] == "cancelled" and response.json()["finished_at"]
    job.refresh_from_db()
    assert job.state == state
    events = AuditEvent.objects.filter(action="job.cancel", object_id=str(job.pk))
    assert events.count() == (1 if code == 200 else 0)
    if code == 200:
        event = events.get()
        assert event.actor == setup[actor] and (event.before, event.after) == (
            {"state": "queued"},
            {"state": "cancelled"} | ({"reason": reason} if reason else {}),
        )


def test_a_member_cannot_cancel_a_teammates_job(api_client, setup):
    job = queued(setup, owner="alice")
    api_client.force_login(setup["carol"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert response.status_code == 403
    assert response.json()["detail"] == "Only the job's owner, a lead of its team or an admin can cancel it."
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
    # Cancelling twice says why.
    api_client.force_login(setup["alice"])
    assert api_client.post(f"/api/v1/jobs/{job.pk}/cancel/").status_code == 200
    again = api_client.post(f"/api/v1/jobs/{job.pk}/cancel/")
    assert again.status_code == 400
    assert again.json() == {"detail": f"Job #{job.pk} is cancelled; there is nothing to cancel."}
    assert AuditEvent.objects.filter(action="job.cancel").count() == 1


def test_resubmit_makes_a_new_job_from_an_ended_one(api_client, setup):
    job = queued(setup, name="sweep")
    api_client.force_login(setup["carol"])
    still = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert still.status_code == 400 and still.json() == {"detail": f"Job #{job.pk} is still queued; cancel it first."}
    actions.cancel_job(setup["carol"], job)
    api_client.force_login(setup["bob"])
    assert api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/").status_code == 404
    api_client.force_login(setup["carol"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert response.status_code == 201
    new = Job.objects.get(pk=response.json()["id"])
    assert new.pk != job.pk and new.name == "sweep" and new.resubmitted_from == job and new.state == "queued"
    assert response.json()["resubmitted_from"] == job.pk
    assert AuditEvent.objects.filter(action="job.resubmit", object_id=str(new.pk)).exists()
    # A second click returns the same new job.
    again = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert again.status_code == 200 and again.json()["id"] == new.pk
    assert Job.objects.filter(resubmitted_from=job).count() == 1
    assert job.events.filter(kind="resubmitted").count() == 1


def test_a_member_cannot_resubmit_a_teammates_job_but_the_lead_can(api_client, setup):
    job = queued(setup, owner="carol")
    actions.cancel_job(setup["carol"], job)
    mine = queued(setup, owner="alice", name="leads")
    actions.cancel_job(setup["alice"], mine)
    api_client.force_login(setup["carol"])
    response = api_client.post(f"/api/v1/jobs/{mine.pk}/resubmit/")
    assert response.status_code == 403 and "can resubmit it" in response.json()["detail"]
    api_client.force_login(setup["alice"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert response.status_code == 201 and response.json()["owner"] == "alice"
    assert Job.objects.filter(resubmitted_from__isnull=False).count() == 1


def test_read_only_token_reads_but_cannot_change_anything(api_client, setup):
    job = queued(setup)
    _, raw = APIToken.issue(setup["carol"], "dashboards", read_only=True)
    headers = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    listed = api_client.get("/api/v1/jobs/", **headers)
    assert listed.status_code == 200 and ids(listed) == [job.pk]
    assert api_client.get(f"/api/v1/jobs/{job.pk}/events/", **headers).json()[0]["kind"] == "submitted"
    for url in ("/api/v1/jobs/", f"/api/v1/jobs/{job.pk}/cancel/", f"/api/v1/jobs/{job.pk}/resubmit/"):
        response = api_client.post(url, api_job_body(), format="json", **headers)
        assert response.status_code == 403, url
        assert (
            response.json()["detail"]
            == "This API token is read-only; use a token of scope 'submit' or 'manage' for changes."
        )
    assert Job.objects.count() == 1 and Job.objects.get().state == JobState.QUEUED
    _, raw = APIToken.issue(setup["carol"], "pipeline")
    response = api_client.post("/api/v1/jobs/", api_job_body(), format="json", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 201 and Job.objects.get(pk=response.json()["id"]).owner == setup["carol"]


# -- list filters ---------------------------------------------------------------------------------------------


def test_list_filters_ordering_and_pagination(api_client, setup):
    a10 = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-A10-SHARED")
    actions.set_quota(setup["admin"], setup["vision"], a10, 4, 4)
    first = queued(setup, owner="carol", name="first")
    second = queued(setup, owner="alice", name="second")
    third = actions.submit_job(setup["alice"], setup["vision"], a10, _fields(name="third")).job
    theirs = queued(setup, owner="bob", team="nlp", name="theirs")
    actions.cancel_job(setup["carol"], first)

    api_client.force_login(setup["admin"])

    def listed(**params):
        return ids(api_client.get("/api/v1/jobs/", params))

    assert listed() == [theirs.pk, third.pk, second.pk, first.pk]  # newest first
    assert listed(team="nlp") == [theirs.pk]
    assert listed(owner="alice") == [third.pk, second.pk]
    assert listed(state="cancelled") == [first.pk]
    assert set(listed(state=["queued", "cancelled"], team="vision")) == {first.pk, second.pk, third.pk}
    assert listed(resource_class=a10.pk) == [third.pk]
    assert listed(ordering="id") == [first.pk, second.pk, third.pk, theirs.pk]
    page = api_client.get("/api/v1/jobs/", {"limit": 2, "offset": 1}).json()
    assert page["count"] == 4 and [j["id"] for j in page["results"]] == [third.pk, second.pk] and page["next"]
    # Filters never widen what a member sees.
    api_client.force_login(setup["carol"])
    assert listed(team="nlp") == [] and listed() == [third.pk, second.pk, first.pk]


# -- timeline and logs ----------------------------------------------------------------------------------------


def test_the_timeline(api_client, setup):
    job = queued(setup, count=2)
    api_client.force_login(setup["alice"])
    api_client.post(f"/api/v1/jobs/{job.pk}/cancel/", {"reason": "Wrong image."}, format="json")
    events = api_client.get(f"/api/v1/jobs/{job.pk}/events/").json()
    assert [(e["kind"], e["message"]) for e in events] == [
        ("submitted", "Submitted by carol: 2 × H100 80GB HBM3."),
        ("cancelled", "Cancelled by alice: Wrong image."),
    ]
    assert events[0]["data"] == {"count": 2, "resource_class": H100}
    assert events[1]["data"] == {"previous_state": "queued", "reason": "Wrong image."}
    assert events[0]["id"] < events[1]["id"]
    assert events[0]["at"] <= events[1]["at"]


class FakeLogs:
    def __init__(self, error: Exception | None = None):
        self.error, self.calls = error, []

    def pod_logs(self, namespace, pod_name, tail_lines=200):
        self.calls.append((namespace, pod_name, tail_lines))
        if self.error:
            raise self.error
        return "line 1\nline 2\n"


def test_logs_tail_bounds_and_cluster_errors(api_client, setup, monkeypatch):
    job = queued(setup)
    api_client.force_login(setup["carol"])
    response = api_client.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert response.status_code == 404 and response.json()["detail"] == f"Job #{job.pk} has no pod yet (queued)."
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, pod_name="gpj-1-train-abcde")
    backend = FakeLogs()
    monkeypatch.setattr("gpus.fleet.get_backend", lambda: backend)
    for tail in ("0", "5001", "ten", "-3"):
        response = api_client.get(f"/api/v1/jobs/{job.pk}/logs/", {"tail": tail})
        assert response.status_code == 400 and response.json() == {"tail": ["A whole number from 1 to 5000."]}
    assert backend.calls == []
    response = api_client.get(f"/api/v1/jobs/{job.pk}/logs/", {"tail": 5000})
    assert response.json() == {
        "pod": "gpj-1-train-abcde", "log": "line 1\nline 2\n", "kept": False, "cut_bytes": 0, "note": "",
    }  # fmt: skip
    api_client.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert backend.calls == [("team-vision", "gpj-1-train-abcde", 5000), ("team-vision", "gpj-1-train-abcde", 200)]

    backend.error = NotFound('pods "gpj-1-train-abcde" not found')
    response = api_client.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert response.status_code == 404
    assert response.json()["detail"] == "The pod gpj-1-train-abcde is gone from the cluster and its log was not kept."
    backend.error = ClusterError("the API server is unreachable")
    response = api_client.get(f"/api/v1/jobs/{job.pk}/logs/")
    assert response.status_code == 503
    assert response.json()["detail"] == "No log from pod gpj-1-train-abcde now: the API server is unreachable"
    # Another team's job is not there at all, pod or not.
    api_client.force_login(setup["bob"])
    assert api_client.get(f"/api/v1/jobs/{job.pk}/logs/").status_code == 404
    assert len(backend.calls) == 4


def test_logs_of_a_job_running_in_the_simulated_cluster(api_client, inventory, people, tmp_path, monkeypatch):
    """Submit through the API, let the cycle run it, read its log: the pod reports the GPUs it was given."""
    clock_t = [time.time() + 60]
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=lambda: clock_t[0])
    sync_inventory(sim)
    monkeypatch.setattr("gpus.fleet.get_backend", lambda: sim)
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 8)
    api_client.force_login(people["alice"])
    submitted = api_client.post(
        "/api/v1/jobs/", api_job_body(command=["bash", "-c", "python train.py; sleep 600"]), format="json"
    )
    assert submitted.status_code == 201, submitted.json()
    job_id = submitted.json()["id"]

    def cycle(seconds):
        clock_t[0] += seconds
        run_cycle(sim, now=datetime.fromtimestamp(clock_t[0], UTC))

    cycle(0)
    cycle(6)
    cycle(40)
    job = api_client.get(f"/api/v1/jobs/{job_id}/").json()
    assert job["state"] == "running" and job["node_name"].startswith("gpu-h100-")
    log = api_client.get(f"/api/v1/jobs/{job_id}/logs/", {"tail": 5000}).json()
    pod = Job.objects.get(pk=job_id).pod_name
    assert log["pod"] == pod
    lines = log["log"].splitlines()
    assert f"starting {pod} on {job['node_name']}" in lines[0]
    assert sum(line.startswith("GPU ") and "NVIDIA H100 80GB HBM3" in line for line in lines) == 2
    assert len(lines) > 3
    last = api_client.get(f"/api/v1/jobs/{job_id}/logs/", {"tail": 1}).json()["log"]
    assert last.splitlines() == lines[-1:]

    cancelled = api_client.post(f"/api/v1/jobs/{job_id}/cancel/")
    assert cancelled.json()["state"] == "cancelled"
    cycle(1)  # keeps the log, then deletes the workload and its pod
    assert sim.list_pods("team-vision") == []
    kept = api_client.get(f"/api/v1/jobs/{job_id}/logs/", {"tail": 5000}).json()
    assert kept["kept"] is True and kept["pod"] == pod and kept["log"].splitlines()[: len(lines)] == lines
    download = api_client.get(f"/api/v1/jobs/{job_id}/logs/download/")
    assert download.status_code == 200 and download["Content-Type"].startswith("text/plain")
    assert download["Content-Disposition"] == f'attachment; filename="job-{job_id}-{pod}.log"'
    assert download.content.decode().splitlines()[: len(lines)] == lines


# -- schema ---------------------------------------------------------------------------------------------------


def test_the_schema_describes_the_jobs_api_without_warnings(openapi_schema):
    schema = openapi_schema  # generated with --validate --fail-on-warn (tests/openapi.py)
    submit = schema["paths"]["/api/v1/jobs/"]["post"]
    assert {p["name"] for p in submit["parameters"] if p["in"] == "header"} == {"Idempotency-Key"}
    assert {"200", "201", "400", "403", "422"} <= set(submit["responses"])
    request = schema["components"]["schemas"]["JobRequest"]
    assert set(request["required"]) == {"name", "image", "resource_class"}
    assert request["properties"]["cpu"]["type"] == "number" and request["properties"]["cpu"]["default"] == 2
    assert schema["components"]["schemas"]["PriorityEnum"]["enum"] == ["low", "normal", "high"]
    for action in ("cancel", "resubmit"):
        assert "post" in schema["paths"][f"/api/v1/jobs/{{id}}/{action}/"]
    assert "503" in schema["paths"]["/api/v1/jobs/{id}/logs/"]["get"]["responses"]
    filters = {p["name"] for p in schema["paths"]["/api/v1/jobs/"]["get"]["parameters"]}
    assert {"team", "state", "owner", "resource_class", "ordering", "limit", "offset"} <= filters
    assert {"put", "patch", "delete"} <= set(schema["paths"]["/api/v1/quotas/{id}/"])


def test_the_portals_own_idempotency_keys_are_refused(api_client, setup):
    api_client.force_login(setup["carol"])
    response = api_client.post(
        "/api/v1/jobs/", api_job_body(), format="json", HTTP_IDEMPOTENCY_KEY="portal:resubmit-of-1"
    )
    assert response.status_code == 400 and "the portal's own" in str(response.json())
    assert Job.objects.count() == 0
