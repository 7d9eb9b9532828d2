"""The jobs API answers a job exactly as its serializer does with a fresh instance per request: the kept instance
(core.api.kept.KeptAnswers) and the narrowed read (``answered``) change what a request costs, not a byte of
what it says, for the detail, every row of the list, the long-poll and the job an action returns."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.renderers import JSONRenderer
from rest_framework.request import Request
from rest_framework.test import APIRequestFactory

from accounts.models import APIToken
from gpus.models import Cluster, ResourceClass
from jobs import actions
from jobs.api.serializers import JobSerializer
from jobs.api.streams import JobWaitSerializer
from jobs.models import Job, JobArray, JobEvent

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def world(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 64, 128)
    _, raw = APIToken.issue(people["alice"], "answers")
    return {**people, "rc": rc, "token": raw}


def varied_jobs(world) -> list[Job]:
    """Jobs that fill every kind of field: queued with an estimate, running on a cluster, failed, a distributed job
    with ranks, a task of an array, a resubmission, a cancelled notebook session ("Stopped")."""
    now = timezone.now()
    cluster = Cluster.objects.first() or Cluster.objects.create(name="east")
    array = JobArray.objects.create(team=world["vision"], owner=world["alice"], name="sweep", size=2)
    common = {"team": world["vision"], "owner": world["alice"], "image": "nvcr.io/nvidia/pytorch:24.01-py3",
              "resource_class": world["rc"]}  # fmt: skip
    jobs = [
        Job(**common, name="queued", state="queued", submitted_at=now, estimated_at=now,
            estimated_start_low=now + timedelta(minutes=5), estimated_start_high=None, estimated_cluster="east",
            wait_reason="quota", wait_message="Team vision has 0 of 4.", wait_detail={"why": "quota"},
            queue_position=3, labels={"pipeline": "p1"}, env=[{"name": "EPOCHS", "value": "3"}],
            command=["python", "train.py"], cpu_millicores=1500, priority=30),
        Job(**common, name="running", state="running", cluster=cluster, node_name="n1", started_at=now,
            admitted_at=now, gpu_util_recent=12.5, node_names=["n1"], checkpoint={"signal": "SIGTERM",
            "grace_seconds": 60, "report": "api"}, last_checkpoint_at=now, volumes=[{"claim": "data",
            "mount_path": "/data", "read_only": True}], shm_mb=512, architecture="amd64", clusters=["east"]),
        Job(**common, name="failed", state="failed", exit_code=1, failure_reason="OOMKilled", finished_at=now,
            secret_env=[{"name": "K", "secret": "s", "key": "k"}], secret_files=[{"secret": "s", "path": "/s",
            "keys": []}]),
        Job(**common, name="gang", kind="distributed", workers=2, count=4, state="running", topology_key="zone",
            topology_mode="prefer", max_retries=1, node_names=["n1", "n2"],
            ranks=[{"rank": 0, "node": "n1", "pod": "p0", "state": "running", "exit_code": None, "reason": ""}]),
        Job(**common, name="task", state="queued", array=array, array_index=1),
        Job(**common, name="session", kind="notebook", state="cancelled", finished_at=now),
    ]  # fmt: skip
    jobs = Job.objects.bulk_create(jobs)
    Job.objects.filter(pk=jobs[2].pk).update(resubmitted_from=jobs[1])
    JobEvent.objects.create(job=jobs[0], kind="submitted", message="in")
    return jobs


def as_serializer_says(serializer_class, job_id: int, **extra) -> dict:
    """The job as a fresh serializer instance answers it, read with every column of the rows it joins."""
    job = Job.objects.select_related("team", "owner", "resource_class", "cluster").get(pk=job_id)
    for name, value in extra.items():
        setattr(job, name, value)
    request = Request(APIRequestFactory().get("/"))
    return json.loads(JSONRenderer().render(serializer_class(job, context={"request": request}).data))


def test_detail_list_wait_and_actions_answer_as_the_serializer_does(api_client, world):
    jobs = varied_jobs(world)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {world['token']}")
    for job in jobs:
        said = as_serializer_says(JobSerializer, job.pk)
        detail = api_client.get(f"/api/v1/jobs/{job.pk}/").json()
        assert list(detail.items()) == list(said.items())  # the same keys in the same order, the same values
        waited = api_client.get(f"/api/v1/jobs/{job.pk}/wait/?timeout=0").json()
        ended = job.state in ("succeeded", "failed", "cancelled")
        assert waited["timed_out"] is not ended  # an ended job answers at once; another one waited 0 s
        assert list(waited.items()) == list(as_serializer_says(JobWaitSerializer, job.pk, timed_out=not ended).items())
    rows = api_client.get("/api/v1/jobs/?limit=1000").json()["results"]
    assert [list(row.items()) for row in rows] == [
        list(as_serializer_says(JobSerializer, row["id"]).items()) for row in rows
    ]
    assert {row["id"] for row in rows} == {job.pk for job in jobs}
    cancelled = api_client.post(f"/api/v1/jobs/{jobs[0].pk}/cancel/", {}, format="json").json()
    assert list(cancelled.items()) == list(as_serializer_says(JobSerializer, jobs[0].pk).items())
