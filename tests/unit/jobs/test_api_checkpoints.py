"""Checkpoint-aware preemption through the API (issue 34, item 3): a job's ``checkpoint`` declaration, every problem
at once; reporting a checkpoint; a team's minimum runtime, set by its leads and audited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import EventKind, JobState
from jobs.models import Job, TeamPreemption
from jobs.render import render_job
from tests.factories import api_job_body, job_in_state, member
from tests.sim_objects import H100


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 8, 16)
    return {**people, "carol": member(people["vision"]), "rc": rc}


def test_a_declared_checkpoint_is_stored_with_its_defaults_and_shown(api_client, setup):
    api_client.force_login(setup["carol"])
    body = api_job_body(checkpoint={"signal": "SIGUSR1", "grace_seconds": 120})
    response = api_client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.json()
    data = response.json()
    assert data["checkpoint"] == {"signal": "SIGUSR1", "grace_seconds": 120, "report": "api"}
    assert data["last_checkpoint_at"] is None and data["preemption_lost_gpu_seconds"] == 0.0
    assert Job.objects.get(pk=data["id"]).checkpoint["grace_seconds"] == 120


def test_every_problem_of_a_checkpoint_is_reported_at_once_and_nothing_is_stored(api_client, setup, settings):
    settings.PORTAL_CHECKPOINT_GRACE_MAX = 600
    api_client.force_login(setup["carol"])
    bad = {"signal": "SIGKILL", "grace_seconds": 601, "report": "annotation", "every": 5}
    response = api_client.post("/api/v1/jobs/", api_job_body(checkpoint=bad, count=0), format="json")
    assert response.status_code == 400
    errors = response.json()
    problems = " ".join(errors["checkpoint"])
    assert "Unknown key 'every'" in problems and "'SIGKILL' is not one of" in problems
    assert "from 30 to 600, not 601" in problems and "report 'annotation' is not offered" in problems
    assert "count" in errors  # with the request's other problems, in the same answer
    no_grace = api_client.post("/api/v1/jobs/", api_job_body(checkpoint={"signal": "SIGTERM"}), format="json")
    assert no_grace.status_code == 400 and "grace_seconds is required" in no_grace.json()["checkpoint"][0]
    not_an_object = api_client.post("/api/v1/jobs/", api_job_body(checkpoint="SIGUSR1"), format="json")
    assert not_an_object.status_code == 400 and "Give an object like" in not_an_object.json()["checkpoint"][0]
    assert not Job.objects.exists()


def test_the_signal_and_grace_reach_the_pod_without_privilege(setup):
    job = job_in_state(setup["carol"], JobState.ADMITTED, checkpoint={"signal": "SIGUSR2", "grace_seconds": 300})
    job.attempts, job.workload_name = 1, job.default_workload_name()
    pod = render_job(job)["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 300
    container = pod["containers"][0]
    assert container["lifecycle"] == {"preStop": {"exec": {"command": ["/bin/sh", "-c", "kill -USR2 1; sleep 290"]}}}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    env = {e["name"]: e["value"] for e in container["env"]}
    assert (env["PORTAL_ATTEMPT"], env["PORTAL_RESUMING"], env["PORTAL_LAST_CHECKPOINT"]) == ("1", "0", "")
    # SIGTERM is what Kubernetes sends anyway: no hook, only the grace.
    plain = job_in_state(setup["carol"], JobState.ADMITTED, checkpoint={"grace_seconds": 45})
    plain.attempts, plain.workload_name = 1, plain.default_workload_name()
    pod = render_job(plain)["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 45 and "lifecycle" not in pod["containers"][0]


def test_a_running_job_reports_its_checkpoint(api_client, setup):
    job = job_in_state(setup["carol"], JobState.RUNNING)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=1))
    api_client.force_login(setup["carol"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/checkpoint/", {}, format="json")
    assert response.status_code == 200, response.json()
    job.refresh_from_db()
    assert job.last_checkpoint_at is not None and response.json()["last_checkpoint_at"]
    assert job.events.filter(kind=EventKind.CHECKPOINT).count() == 1
    future = (timezone.now() + timedelta(hours=1)).isoformat()
    assert api_client.post(f"/api/v1/jobs/{job.pk}/checkpoint/", {"at": future}, format="json").status_code == 400
    early = (timezone.now() - timedelta(hours=2)).isoformat()
    refused = api_client.post(f"/api/v1/jobs/{job.pk}/checkpoint/", {"at": early}, format="json")
    assert refused.status_code == 400 and "older than the job's current attempt" in refused.json()["at"][0]
    garbage = api_client.post(f"/api/v1/jobs/{job.pk}/checkpoint/", {"at": "soon"}, format="json")
    assert garbage.status_code == 400 and "at" in garbage.json()
    # A teammate who is not its owner or a lead may not; another team does not see it.
    api_client.force_login(member(setup["vision"], "dave"))
    assert api_client.post(f"/api/v1/jobs/{job.pk}/checkpoint/", {}, format="json").status_code == 403
    api_client.force_login(setup["bob"])
    assert api_client.post(f"/api/v1/jobs/{job.pk}/checkpoint/", {}, format="json").status_code == 404


def test_a_submit_scoped_token_reports_its_owners_job_only(api_client, setup):
    from accounts.models import APIToken

    mine = job_in_state(setup["carol"], JobState.RUNNING)
    lead = job_in_state(setup["alice"], JobState.RUNNING)
    Job.objects.update(started_at=timezone.now() - timedelta(minutes=5))
    _, raw = APIToken.issue(setup["carol"], "in the job", scope="submit")
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert api_client.post(f"/api/v1/jobs/{mine.pk}/checkpoint/", {}, format="json", **auth).status_code == 200
    assert api_client.post(f"/api/v1/jobs/{lead.pk}/checkpoint/", {}, format="json", **auth).status_code == 403
    _, read_only = APIToken.issue(setup["carol"], "reader", read_only=True)
    refused = api_client.post(
        f"/api/v1/jobs/{mine.pk}/checkpoint/", {}, format="json", HTTP_AUTHORIZATION=f"Bearer {read_only}"
    )
    assert refused.status_code == 403


def test_a_queued_job_has_no_checkpoint_to_report(api_client, setup):
    job = job_in_state(setup["carol"], JobState.QUEUED)
    api_client.force_login(setup["carol"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/checkpoint/", {}, format="json")
    assert response.status_code == 400 and "only a running job reports checkpoints" in str(response.json())


def test_leads_set_the_minimum_runtime_members_read_it_and_it_is_audited(api_client, setup, settings):
    settings.PORTAL_MIN_RUNTIME_MAX = 7200
    url = "/api/v1/teams/vision/preemption/"
    api_client.force_login(setup["carol"])
    assert api_client.get(url).json() == {"team": "vision", "min_runtime_seconds": 0, "max_seconds": 7200}
    assert api_client.put(url, {"min_runtime_seconds": 600}, format="json").status_code == 403
    api_client.force_login(setup["alice"])  # vision's lead
    for wrong in (-1, 7201, "soon"):
        assert api_client.put(url, {"min_runtime_seconds": wrong}, format="json").status_code == 400
    assert not TeamPreemption.objects.exists()
    response = api_client.put(url, {"min_runtime_seconds": 900}, format="json")
    assert response.status_code == 200 and response.json()["min_runtime_seconds"] == 900
    audit = AuditEvent.objects.get(action="team.min_runtime")
    assert audit.before == {"min_runtime_seconds": 0} and audit.after == {"min_runtime_seconds": 900}
    api_client.force_login(setup["bob"])
    assert api_client.get(url).status_code == 404
