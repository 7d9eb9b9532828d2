"""Resubmit with changes of a job that uses every part of the spec the merged branches brought together (volumes,
/dev/shm, secret variables and files, labels, working directory, architecture): the API's resubmit keeps what
is not overridden and validates the new fields like a new job, and the browser form is filled with all of it so
that posting it unchanged (but for the one change) gives the same spec."""

from __future__ import annotations

import pytest

from gpus.models import ResourceClass
from jobs import actions
from jobs.models import Job
from jobs.storage import secrets, volumes
from jobs.storage.mounts import (
    format_secret_env_text,
    format_secret_files_text,
    parse_secret_env_text,
    parse_secret_files_text,
)
from tests.sim_objects import H100, claim

MOUNTS = [
    {"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False},
    {"claim": "reference", "mount_path": "/data/reference", "read_only": True},
]
SECRET_ENV = [{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}]
SECRET_FILES = [{"secret": "gcs", "path": "/secrets/gcs", "keys": ["key.json"]}]


@pytest.fixture
def setup(inventory, people, monkeypatch):
    for namespace in ("team-vision", "team-nlp"):
        inventory.ensure_namespace(namespace)
    inventory.ensure_pvc(claim("checkpoints"))
    inventory.ensure_pvc(claim("reference", modes=("ReadOnlyMany",)))
    volumes.reconcile_volumes(inventory)
    monkeypatch.setattr(secrets, "get_backend", lambda: inventory)
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    secrets.create_secret(people["alice"], people["vision"], "wandb", {"token": "t0ken-value"})
    secrets.create_secret(people["alice"], people["vision"], "gcs", {"key.json": "{}", "other": "x"})
    fields = dict(
        name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=["--resume"],
        env=[{"name": "EPOCHS", "value": "10"}], count=1, cpu_millicores=4000, memory_mb=16384, priority=50,
        preemptible=False, max_runtime_seconds=3600, volumes=MOUNTS, shm_mb=2048, secret_env=SECRET_ENV,
        secret_files=SECRET_FILES, labels={"git-sha": "1a2b3c4"}, working_dir="/workspace",
    )  # fmt: skip
    job = actions.submit_job(people["alice"], people["vision"], rc, fields).job
    actions.cancel_job(people["alice"], job)
    return {**people, "rc": rc, "job": job}


def test_the_secret_text_formats_read_back_what_they_wrote():
    assert parse_secret_env_text(format_secret_env_text(SECRET_ENV)) == SECRET_ENV
    assert parse_secret_files_text(format_secret_files_text(SECRET_FILES)) == SECRET_FILES
    everything = [{"secret": "gcs", "path": "/secrets/gcs", "keys": []}]
    assert format_secret_files_text(everything) == "gcs /secrets/gcs"
    assert parse_secret_files_text(format_secret_files_text(everything)) == everything


def test_api_resubmit_with_a_change_keeps_volumes_secrets_and_labels(api_client, setup):
    job = setup["job"]
    api_client.force_login(setup["alice"])
    response = api_client.post(f"/api/v1/jobs/{job.pk}/resubmit/", {"preemptible": True}, format="json")
    assert response.status_code == 201, response.json()
    new = Job.objects.get(pk=response.json()["id"])
    assert new.preemptible and new.resubmitted_from == job
    assert new.volumes == MOUNTS and new.shm_mb == 2048
    assert new.secret_env == SECRET_ENV and new.secret_files == SECRET_FILES
    assert new.labels == {"git-sha": "1a2b3c4"} and new.working_dir == "/workspace"
    assert actions.spec_of(new) | {"preemptible": False} == actions.spec_of(job)


def test_api_resubmit_overrides_of_the_new_fields_are_validated_like_a_new_job(api_client, setup):
    job = setup["job"]
    api_client.force_login(setup["alice"])
    bad = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/",
        {
            "volumes": [{"claim": "checkpoints", "mount_path": "/etc/ckpt"}],
            "shm_mb": 10,
            "secret_env": [{"name": "X", "secret": "nope", "key": "token"}],
            "architecture": "sparc",
        },
        format="json",
    )
    assert bad.status_code == 400
    errors = bad.json()
    assert "architecture" in errors  # shape problems come first, as for a new job
    bad = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/",
        {
            "volumes": [{"claim": "checkpoints", "mount_path": "/etc/ckpt"}],
            "shm_mb": 10,
            "secret_env": [{"name": "X", "secret": "nope", "key": "token"}],
        },
        format="json",
    )
    assert bad.status_code == 400
    errors = bad.json()
    assert {"volumes", "shm_mb", "secret_env"} <= set(errors), errors  # every problem at once
    assert "/etc" in str(errors["volumes"]) and "no secret nope" in str(errors["secret_env"])
    # A volume may not go inside where the job's secret files are mounted (one mount rule).
    inside = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/",
        {"volumes": [{"claim": "checkpoints", "mount_path": "/secrets/gcs/more"}]},
        format="json",
    )
    assert inside.status_code == 400 and "secret gcs" in str(inside.json()["volumes"])
    assert Job.objects.count() == 1
    ok = api_client.post(
        f"/api/v1/jobs/{job.pk}/resubmit/", {"shm_mb": 4096, "architecture": "amd64", "volumes": []}, format="json"
    )
    assert ok.status_code == 201, ok.json()
    new = Job.objects.get(pk=ok.json()["id"])
    assert new.shm_mb == 4096 and new.architecture == "amd64" and new.volumes == []
    assert new.secret_env == SECRET_ENV and new.labels == {"git-sha": "1a2b3c4"}


def test_the_form_is_filled_with_volumes_secrets_shm_labels_and_posts_the_same_spec(client, setup):
    job = setup["job"]
    client.force_login(setup["alice"])
    page = client.get(f"/jobs/new/?from={job.pk}")
    form = page.context["form"]
    assert form.initial["secret_env"] == "WANDB_API_KEY=wandb/token"
    assert form.initial["secret_files"] == "gcs /secrets/gcs key.json"
    assert form.initial["labels"] == "git-sha=1a2b3c4" and form.initial["working_dir"] == "/workspace"
    assert form.initial["shm_mb"] == 2048 and form.initial["architecture"] == ""
    rows = [{k: row[k] for k in ("claim", "mount_path", "read_only")} for row in form.volume_rows()]
    assert rows[: len(MOUNTS)] == MOUNTS
    html = page.content.decode()
    assert 'value="/data/reference"' in html and "WANDB_API_KEY=wandb/token" in html
    # Post the form as the page filled it, with Preemptible ticked: the same spec but for that.
    initial = form.initial
    data = {
        name: value
        for name, value in initial.items()
        if value is not None and name not in ("preemptible", "volumes", "team", "resource_class")
    } | {
        "team": setup["vision"].pk,
        "resource_class": setup["rc"].pk,
        "idempotency_key": "resubmit-form-1",
        "preemptible": "on",
        "volume_claim": [m["claim"] for m in MOUNTS],
        "volume_path": [m["mount_path"] for m in MOUNTS],
        "volume_read_only": [str(i) for i, m in enumerate(MOUNTS) if m["read_only"]],
    }
    response = client.post("/jobs/new/", data)
    assert response.status_code == 302, response.context["form"].errors
    new = Job.objects.exclude(pk=job.pk).get()
    assert new.resubmitted_from == job and new.preemptible
    assert actions.spec_of(new) | {"preemptible": False} == actions.spec_of(job)
