"""A job's own checkpoint token (issue 34, item 3: "a call from inside the job with a scoped token"): a job that
declares ``"report": "token"`` gets, for each attempt, a token in a Secret of its team's namespace that its pods read
through a secretKeyRef; the token reports that job's checkpoints and does nothing else, and stops when the attempt
or the job ends. Every kind that can be preempted gets it: batch jobs, each task of an array, a gang's ranks."""

from __future__ import annotations

import json
from datetime import timedelta

from django.conf import settings as django_settings
from django.forms.models import model_to_dict
from django.utils import timezone

from accounts.models import Team, hash_token
from gpus.models import ResourceClass
from jobs import actions, lifecycle
from jobs.choices import EventKind, JobState
from jobs.models import Job, JobCheckpointToken
from jobs.render import checkpoint_secret_name, render_job
from tests.factories import api_job_body, cycle, job_in_state, run_until, submit_gang, submit_job
from tests.sim_objects import H100

BY_TOKEN = {"signal": "SIGUSR1", "grace_seconds": 60, "report": "token"}


def container_env(workload: dict) -> dict[str, dict]:
    """The main container's variables by name, each as rendered ({"value"} or {"valueFrom"})."""
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e for e in container.get("env", [])}


def workload_of(cluster, job: Job) -> dict:
    (found,) = [w for w in cluster.list_workloads(job.team.namespace) if w["metadata"]["name"] == job.workload_name]
    return found


def token_in_secret(cluster, job: Job) -> str:
    secret_type, data = cluster.secret_values(job.team.namespace, checkpoint_secret_name(job.workload_name))
    assert secret_type == "Opaque" and set(data) == {"token"}
    return data["token"]


def report(api_client, job_id: int, raw: str, body: dict | None = None):
    """POST a checkpoint of ``job_id`` with the token ``raw``. The simulated clock runs a minute ahead of the wall
    clock the API reads, so the attempt is dated back first (a checkpoint may not predate its attempt)."""
    Job.objects.filter(pk=job_id, started_at__isnull=False).update(started_at=timezone.now() - timedelta(hours=1))
    return api_client.post(f"/api/v1/jobs/{job_id}/checkpoint/", body or {}, format="json",
                           HTTP_AUTHORIZATION=f"Bearer {raw}")  # fmt: skip


def test_the_token_reaches_the_pod_through_a_secret_and_reports_only_its_own_jobs_checkpoint(
    cluster, clock, people, api_client
):
    bob = people["bob"]
    job = submit_job(bob, "nlp", H100, command=["sleep", "3600"], preemptible=True, checkpoint=BY_TOKEN)
    other = submit_job(bob, "nlp", H100, command=["sleep", "3600"], checkpoint=BY_TOKEN)
    cycle(cluster, clock)
    job = run_until(cluster, clock, job, JobState.RUNNING)
    other = run_until(cluster, clock, other, JobState.RUNNING)

    workload = workload_of(cluster, job)
    env = container_env(workload)
    secret = checkpoint_secret_name(job.workload_name)
    assert env["PORTAL_CHECKPOINT_TOKEN"] == {
        "name": "PORTAL_CHECKPOINT_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}
    }  # fmt: skip
    url = f"{django_settings.PORTAL_BASE_URL.rstrip('/')}/api/v1/jobs/{job.pk}/checkpoint/"
    assert env["PORTAL_CHECKPOINT_URL"]["value"] == url
    # The simulated API server holds the Secret, owned by the workload (it goes with it); its value is the token, which
    # is nowhere in the pod spec and nowhere in the database but as its hash.
    raw = token_in_secret(cluster, job)
    assert raw.startswith("gpc_") and raw != token_in_secret(cluster, other)
    owners = cluster.get_secret(job.team.namespace, secret)["metadata"]["ownerReferences"]
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("Job", job.workload_name, job.workload_uid)]
    assert raw not in json.dumps(workload)
    row = JobCheckpointToken.objects.get(job=job)
    assert row.key_hash == hash_token(raw) and row.workload_name == job.workload_name
    assert raw not in json.dumps(model_to_dict(row), default=str)

    # It reports its own job's checkpoint, written on the timeline as the token's (by its prefix, never its value).
    answer = report(api_client, job.pk, raw)
    assert answer.status_code == 200, answer.json()
    job.refresh_from_db()
    assert job.last_checkpoint_at is not None and answer.json()["last_checkpoint_at"]
    line = job.events.get(kind=EventKind.CHECKPOINT)
    assert line.data["via"] == "token" and line.data["token"] == row.key_prefix and raw not in line.message
    assert JobCheckpointToken.objects.get(pk=row.pk).last_used_at is not None

    # Not another job's, not any other endpoint, not a token in the wrong place.
    assert report(api_client, other.pk, raw).status_code == 403
    assert not other.events.filter(kind=EventKind.CHECKPOINT).exists()
    bearer = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    assert api_client.get(f"/api/v1/jobs/{job.pk}/", **bearer).status_code == 401
    assert api_client.get("/api/v1/jobs/", **bearer).status_code == 401
    assert api_client.post(f"/api/v1/jobs/{job.pk}/cancel/", {}, format="json", **bearer).status_code == 401
    assert api_client.post("/api/v1/jobs/", api_job_body(team="nlp"), format="json", **bearer).status_code == 401
    assert api_client.get("/api/v1/me/", **bearer).status_code == 401
    assert report(api_client, job.pk, raw[:-2] + "xx").status_code == 401
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING

    # Once the job ends the token stops at once, is revoked, and its Secret goes with the workload.
    actions.cancel_job(bob, job)
    refused = report(api_client, job.pk, raw)
    assert refused.status_code == 401 and "no longer works" in refused.json()["detail"]
    assert JobCheckpointToken.objects.get(pk=row.pk).revoked_at is not None
    cycle(cluster, clock, 6)
    assert secret not in {s["metadata"]["name"] for s in cluster.list_secrets(job.team.namespace)}
    # The other job's token still works: only the ended job's stopped.
    other_raw = token_in_secret(cluster, other)
    assert report(api_client, other.pk, other_raw).status_code == 200
    # The job's state alone decides, before anything is revoked: a job seen ended refuses its token at once.
    Job.objects.filter(pk=other.pk).update(state=JobState.SUCCEEDED)
    assert report(api_client, other.pk, other_raw).status_code == 401
    assert JobCheckpointToken.objects.get(job=other).revoked_at is None


def test_a_requeued_job_gets_a_fresh_token_and_the_old_one_stops(cluster, clock, people, api_client):
    job = submit_job(people["bob"], "nlp", H100, command=["sleep", "3600"], preemptible=True, checkpoint=BY_TOKEN)
    cycle(cluster, clock)
    job = run_until(cluster, clock, job, JobState.RUNNING)
    first, first_raw = job.workload_name, token_in_secret(cluster, job)
    assert report(api_client, job.pk, first_raw).status_code == 200
    # Preempted with no grace left: the next pass requeues it, and it runs again as a new attempt.
    assert lifecycle.preempt(job, clock.now, clock.now, "Preempted for a test.", {})
    assert report(api_client, job.pk, first_raw).status_code == 200  # still its attempt during the notice
    job = run_until(cluster, clock, job, JobState.RUNNING)
    assert job.attempts == 2 and job.workload_name != first
    raw = token_in_secret(cluster, job)
    assert raw != first_raw
    assert report(api_client, job.pk, first_raw).status_code == 401
    assert report(api_client, job.pk, raw).status_code == 200
    tokens = {t.workload_name: t for t in JobCheckpointToken.objects.filter(job=job)}
    assert tokens[first].revoked_at is not None and tokens[job.workload_name].revoked_at is None
    # The first attempt's Secret went with its workload; the new attempt's pod reads the new one.
    names = {s["metadata"]["name"] for s in cluster.list_secrets(job.team.namespace)}
    assert checkpoint_secret_name(first) not in names and checkpoint_secret_name(job.workload_name) in names
    ref = container_env(workload_of(cluster, job))["PORTAL_CHECKPOINT_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref["name"] == checkpoint_secret_name(job.workload_name)


def test_every_preemptible_kind_gets_its_token_array_tasks_and_gang_ranks(cluster, clock, people, api_client):
    alice = people["alice"]
    vision = Team.objects.get(slug="vision")
    rc = ResourceClass.objects.get(key=H100)
    array = actions.submit_array(
        alice, vision, rc, {"name": "sweep", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "3600"],
                            "count": 1, "cpu_millicores": 1000, "memory_mb": 4096, "checkpoint": BY_TOKEN}, size=2,
    ).array  # fmt: skip
    gang = submit_gang(alice, "vision", H100, command=["sleep", "3600"], checkpoint=BY_TOKEN)
    cycle(cluster, clock)
    tasks = [run_until(cluster, clock, task, JobState.RUNNING) for task in Job.objects.filter(array=array)]
    gang = run_until(cluster, clock, gang, JobState.RUNNING)
    raws = set()
    for task in tasks:
        raw = token_in_secret(cluster, task)
        raws.add(raw)
        assert report(api_client, task.pk, raw).status_code == 200
        assert container_env(workload_of(cluster, task))["PORTAL_CHECKPOINT_URL"]["value"].endswith(
            f"/api/v1/jobs/{task.pk}/checkpoint/"
        )
    assert len(raws) == 2  # each task its own token
    assert report(api_client, tasks[0].pk, token_in_secret(cluster, tasks[1])).status_code == 403
    # Every rank's pod reads the gang's one Secret, owned by the gang's workloads.
    secret = checkpoint_secret_name(gang.workload_name)
    workloads = [w for w in cluster.list_workloads("team-vision")
                 if (w["metadata"].get("labels") or {}).get("gpu-portal.io/job-id") == str(gang.pk)]  # fmt: skip
    assert workloads
    for workload in workloads:
        ref = container_env(workload)["PORTAL_CHECKPOINT_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": secret, "key": "token"}
    owners = cluster.get_secret("team-vision", secret)["metadata"]["ownerReferences"]
    assert {o["uid"] for o in owners} == {w["metadata"]["uid"] for w in workloads}
    assert report(api_client, gang.pk, token_in_secret(cluster, gang)).status_code == 200


def test_a_job_that_reports_with_an_api_token_gets_no_checkpoint_token(cluster, clock, people):
    job = submit_job(people["bob"], "nlp", H100, command=["sleep", "3600"],
                     checkpoint=BY_TOKEN | {"report": "api"})  # fmt: skip
    cycle(cluster, clock)
    job = run_until(cluster, clock, job, JobState.RUNNING)
    env = container_env(workload_of(cluster, job))
    assert "PORTAL_CHECKPOINT_TOKEN" not in env and "PORTAL_CHECKPOINT_URL" not in env
    assert not JobCheckpointToken.objects.exists()
    assert not [s for s in cluster.list_secrets("team-nlp") if s["metadata"]["name"].startswith("portal-checkpoint-")]


def test_report_token_is_declared_through_the_api_and_unknown_ways_say_what_to_use(api_client, inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    api_client.force_login(people["alice"])
    made = api_client.post("/api/v1/jobs/", api_job_body(checkpoint={"grace_seconds": 90, "report": "token"}),
                           format="json")  # fmt: skip
    assert made.status_code == 201, made.json()
    assert made.json()["checkpoint"] == {"signal": "SIGTERM", "grace_seconds": 90, "report": "token"}
    wrong = api_client.post("/api/v1/jobs/", api_job_body(checkpoint={"grace_seconds": 90, "report": "file"}),
                            format="json")  # fmt: skip
    assert wrong.status_code == 400
    (problem,) = wrong.json()["checkpoint"]
    assert "report 'file' is not offered: use one of api, token" in problem and "PORTAL_CHECKPOINT_TOKEN" in problem
    # The portal's own variables are not the job's to set.
    taken = api_client.post("/api/v1/jobs/", api_job_body(env={"PORTAL_CHECKPOINT_TOKEN": "x"}), format="json")
    assert taken.status_code == 400 and "set by the portal" in json.dumps(taken.json())
    assert Job.objects.count() == 1


def test_the_token_is_rendered_by_reference_only(inventory, people):
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 4, 8)
    job = job_in_state(people["alice"], JobState.ADMITTED, checkpoint=BY_TOKEN)
    job.attempts, job.workload_name = 1, job.default_workload_name()
    env = {e["name"]: e for e in render_job(job)["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert "value" not in env["PORTAL_CHECKPOINT_TOKEN"]
    ref = env["PORTAL_CHECKPOINT_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": f"portal-checkpoint-{job.workload_name}", "key": "token"}


def test_the_job_page_and_the_form_say_how_checkpoints_are_reported(client, inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    client.force_login(people["alice"])
    form = {
        "team": people["vision"].pk, "name": "resnet", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": "python train.py", "args": "", "env": "", "resource_class": rc.pk, "count": 1, "cpu": "4",
        "memory_mb": 16384, "priority": 50, "max_runtime_hours": "1.5", "idempotency_key": "form-ckpt-1",
        "checkpoint_signal": "SIGUSR1", "checkpoint_grace": 120, "checkpoint_report": "token",
    }  # fmt: skip
    response = client.post("/jobs/new/", form)
    assert response.status_code == 302, response.context["form"].errors
    job = Job.objects.get()
    assert job.checkpoint == {"signal": "SIGUSR1", "grace_seconds": 120, "report": "token"}
    page = client.get(job.get_absolute_url()).content.decode()
    assert "<code>gpuportal checkpoint</code>" in page and "$PORTAL_CHECKPOINT_TOKEN" in page
    assert client.get(f"/jobs/new/?from={job.pk}").context["form"].initial["checkpoint_report"] == "token"


def test_admins_see_the_tokens_by_prefix_never_by_value(admin_client, inventory, people):
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 4, 8)
    job = job_in_state(people["alice"], JobState.RUNNING, checkpoint=BY_TOKEN)
    token, raw = JobCheckpointToken.mint(job.pk, job.default_workload_name())
    page = admin_client.get("/admin/jobs/jobcheckpointtoken/").content.decode()
    assert token.key_prefix in page and raw not in page
    assert admin_client.get(f"/admin/jobs/jobcheckpointtoken/{token.pk}/change/").status_code == 200
    assert admin_client.get("/admin/jobs/jobcheckpointtoken/add/").status_code == 403
