"""Job labels, working directory, arrays, resubmit with changes and priority change through the API: what is
stored, what a bad request is told (every problem at once), who may do what, the ?label= filter, the audit
trail, and what lands in the rendered workload."""

from __future__ import annotations

import pytest

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState, Priority
from jobs.models import Job, JobArray
from jobs.render import render_job
from tests.factories import api_job_body, member, submit_job
from tests.sim_objects import H100


def ids(response) -> list[int]:
    return [j["id"] for j in response.json()["results"]]


@pytest.fixture
def setup(inventory, people):
    """As in test_api_jobs: quotas of 8 guaranteed / 16 H100 for vision and nlp; carol is a plain member of vision
    (alice leads it)."""
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 8, 16)
    return {**people, "carol": member(people["vision"]), "rc": rc}


def test_labels_and_working_dir_are_stored_shown_and_rendered_without_touching_the_portals_labels(api_client, setup):
    api_client.force_login(setup["carol"])
    labels = {"git-sha": "1a2b3c4", "example.com/run": "pipeline-42", "empty": ""}
    response = api_client.post(
        "/api/v1/jobs/", api_job_body(labels=labels, working_dir="/workspace/project"), format="json"
    )
    assert response.status_code == 201, response.json()
    assert response.json()["labels"] == labels and response.json()["working_dir"] == "/workspace/project"
    job = Job.objects.get(pk=response.json()["id"])
    job.node_name = "gpu-h100-01"
    manifest = render_job(job)
    for metadata in (manifest["metadata"], manifest["spec"]["template"]["metadata"]):
        assert metadata["labels"]["git-sha"] == "1a2b3c4"
        assert metadata["labels"]["example.com/run"] == "pipeline-42"
        assert metadata["labels"]["gpu-portal.io/job-id"] == str(job.pk)
    assert manifest["spec"]["template"]["spec"]["containers"][0]["workingDir"] == "/workspace/project"


def test_bad_labels_and_working_dir_get_every_problem_at_once(api_client, setup):
    api_client.force_login(setup["carol"])
    bad = {
        "gpu-portal.io/team": "x",  # the portal's own prefix
        "node.kubernetes.io/role": "x",  # reserved for Kubernetes
        "-leading": "x",  # name must start with a letter or digit
        "Example.COM/run": "x",  # prefix must be a lowercase DNS subdomain
        "a" * 64: "x",  # name longer than 63
        "ok": "v" * 64,  # value longer than 63
        "spaces": "has space",
        "num": 5,
    }
    response = api_client.post("/api/v1/jobs/", api_job_body(labels=bad, working_dir="relative/dir"), format="json")
    assert response.status_code == 400
    errors = response.json()
    text = " ".join(errors["labels"])
    assert len(errors["labels"]) == 8, errors["labels"]
    for fragment in ("portal's own", "reserved for Kubernetes", "'-leading'", "Example.COM", "1 to 63", "must be text"):
        assert fragment in text
    assert "absolute path" in errors["working_dir"][0]
    assert not Job.objects.exists()
    dots = api_client.post("/api/v1/jobs/", api_job_body(working_dir="/data/../etc"), format="json")
    assert dots.status_code == 400 and "'..'" in dots.json()["working_dir"][0]
    env = api_client.post("/api/v1/jobs/", api_job_body(env={"PORTAL_ARRAY_INDEX": "3"}), format="json")
    assert env.status_code == 400 and "set by the portal" in env.json()["env"][0]


def test_label_filter_ands_several_selectors_and_accepts_a_bare_key(api_client, setup):
    a = submit_job(setup["carol"], name="a", labels={"run": "abc", "git-sha": "111"})
    b = submit_job(setup["carol"], name="b", labels={"run": "abc", "git-sha": "222"})
    c = submit_job(setup["carol"], name="c", labels={"run": "xyz", "example.com/a__b.c": "v"})
    submit_job(setup["carol"], name="d")
    api_client.force_login(setup["carol"])
    assert sorted(ids(api_client.get("/api/v1/jobs/?label=run=abc"))) == [a.pk, b.pk]
    assert ids(api_client.get("/api/v1/jobs/?label=run=abc&label=git-sha=222")) == [b.pk]
    assert sorted(ids(api_client.get("/api/v1/jobs/?label=run"))) == [a.pk, b.pk, c.pk]
    assert ids(api_client.get("/api/v1/jobs/?label=run=nothing")) == []
    assert ids(api_client.get("/api/v1/jobs/?label=example.com/a__b.c=v")) == [c.pk]
    assert ids(api_client.get("/api/v1/jobs/?label=example.com/a__b.c")) == [c.pk]
    bad = api_client.get("/api/v1/jobs/?label==abc")
    assert bad.status_code == 400 and "no label key" in str(bad.json())
    nul = api_client.get("/api/v1/jobs/?label=run%00x=abc")  # PostgreSQL would refuse it in the query
    assert nul.status_code == 400 and "NUL" in str(nul.json())


def test_resubmit_with_overrides_is_validated_like_a_new_job_and_keeps_the_rest(api_client, setup):
    job = submit_job(setup["carol"], name="sweep", labels={"run": "1"}, env=[{"name": "LR", "value": "0.1"}])
    actions.cancel_job(setup["carol"], job)
    api_client.force_login(setup["carol"])
    bad = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"count": 0, "image": "NOT AN IMAGE", "gpus": 2}, format="json"
    )
    # Every problem at once, the unknown field among them, as for a new job (issue 31, item 15).
    assert bad.status_code == 400 and set(bad.json()) == {"gpus", "count", "image"}, bad.json()
    bad = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/", {"count": 0, "image": "NOT AN IMAGE"}, format="json")
    assert bad.status_code == 400 and set(bad.json()) == {"count", "image"}
    too_many = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/", {"count": 17}, format="json")
    assert too_many.status_code == 400 and "limit of 16" in too_many.json()["count"][0]
    response = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"preemptible": True, "priority": "low", "labels": {"run": "2"}},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    new = Job.objects.get(pk=response.json()["id"])
    assert new.preemptible and new.priority == Priority.LOW and new.labels == {"run": "2"}
    assert new.env == job.env and new.command == job.command and new.resubmitted_from == job
    # The same changes again: the same job; other changes: another one; no body: the unchanged copy.
    again = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"preemptible": True, "priority": "low", "labels": {"run": "2"}},
        format="json",
    )  # fmt: skip
    assert again.status_code == 200 and again.json()["id"] == new.pk
    plain = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/")
    assert plain.status_code == 201 and not Job.objects.get(pk=plain.json()["id"]).preemptible
    moved = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/", {"team": "nlp"}, format="json")
    assert moved.status_code == 400 and "stays in the job's team" in moved.json()["team"][0]


def test_priority_change_of_a_queued_job_by_owner_or_lead_within_their_role(api_client, setup, settings):
    settings.PORTAL_MEMBER_MAX_PRIORITY = "normal"
    job = submit_job(setup["carol"], priority=Priority.LOW)
    api_client.force_login(setup["carol"])
    high = api_client.post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "high"}, format="json")
    assert high.status_code == 400 and "needs a lead" in high.json()["priority"][0]
    ok = api_client.post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "normal"}, format="json")
    assert ok.status_code == 200 and ok.json()["priority"] == "normal"
    api_client.force_login(setup["bob"])  # another team
    assert api_client.post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "low"}, format="json").status_code == 404
    api_client.force_login(setup["alice"])  # the lead
    lead = api_client.post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "high"}, format="json")
    assert lead.status_code == 200 and Job.objects.get(pk=job.pk).priority == Priority.HIGH
    records = AuditEvent.objects.filter(action="job.priority", object_id=str(job.pk)).order_by("pk")
    assert [(r.before, r.after) for r in records] == [
        ({"priority": Priority.LOW}, {"priority": Priority.NORMAL}),
        ({"priority": Priority.NORMAL}, {"priority": Priority.HIGH}),
    ]
    assert job.events.filter(kind="priority").count() == 2
    # A member cannot submit above the limit either.
    api_client.force_login(setup["carol"])
    refused = api_client.post("/api/v1/jobs/", api_job_body(priority="high"), format="json")
    assert refused.status_code == 400 and "needs a lead" in refused.json()["priority"][0]
    actions.cancel_job(setup["carol"], job)
    ended = api_client.post(f"/api/v1/jobs/{job.pk}/priority/", {"priority": "low"}, format="json")
    assert ended.status_code == 400 and "only a queued job" in ended.json()["priority"][0]


def test_an_array_is_n_queued_jobs_with_their_index_and_is_cancelled_as_a_group(api_client, setup):
    api_client.force_login(setup["carol"])
    response = api_client.post(
        "/api/v1/job-arrays/", api_job_body(size=4, parallelism=2, labels={"sweep": "lr"}), format="json",
        HTTP_IDEMPOTENCY_KEY="array-1",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["size"] == 4 and data["parallelism"] == 2 and data["summary"] == "4 queued"
    tasks = list(Job.objects.filter(array_id=data["id"]).order_by("array_index"))
    assert [t.array_index for t in tasks] == [0, 1, 2, 3] and data["tasks"] == [t.pk for t in tasks]
    assert all(t.state == JobState.QUEUED and t.labels == {"sweep": "lr"} for t in tasks)
    tasks[2].node_name = "gpu-h100-01"
    env = render_job(tasks[2])["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "PORTAL_ARRAY_INDEX", "value": "2"} in env and {"name": "PORTAL_ARRAY_SIZE", "value": "4"} in env
    # One audit record for the array, none per task; a retry returns the same array.
    assert AuditEvent.objects.filter(action="job_array.submit").count() == 1
    assert not AuditEvent.objects.filter(action="job.submit").exists()
    retry = api_client.post(
        "/api/v1/job-arrays/", api_job_body(size=4, parallelism=2, labels={"sweep": "lr"}), format="json",
        HTTP_IDEMPOTENCY_KEY="array-1",
    )  # fmt: skip
    assert retry.status_code == 200 and retry.json()["id"] == data["id"] and JobArray.objects.count() == 1
    assert sorted(ids(api_client.get(f"/api/v1/jobs/?array={data['id']}"))) == sorted(t.pk for t in tasks)
    api_client.force_login(setup["bob"])
    assert api_client.post(f"/api/v1/job-arrays/{data['id']}/cancel/").status_code == 404
    api_client.force_login(setup["alice"])  # a lead of the team
    cancelled = api_client.post(f"/api/v1/job-arrays/{data['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["summary"] == "4 cancelled"
    assert AuditEvent.objects.filter(action="job_array.cancel").count() == 1
    assert not AuditEvent.objects.filter(action="job.cancel").exists()
    assert all(t.events.filter(kind="cancelled").count() == 1 for t in tasks)
    again = api_client.post(f"/api/v1/job-arrays/{data['id']}/cancel/")
    assert again.status_code == 400 and "nothing to cancel" in again.json()["detail"]


@pytest.mark.parametrize(
    ("extra", "fields"),
    [
        ({"size": 0}, {"size"}),
        ({"size": 101}, {"size"}),
        ({"size": 3, "parallelism": 5}, {"parallelism"}),
        ({"size": 101, "count": 17}, {"size", "count"}),
        ({"size": 0, "count": 0, "labels": {"gpu-portal.io/x": "y"}}, {"size", "count", "labels"}),
    ],
)
def test_array_limits_are_validated_with_the_job_fields_all_at_once(api_client, setup, extra, fields):
    api_client.force_login(setup["carol"])
    response = api_client.post("/api/v1/job-arrays/", api_job_body(**extra), format="json")
    assert response.status_code == 400 and fields <= set(response.json()), response.json()
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_the_array_size_limit_is_a_setting(api_client, setup, settings):
    settings.PORTAL_JOB_ARRAY_MAX_SIZE = 3
    api_client.force_login(setup["carol"])
    response = api_client.post("/api/v1/job-arrays/", api_job_body(size=4), format="json")
    assert response.status_code == 400 and "from 1 to 3 tasks" in response.json()["size"][0]
