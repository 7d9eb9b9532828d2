"""Team secrets and registry credentials: leads manage them, members see names and keys, other teams see nothing,
and a value never lands in the portal's database, audit log, responses or logs (checked by scanning them all).
Jobs use them as secretKeyRef variables, read-only files and imagePullSecrets; what is missing is refused at
submission, and a pod that waits for a secret or is refused by a registry is explained in words."""

from __future__ import annotations

import base64
import json
import logging

import pytest
import yaml
from django.core import serializers as django_serializers
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import connection

from cluster.base import ClusterError
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions, pod_states
from jobs.kinds import for_job
from jobs.models import Job, RegistryCredential, TeamSecret
from jobs.render import render_job
from jobs.storage import secrets
from tests.factories import member
from tests.sim_objects import DEMO_SCENARIO, H100

A100_3G = "nvidia.com/mig-3g.40gb@NVIDIA-A100-SXM4-80GB"
VALUE = "hunter2-very-secret-value-7f3a"
TOKEN = "ngc-api-key-0123456789abcdef"
# base64 spellings of the values must not leak either (a Secret's data is base64).
LEAKS = [VALUE, TOKEN, base64.b64encode(VALUE.encode()).decode()[:20], base64.b64encode(TOKEN.encode()).decode()[:20]]


@pytest.fixture
def setup(cluster, clock, people, monkeypatch):
    """alice leads vision; carol is a plain member of vision; bob is in nlp. vision has an H100 quota. The team
    secrets live in the demo ``cluster`` (tests/conftest.py), which the cycle reaches too."""
    monkeypatch.setattr(secrets, "get_backend", lambda: cluster)
    carol = member(people["vision"])
    h100 = ResourceClass.objects.get(key=H100)
    return {**people, "carol": carol, "h100": h100, "cluster": cluster, "clock": clock}


def fields(**extra) -> dict:
    return dict(
        name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
        count=1, cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=3600,
    ) | extra  # fmt: skip


def database_dump() -> str:
    """Every row of every table, as text."""
    lines = []
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names():
            cursor.execute(f'SELECT * FROM "{table}"')  # noqa: S608 - table names come from the schema
            lines.extend(repr(row) for row in cursor.fetchall())
    return "\n".join(lines)


def assert_no_leak(*texts: str) -> None:
    for text in texts:
        for leak in LEAKS:
            assert leak not in text


# -- managing ---------------------------------------------------------------------------------------------------


def test_a_lead_creates_rotates_and_deletes_a_secret_whose_values_live_only_in_the_cluster(setup, caplog):
    caplog.set_level(logging.DEBUG)
    alice, vision, cluster = setup["alice"], setup["vision"], setup["cluster"]
    secret = secrets.create_secret(alice, vision, "wandb", {"token": VALUE, "entity": "acme"}, "W&B login")
    assert secret.keys == ["entity", "token"] and secret.created_by == alice
    stored = cluster.get_secret("team-vision", "wandb")
    assert stored["type"] == "Opaque" and stored["data"] == {"entity": "", "token": ""}
    assert stored["metadata"]["labels"]["gpu-portal.io/team"] == "vision"
    # The cluster holds the value (base64, as the API server stores Secrets).
    raw = cluster._store._load()["secrets"]["team-vision/wandb"]["data"]["token"]
    assert base64.b64decode(raw).decode() == VALUE

    secrets.rotate_secret(alice, secret, {"token": VALUE + "-2"})
    secret.refresh_from_db()
    assert secret.keys == ["token"] and secret.rotated_by == alice and secret.rotated_at is not None
    assert cluster.get_secret("team-vision", "wandb")["data"] == {"token": ""}

    verbs = list(AuditEvent.objects.order_by("id").values_list("action", flat=True))
    assert verbs[-2:] == ["secret.create", "secret.rotate"]
    rotate = AuditEvent.objects.get(action="secret.rotate")
    assert rotate.before["keys"] == ["entity", "token"] and rotate.after["keys"] == ["token"]

    secrets.delete_secret(alice, secret)
    assert not TeamSecret.objects.exists()
    assert cluster.list_secrets("team-vision") == []
    assert AuditEvent.objects.filter(action="secret.delete").count() == 1
    assert_no_leak(database_dump(), caplog.text)


def test_registry_credentials_become_dockerconfigjson_secrets(setup):
    alice, vision, cluster = setup["alice"], setup["vision"], setup["cluster"]
    credential = secrets.create_registry_credential(alice, vision, "https://NVCR.io/", "$oauthtoken", TOKEN)
    assert credential.registry == "nvcr.io" and credential.secret_name == "portal-registry-nvcr.io"
    stored = cluster._store._load()["secrets"]["team-vision/portal-registry-nvcr.io"]
    assert stored["type"] == "kubernetes.io/dockerconfigjson"
    config = json.loads(base64.b64decode(stored["data"][".dockerconfigjson"]))
    entry = config["auths"]["nvcr.io"]
    assert entry["username"] == "$oauthtoken" and entry["password"] == TOKEN
    assert base64.b64decode(entry["auth"]).decode() == f"$oauthtoken:{TOKEN}"
    secrets.rotate_registry_credential(alice, credential, TOKEN + "x")
    config = json.loads(
        base64.b64decode(cluster._store._load()["secrets"][f"team-vision/{credential.secret_name}"]["data"][
            ".dockerconfigjson"
        ])
    )  # fmt: skip
    assert config["auths"]["nvcr.io"]["password"] == TOKEN + "x"
    audit = AuditEvent.objects.filter(action__startswith="registry.").order_by("id")
    assert [e.action for e in audit] == ["registry.create", "registry.rotate"]
    assert_no_leak(database_dump())


def test_docker_hub_credentials_go_under_the_key_the_kubelet_looks_up():
    config = json.loads(secrets.docker_config_json("docker.io", "me", "pw"))
    assert list(config["auths"]) == ["https://index.docker.io/v1/"]


@pytest.mark.parametrize(
    ("registry", "name"),
    [
        ("nvcr.io", "portal-registry-nvcr.io"),
        ("registry.example.com:5000", None),
        ("[::1]:5000", None),
        ("a" * 60 + ".example.com", None),
    ],
)
def test_registry_secret_names_are_valid_and_distinct(registry, name):
    from cluster.sim.validation import DNS1123_SUBDOMAIN

    made = secrets.registry_secret_name(registry)
    assert DNS1123_SUBDOMAIN.match(made) and len(made) <= 63
    if name:
        assert made == name
    assert made != secrets.registry_secret_name(registry + "1")


def test_members_and_other_teams_cannot_manage(setup):
    carol, bob, vision = setup["carol"], setup["bob"], setup["vision"]
    for user in (carol, bob, setup["outsider"]):
        with pytest.raises(PermissionDenied):
            secrets.create_secret(user, vision, "wandb", {"token": VALUE})
        with pytest.raises(PermissionDenied):
            secrets.create_registry_credential(user, vision, "nvcr.io", "$oauthtoken", TOKEN)
    secret = secrets.create_secret(setup["admin"], vision, "wandb", {"token": VALUE})
    with pytest.raises(PermissionDenied):
        secrets.rotate_secret(carol, secret, {"token": "x"})
    with pytest.raises(PermissionDenied):
        secrets.delete_secret(bob, secret)


def test_every_problem_is_reported_at_once(setup):
    alice, vision = setup["alice"], setup["vision"]
    with pytest.raises(ValidationError) as error:
        secrets.create_secret(
            alice, vision, "Bad_Name", {"bad key": "v", "empty": "", "big": "x" * (300 * 1024)}, "d" * 201
        )
    messages = error.value.message_dict
    assert set(messages) == {"name", "data", "description"}
    assert any("bad key" in m for m in messages["data"])
    assert any("empty" in m for m in messages["data"])
    assert any("at most 262144 bytes" in m for m in messages["data"])
    with pytest.raises(ValidationError) as error:
        secrets.create_registry_credential(alice, vision, "not a host!", "has space", "")
    assert set(error.value.message_dict) == {"registry", "username", "token"}
    with pytest.raises(ValidationError, match="portal"):
        secrets.create_secret(alice, vision, "portal-registry-x", {"a": "b"})
    secrets.create_secret(alice, vision, "wandb", {"token": VALUE})
    with pytest.raises(ValidationError, match="already has a secret wandb"):
        secrets.create_secret(alice, vision, "wandb", {"token": VALUE})
    assert TeamSecret.objects.count() == 1


def test_a_cluster_that_refuses_changes_nothing(setup, monkeypatch):
    class Down(SimulatedCluster):
        def apply_secret(self, *args, **kwargs):
            raise ClusterError("connection refused")

    monkeypatch.setattr(secrets, "get_backend", lambda: Down(None, scenario=DEMO_SCENARIO))
    with pytest.raises(secrets.ClusterUnavailable, match="Nothing was changed"):
        secrets.create_secret(setup["alice"], setup["vision"], "wandb", {"token": VALUE})
    assert not TeamSecret.objects.exists()
    assert not AuditEvent.objects.filter(action__startswith="secret.").exists()


# -- the API ------------------------------------------------------------------------------------------------------


def test_the_api_never_returns_a_value_and_shows_each_team_only_its_own(api_client, setup):
    api_client.force_login(setup["alice"])
    response = api_client.post(
        "/api/v1/secrets/", {"team": "vision", "name": "wandb", "data": {"token": VALUE}}, format="json"
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["keys"] == ["token"] and "data" not in body and body["created_by"] == "alice"
    secret_id = body["id"]
    response = api_client.post(
        "/api/v1/registry-credentials/",
        {"team": "vision", "registry": "nvcr.io", "username": "$oauthtoken", "token": TOKEN},
        format="json",
    )
    assert response.status_code == 201, response.content
    assert "token" not in response.json() and response.json()["secret_name"] == "portal-registry-nvcr.io"
    reg_id = response.json()["id"]
    rotated = api_client.post(f"/api/v1/secrets/{secret_id}/rotate/", {"data": {"token": VALUE + "2"}}, format="json")
    assert rotated.status_code == 200 and rotated.json()["rotated_by"] == "alice"
    answers = [response.content, rotated.content]

    # A member of the team sees names and keys, and cannot change anything.
    api_client.force_login(setup["carol"])
    listed = api_client.get("/api/v1/secrets/")
    assert [s["name"] for s in listed.json()["results"]] == ["wandb"]
    assert api_client.get(f"/api/v1/registry-credentials/{reg_id}/").json()["registry"] == "nvcr.io"
    assert (
        api_client.post(f"/api/v1/secrets/{secret_id}/rotate/", {"data": {"a": "b"}}, format="json").status_code == 403
    )
    assert api_client.delete(f"/api/v1/secrets/{secret_id}/").status_code == 403
    created = api_client.post("/api/v1/secrets/", {"team": "vision", "name": "x", "data": {"a": "b"}}, format="json")
    assert created.status_code == 403
    answers += [listed.content]

    # Another team sees nothing, not even the names.
    api_client.force_login(setup["bob"])
    assert api_client.get("/api/v1/secrets/").json()["results"] == []
    assert api_client.get("/api/v1/registry-credentials/").json()["results"] == []
    assert api_client.get(f"/api/v1/secrets/{secret_id}/").status_code == 404
    assert api_client.delete(f"/api/v1/registry-credentials/{reg_id}/").status_code == 404

    api_client.force_login(setup["alice"])
    assert api_client.delete(f"/api/v1/registry-credentials/{reg_id}/").status_code == 204
    assert not RegistryCredential.objects.exists()
    assert_no_leak(*(a.decode() for a in answers), database_dump())


def test_the_api_reports_every_problem_with_a_400(api_client, setup):
    api_client.force_login(setup["alice"])
    response = api_client.post(
        "/api/v1/secrets/", {"team": "vision", "name": "Bad_Name", "data": {"bad key": ""}}, format="json"
    )
    assert response.status_code == 400
    assert set(response.json()) == {"name", "data"}
    response = api_client.post(
        "/api/v1/registry-credentials/",
        {"team": "vision", "registry": "x y", "username": "", "token": ""},
        format="json",
    )
    assert response.status_code == 400 and {"registry", "username", "token"} <= set(response.json())


# -- jobs using secrets -------------------------------------------------------------------------------------------


def test_a_job_naming_a_missing_secret_or_key_is_refused_with_every_reason(setup):
    alice, vision = setup["alice"], setup["vision"]
    secrets.create_secret(alice, vision, "wandb", {"token": VALUE})
    with pytest.raises(ValidationError) as error:
        actions.submit_job(
            alice,
            vision,
            setup["h100"],
            fields(
                secret_env=[
                    {"name": "A", "secret": "nope", "key": "token"},
                    {"name": "B", "secret": "wandb", "key": "missing"},
                ],
                secret_files=[{"secret": "wandb", "path": "/secrets/wandb", "keys": ["other"]}],
            ),
        )
    messages = error.value.message_dict
    assert any("no secret nope" in m for m in messages["secret_env"])
    assert any("has no key missing" in m for m in messages["secret_env"])
    assert any("has no key other" in m for m in messages["secret_files"])
    assert not Job.objects.exists()


def test_a_secret_deleted_behind_the_portals_back_is_refused_at_submission(setup):
    alice, vision, cluster = setup["alice"], setup["vision"], setup["cluster"]
    secrets.create_secret(alice, vision, "wandb", {"token": VALUE})
    cluster.delete_secret("team-vision", "wandb")
    with pytest.raises(ValidationError, match="missing from namespace team-vision"):
        actions.submit_job(
            alice, vision, setup["h100"], fields(secret_env=[{"name": "T", "secret": "wandb", "key": "token"}])
        )


def test_a_job_with_secrets_renders_refs_files_and_the_pull_secret(setup):
    alice, vision = setup["alice"], setup["vision"]
    secrets.create_secret(alice, vision, "wandb", {"token": VALUE})
    secrets.create_secret(alice, vision, "gcs", {"key.json": "{}", "other": "x"})
    secrets.create_registry_credential(alice, vision, "nvcr.io", "$oauthtoken", TOKEN)
    secrets.create_registry_credential(alice, vision, "registry.example.com", "bot", TOKEN)
    job = actions.submit_job(
        setup["carol"],
        vision,
        setup["h100"],
        fields(
            env=[{"name": "EPOCHS", "value": "3"}],
            secret_env=[{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}],
            secret_files=[{"secret": "gcs", "path": "/secrets/gcs", "keys": ["key.json"]}],
        ),
    ).job
    job.node_name, job.workload_name = "gpu-h100-01", job.default_workload_name()
    manifest = for_job(job).render(job)[-1]
    pod = manifest["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["env"] == [
        {"name": "EPOCHS", "value": "3"},
        {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "token"}}},
    ]
    assert [v for v in pod["volumes"] if v["name"] not in ("dshm", "scratch")] == [
        {"name": "secret-file-0", "secret": {"secretName": "gcs", "items": [{"key": "key.json", "path": "key.json"}]}}
    ]
    assert [m for m in container["volumeMounts"] if m["name"] not in ("dshm", "scratch")] == [
        {"name": "secret-file-0", "mountPath": "/secrets/gcs", "readOnly": True}
    ]
    # Only the credential of the image's own registry.
    assert pod["imagePullSecrets"] == [{"name": "portal-registry-nvcr.io"}]
    assert_no_leak(yaml.safe_dump(manifest))


@pytest.mark.parametrize(
    ("image", "registry", "matches"),
    [
        ("nvcr.io/nvidia/pytorch:24.01-py3", "nvcr.io", True),
        ("pytorch/pytorch:2.2.0", "docker.io", True),
        ("ubuntu", "docker.io", True),
        ("index.docker.io/library/ubuntu", "docker.io", True),
        ("registry.example.com:5000/a/b:1", "registry.example.com:5000", True),
        ("registry.example.com/a/b:1", "registry.example.com:5000", False),
        ("nvcr.io.evil.example/x", "nvcr.io", False),
        ("localhost/x", "docker.io", False),
    ],
)
def test_pull_secrets_match_the_registry_exactly(setup, image, registry, matches):
    secrets.create_registry_credential(setup["alice"], setup["vision"], registry, "u", TOKEN)
    assert bool(secrets.pull_secret_names(setup["vision"].pk, image)) is matches


def test_the_api_takes_secret_refs_and_refuses_bad_paths(api_client, setup):
    secrets.create_secret(setup["alice"], setup["vision"], "wandb", {"token": VALUE})
    api_client.force_login(setup["carol"])
    body = {
        "team": "vision", "name": "train", "image": "busybox", "command": ["true"], "resource_class": H100,
        "secret_env": [{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}],
        "secret_files": [{"secret": "wandb", "path": "/secrets/wandb"}],
    }  # fmt: skip
    response = api_client.post("/api/v1/jobs/", body, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["secret_env"] == body["secret_env"]
    assert response.json()["secret_files"] == [{"secret": "wandb", "path": "/secrets/wandb", "keys": []}]
    bad = body | {
        "secret_files": [{"secret": "wandb", "path": "/proc/x"}, {"secret": "wandb", "path": "relative"}],
        "secret_env": [{"name": "NVIDIA_VISIBLE_DEVICES", "secret": "wandb", "key": "token"}],
    }
    response = api_client.post("/api/v1/jobs/", bad, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert any("/proc" in m for m in errors["secret_files"]) and any("absolute" in m for m in errors["secret_files"])
    assert any("NVIDIA_VISIBLE_DEVICES" in m for m in errors["secret_env"])


# -- pods that wait, explained ------------------------------------------------------------------------------------


def test_missing_secrets_and_refused_pulls_are_explained_in_words(setup):
    def said(job, reason, message):
        return pod_states.why_waiting(job, reason, message).sentence

    job = Job(team=setup["vision"], image="registry.example.com/vision/train:1", name="t")
    text = said(job, "CreateContainerConfigError", 'secret "wandb" not found')
    assert "secret wandb does not exist in namespace team-vision" in text and "Secrets page" in text
    text = said(job, "CreateContainerConfigError", "couldn't find key token in Secret team-vision/wandb")
    assert "key token is missing from the secret wandb" in text
    refused = "pulling from host registry.example.com failed with status code [manifests 1]: 401 Unauthorized"
    text = said(job, "ErrImagePull", refused)
    assert "registry registry.example.com refused" in text and "has no registry credential" in text
    secrets.create_registry_credential(setup["alice"], setup["vision"], "registry.example.com", "bot", TOKEN)
    text = said(job, "ImagePullBackOff", refused)
    assert "user bot" in text and "rotate it" in text and TOKEN not in text
    nvcr = Job(team=setup["vision"], image="nvcr.io/acme/model:1", name="t")
    assert "$oauthtoken" in said(nvcr, "ErrImagePull", refused)
    assert "check the repository name and tag" in said(job, "ErrImagePull", "x: not found")


def test_render_without_secrets_is_unchanged(setup):
    job = Job.objects.create(
        team=setup["vision"], owner=setup["alice"], resource_class=setup["h100"], name="plain", image="busybox",
        node_name="gpu-h100-01",
    )  # fmt: skip
    job.workload_name = job.default_workload_name()
    pod = render_job(job)["spec"]["template"]["spec"]
    # Only the portal's own /dev/shm and /scratch emptyDirs: no Secret volume and no pull secret.
    assert [v["name"] for v in pod["volumes"]] == ["dshm", "scratch"] and "imagePullSecrets" not in pod


def test_model_serialisation_of_everything_holds_no_value(setup):
    secrets.create_secret(setup["alice"], setup["vision"], "wandb", {"token": VALUE})
    secrets.create_registry_credential(setup["alice"], setup["vision"], "nvcr.io", "$oauthtoken", TOKEN)
    dumped = django_serializers.serialize("json", [*TeamSecret.objects.all(), *RegistryCredential.objects.all()])
    dumped += django_serializers.serialize("json", AuditEvent.objects.all())
    assert_no_leak(dumped)


# -- through the job cycle on the simulated cluster ---------------------------------------------------------------


def test_the_demo_job_pulls_from_the_private_registry_and_reads_its_secret(setup):
    from jobs.cycle.run import run_cycle
    from jobs.demo import seed_secrets

    cluster = setup["cluster"]
    actions.set_quota(setup["admin"], setup["vision"], ResourceClass.objects.get(key=A100_3G), 2, 4)
    assert seed_secrets(cluster) == 3
    assert seed_secrets(cluster) == 0  # once only
    job = Job.objects.get(name="private-train")
    for _ in range(3):
        setup["clock"].advance(10)
        run_cycle(cluster)
    job.refresh_from_db()
    assert job.state == "running", job.wait_message
    pod = cluster.list_pods("team-vision")[0]
    assert pod["spec"]["imagePullSecrets"] == [{"name": "portal-registry-registry.example.com"}]


def test_a_secret_deleted_after_submission_is_explained_on_the_job(setup):
    from jobs.cycle.run import run_cycle

    alice, vision, cluster = setup["alice"], setup["vision"], setup["cluster"]
    secrets.create_secret(alice, vision, "wandb", {"token": VALUE})
    job = actions.submit_job(
        alice, vision, setup["h100"], fields(secret_env=[{"name": "T", "secret": "wandb", "key": "token"}])
    ).job
    secrets.delete_secret(alice, TeamSecret.objects.get())
    for _ in range(3):
        setup["clock"].advance(10)
        run_cycle(cluster)
    job.refresh_from_db()
    assert job.state == "admitted"
    assert "secret wandb does not exist in namespace team-vision" in job.wait_message
    assert job.events.filter(message__contains="secret wandb does not exist").exists()


def test_a_refused_pull_fails_the_job_saying_which_registry_and_what_to_check(setup):
    from jobs.cycle.run import run_cycle

    cluster = setup["cluster"]
    job = actions.submit_job(
        setup["alice"], setup["vision"], setup["h100"], fields(image="registry.example.com/vision/train:1")
    ).job
    run_cycle(cluster)
    for _ in range(4):
        setup["clock"].advance(8)
        run_cycle(cluster)
    job.refresh_from_db()
    assert job.state == "failed"
    last = job.events.order_by("-at", "-id").first().message
    assert "registry registry.example.com refused" in last and "no registry credential" in last
