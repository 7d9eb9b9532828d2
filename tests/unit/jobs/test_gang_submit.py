"""Asking for a distributed job (W workers × G GPUs), from the form and the API: what is accepted, what each
problem is told (all at once), the fingerprint of an idempotent retry, resubmission with other workers, and the
schema's new fields."""

from __future__ import annotations

import pytest

from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobKind, Priority
from jobs.models import Job
from jobs.usage import held_units
from tests.factories import member
from tests.sim_objects import H100

pytestmark = pytest.mark.django_db

ZONE = "topology.kubernetes.io/zone"


@pytest.fixture
def setup(inventory, people):
    """vision may hold 8 guaranteed / 16 H100; carol is a plain member."""
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    carol = member(people["vision"])
    return {**people, "rc": rc, "carol": carol}


def body(**overrides) -> dict:
    data = {
        "team": "vision", "name": "ddp", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": ["torchrun", "train.py"], "resource_class": H100, "count": 4, "cpu": 8, "memory_mb": 65536,
        "kind": "distributed", "workers": 2,
    }  # fmt: skip
    data.update(overrides)
    return {k: v for k, v in data.items() if v is not None}


def post(api_client, user, **overrides):
    api_client.force_login(user)
    return api_client.post("/api/v1/jobs/", body(**overrides), format="json")


def spec(**overrides) -> dict:
    fields = dict(
        name="ddp", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["torchrun", "t.py"], count=4,
        cpu_millicores=8000, memory_mb=65536, priority=Priority.NORMAL, preemptible=False, max_runtime_seconds=3600,
        kind=JobKind.DISTRIBUTED, workers=2,
    )  # fmt: skip
    fields.update(overrides)
    return fields


def test_a_2_by_4_gang_is_queued_over_the_api_and_reads_back_its_shape(api_client, setup):
    response = post(api_client, setup["carol"], topology_key=ZONE, topology_mode="prefer", max_retries=2)
    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["kind"], data["workers"], data["count"], data["total_gpus"]) == ("distributed", 2, 4, 8)
    assert (data["topology_key"], data["topology_mode"], data["max_retries"]) == (ZONE, "prefer", 2)
    assert data["ranks"] == [] and data["node_names"] == [] and data["failed_rank"] is None
    assert data["gpu_units"] == 8.0
    job = Job.objects.get(pk=data["id"])
    assert (job.kind, job.workers, job.total_count) == (JobKind.DISTRIBUTED, 2, 8)
    assert "2 workers × 4 × " in job.events.first().message
    Job.objects.filter(pk=job.pk).update(state="running")
    held = held_units([setup["vision"].pk], [setup["rc"].pk])
    assert held == {(setup["vision"].pk, setup["rc"].pk): 8}  # what the quota bars show as held


def test_a_batch_request_is_unchanged_by_the_new_fields(api_client, setup):
    response = post(api_client, setup["carol"], kind=None, workers=None, count=2)
    assert response.status_code == 201, response.json()
    data = response.json()
    assert (data["kind"], data["workers"], data["total_gpus"], data["max_retries"]) == ("batch", 1, 2, 0)


def test_every_problem_of_a_gang_is_told_at_once_in_words(api_client, setup):
    # 5 × 4 = 20 over the limit of 16, a mode without a key and retries out of range: one answer names all three.
    response = post(api_client, setup["carol"], workers=5, topology_mode="require", max_retries=11)
    errors = response.json()
    assert response.status_code == 400, errors
    assert "Give from 0 to 10 retries." in errors["max_retries"]
    assert "5 workers × 4 = 20" in errors["workers"][0] and "limit of 16" in errors["workers"][0]
    assert "Pick the topology label" in errors["topology_mode"][0]
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"kind": "batch", "workers": 2, "count": 1}, "workers", "Only a distributed job has more than one worker"),
        ({"count": 9}, "count", "No node has 9 × "),
        ({"count": 8, "workers": 9, "max_retries": 0}, "workers", "9 workers need 9 nodes"),
        ({"workers": 65}, "workers", "At most 64 workers"),
        ({"workers": 0}, "workers", "greater than or equal to 1"),
        ({"topology_key": "example.com/rack", "topology_mode": "prefer"}, "topology_key", "not a topology label"),
        ({"topology_key": ZONE}, "topology_mode", "prefer or require"),
        ({"kind": "batch", "workers": 1, "topology_key": ZONE, "topology_mode": "prefer"}, "topology_key",
         "Only a distributed job has a topology"),
        ({"kind": "batch", "workers": 1, "max_retries": 2}, "max_retries", "batch job takes 0"),
        ({"kind": "notebook"}, "kind", "/api/v1/notebooks/"),
        ({"env": {"MASTER_ADDR": "10.0.0.1", "EPOCHS": "3", "NODE_RANK": "0"}}, "env",
         "MASTER_ADDR, NODE_RANK: the portal sets these on every worker of a distributed job"),
    ],
)  # fmt: skip
def test_bad_gang_requests_say_what_to_fix(api_client, setup, overrides, field, words):
    response = post(api_client, setup["carol"], **overrides)
    assert response.status_code == 400, response.json()
    assert words in " ".join(response.json()[field]), response.json()
    assert not Job.objects.exists()


def test_a_gang_needs_whole_gpus(inventory, people):
    mig = ResourceClass.objects.filter(kind="mig").first()
    shared = ResourceClass.objects.filter(kind="shared").first()
    for rc, words in ((mig, "a MIG slice"), (shared, "a time-sliced share")):
        actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
        with pytest.raises(actions.ValidationError) as caught:
            actions.submit_job(people["alice"], people["vision"], rc, spec(count=1))
        message = " ".join(caught.value.message_dict["resource_class"])
        assert words in message and "NCCL" in message and "whole GPUs" in message


def test_no_array_of_distributed_jobs(setup):
    with pytest.raises(actions.ValidationError) as caught:
        actions.submit_array(setup["carol"], setup["vision"], setup["rc"], spec(), size=3)
    assert "cannot be a job array" in caught.value.message_dict["array_size"][0]


def test_the_fingerprint_covers_the_gang_fields_and_keeps_batch_fingerprints(setup):
    team, rc = setup["vision"], setup["rc"]
    batch = spec(kind=JobKind.BATCH, workers=1)
    without = {k: v for k, v in batch.items() if k not in actions.GANG_FIELD_DEFAULTS}
    full = actions.spec_defaults()
    assert actions.request_fingerprint(team, rc, full | batch) == actions.request_fingerprint(team, rc, full | without)
    two = actions.request_fingerprint(team, rc, full | spec(workers=2))
    assert two != actions.request_fingerprint(team, rc, full | spec(workers=3))
    assert two != actions.request_fingerprint(team, rc, full | spec(workers=2, max_retries=1))
    assert two != actions.request_fingerprint(
        team, rc, full | spec(workers=2, topology_key=ZONE, topology_mode="prefer")
    )
    # A retry with the same key and other workers is a conflict, not the first job back.
    actions.submit_job(setup["carol"], team, rc, spec(), idempotency_key="k1")
    with pytest.raises(actions.IdempotencyConflict):
        actions.submit_job(setup["carol"], team, rc, spec(workers=3), idempotency_key="k1")
    assert actions.submit_job(setup["carol"], team, rc, spec(), idempotency_key="k1").created is False


def test_resubmit_carries_the_gang_fields_and_may_change_them(api_client, setup):
    job = actions.submit_job(setup["carol"], setup["vision"], setup["rc"], spec(max_retries=1)).job
    Job.objects.filter(pk=job.pk).update(state="failed")
    job.refresh_from_db()
    same = actions.resubmit_job(setup["carol"], job)
    assert (same.kind, same.workers, same.count, same.max_retries) == (JobKind.DISTRIBUTED, 2, 4, 1)
    api_client.force_login(setup["carol"])
    response = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/",
        {"workers": 3, "topology_key": ZONE, "topology_mode": "require"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    new = Job.objects.get(pk=response.json()["id"])
    assert (new.workers, new.count, new.topology_key, new.topology_mode, new.max_retries) == (3, 4, ZONE, "require", 1)


def form_data(setup, **overrides) -> dict:
    data = {
        "team": setup["vision"].pk, "name": "ddp", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": "torchrun train.py", "resource_class": setup["rc"].pk, "count": 2, "cpu": "4",
        "memory_mb": 16384, "priority": 50, "max_runtime_hours": "1", "idempotency_key": "form-1",
        "kind": "distributed", "workers": 2, "max_retries": 0,
    }  # fmt: skip
    data.update(overrides)
    return data


def test_the_form_submits_a_gang_and_offers_the_topology_labels_in_words(client, setup):
    client.force_login(setup["carol"])
    page = client.get("/jobs/new/").content.decode()
    assert 'data-show-for-kind="distributed"' in page and 'name="workers"' in page
    assert f'<option value="{ZONE}">Same zone ({ZONE})</option>' in page
    assert "MASTER_ADDR" in page and "NODE_RANK" in page
    response = client.post("/jobs/new/", form_data(setup, topology_key=ZONE, topology_mode="prefer"))
    assert response.status_code == 302, response.context["form"].errors
    job = Job.objects.get()
    assert (job.kind, job.workers, job.count, job.topology_key, job.topology_mode) == (
        "distributed",
        2,
        2,
        ZONE,
        "prefer",
    )
    # "Resubmit with changes" fills the form with the gang's fields.
    form = client.get(f"/jobs/new/?from={job.pk}").context["form"]
    assert (form.initial["kind"], form.initial["workers"], form.initial["topology_key"]) == ("distributed", 2, ZONE)


def test_the_form_tells_every_gang_problem_in_one_round(client, setup):
    client.force_login(setup["carol"])
    response = client.post(
        "/jobs/new/",
        form_data(setup, count=9, workers=2, topology_key=ZONE, topology_mode="", array_size=2, name="Bad_Name"),
    )
    assert response.status_code == 200
    errors = response.context["form"].errors
    assert {"name", "count", "topology_mode", "array_size"} <= set(errors), errors
    assert "No node has 9 × " in errors["count"][0] and "the largest has 8" in errors["count"][0]
    batch = client.post("/jobs/new/", form_data(setup, kind="batch", workers=3, idempotency_key="form-2"))
    assert "Only a distributed job" in batch.context["form"].errors["workers"][0]
    assert not Job.objects.exists()


def test_a_form_without_the_new_fields_is_a_batch_job(client, setup):
    client.force_login(setup["carol"])
    data = {k: v for k, v in form_data(setup).items() if k not in ("kind", "workers", "max_retries")}
    assert client.post("/jobs/new/", data).status_code == 302
    assert Job.objects.get().kind == JobKind.BATCH and Job.objects.get().workers == 1


def test_the_schema_describes_the_gang_fields(openapi_schema):
    schema = openapi_schema
    job = schema["components"]["schemas"]["Job"]["properties"]
    request = schema["components"]["schemas"]["JobRequest"]["properties"]
    assert {"workers", "topology_key", "topology_mode", "max_retries"} <= set(request)
    assert not {"ranks", "node_names", "failed_rank", "total_gpus"} & set(request)
    assert job["ranks"]["type"] == "array" and "enum" not in job["ranks"]["items"]["properties"]["state"]
    assert job["total_gpus"]["readOnly"] is True
    assert {"prefer", "require"} <= set(schema["components"]["schemas"]["TopologyModeEnum"]["enum"])
    # A blank mode (no topology) is valid in both directions: the enum comes with drf-spectacular's BlankEnum.
    for component in (job, request):
        refs = {option.get("$ref", "").rsplit("/", 1)[-1] for option in component["topology_mode"]["oneOf"]}
        assert refs == {"TopologyModeEnum", "BlankEnum"}, component["topology_mode"]
    assert schema["components"]["schemas"]["BlankEnum"]["enum"] == [""]


def test_a_batch_job_may_still_set_master_addr(api_client, setup):
    response = post(api_client, setup["carol"], kind="batch", workers=1, env={"MASTER_ADDR": "10.0.0.1"})
    assert response.status_code == 201, response.json()
