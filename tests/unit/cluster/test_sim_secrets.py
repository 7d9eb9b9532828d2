"""Secrets in the simulated cluster: stored like the API server stores them, handed out redacted, and used by the
kubelet the way Kubernetes v1.20 does.

Sources for the behaviour modelled: the Kubernetes "Secrets" concept page (a missing Secret or key referenced by
``secretKeyRef`` keeps the container from starting: ``CreateContainerConfigError``; a missing Secret volume keeps
the pod ContainerCreating with FailedMount events), "Pull an Image from a Private Registry" (imagePullSecrets of
type kubernetes.io/dockerconfigjson), and the kubelet's messages (kubelet_pods.go makeEnvironmentVariables:
``couldn't find key K in Secret NS/NAME``; the secret volume plugin: ``references non-existent secret key``).
"""

from __future__ import annotations

import base64
import json

import pytest

from cluster.base import Invalid, NotFound
from cluster.sim import SimulatedCluster
from tests.sim_objects import h100_node, job, pod_of

SCENARIO = {
    "namespaces": ["team-a"],
    "nodes": [h100_node("gpu-a")],
    "registries": {
        "registry.example.com": {"private": True, "accounts": [{"username": "ci-bot", "password": "right-token"}]},
        "nvcr.io": {"private": ["acme/"], "accounts": [{"username": "$oauthtoken", "password": "ngc-key"}]},
    },
}
VALUE = "s3cr3t-value-that-must-not-leak"


@pytest.fixture
def cluster(clock) -> SimulatedCluster:
    return SimulatedCluster(None, scenario=SCENARIO, clock=clock)


def docker_config(host: str, user: str, password: str) -> str:
    auth = base64.b64encode(f"{user}:{password}".encode()).decode()
    return json.dumps({"auths": {host: {"username": user, "password": password, "auth": auth}}})


def container_state(pod: dict) -> dict:
    return pod["status"]["containerStatuses"][0]["state"]


def with_secret_env(manifest: dict, secret: str, key: str) -> dict:
    container = manifest["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": key}}}]
    return manifest


def with_secret_file(manifest: dict, secret: str, keys: list[str] | None = None) -> dict:
    pod = manifest["spec"]["template"]["spec"]
    source: dict = {"secretName": secret}
    if keys:
        source["items"] = [{"key": k, "path": k} for k in keys]
    pod["volumes"] = [{"name": "creds", "secret": source}]
    pod["containers"][0]["volumeMounts"] = [{"name": "creds", "mountPath": "/etc/creds", "readOnly": True}]
    return manifest


def test_secrets_are_stored_and_returned_without_values(cluster):
    created = cluster.apply_secret("team-a", "wandb", {"token": VALUE, "entity": "acme"}, labels={"x": "y"})
    assert created["data"] == {"entity": "", "token": ""}
    assert created["type"] == "Opaque"
    assert VALUE not in json.dumps(created)
    assert cluster.get_secret("team-a", "wandb")["data"] == {"entity": "", "token": ""}
    assert [s["metadata"]["name"] for s in cluster.list_secrets("team-a")] == ["wandb"]
    assert cluster.list_secrets("team-a", "x=z") == []
    # Rotation replaces the data: keys not given any more are gone.
    rotated = cluster.apply_secret("team-a", "wandb", {"token": "other"})
    assert rotated["data"] == {"token": ""}
    assert int(rotated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    assert cluster.delete_secret("team-a", "wandb") is True
    assert cluster.delete_secret("team-a", "wandb") is False
    with pytest.raises(NotFound, match='secrets "wandb" not found'):
        cluster.get_secret("team-a", "wandb")


def test_the_api_server_refuses_bad_secrets_with_every_problem(cluster):
    with pytest.raises(Invalid) as error:
        cluster.apply_secret("team-a", "Bad_Name", {"bad key": "v", "ok": "x" * (1024 * 1024)})
    message = str(error.value)
    assert "metadata.name" in message and "data[bad key]" in message and "at most 1048576 bytes" in message
    with pytest.raises(Invalid, match=r"data\[.dockerconfigjson\]: Required value"):
        cluster.apply_secret("team-a", "reg", {"x": "y"}, secret_type="kubernetes.io/dockerconfigjson")
    with pytest.raises(Invalid, match="redacted"):
        cluster.apply_secret(
            "team-a", "reg", {".dockerconfigjson": "{not json"}, secret_type="kubernetes.io/dockerconfigjson"
        )
    cluster.apply_secret("team-a", "plain", {"a": "b"})
    with pytest.raises(Invalid, match="field is immutable"):
        cluster.apply_secret(
            "team-a", "plain", {".dockerconfigjson": "{}"}, secret_type="kubernetes.io/dockerconfigjson"
        )
    with pytest.raises(NotFound):
        cluster.apply_secret("team-nope", "x", {"a": "b"})


def test_a_missing_secret_env_keeps_the_container_in_create_container_config_error(cluster, clock):
    cluster.create_workload(with_secret_env(job("train"), "wandb", "token"))
    clock.advance(10)
    pod = pod_of(cluster, "train")
    assert pod["status"]["phase"] == "Pending"
    assert container_state(pod)["waiting"] == {
        "reason": "CreateContainerConfigError",
        "message": 'secret "wandb" not found',
    }
    # The secret exists but lacks the key.
    cluster.apply_secret("team-a", "wandb", {"other": "x"})
    clock.advance(5)
    waiting = container_state(pod_of(cluster, "train"))["waiting"]
    assert waiting["message"] == "couldn't find key token in Secret team-a/wandb"
    events = [e["message"] for e in cluster.pod_events("team-a", pod["metadata"]["name"])]
    assert 'Error: secret "wandb" not found' in events
    assert "Error: couldn't find key token in Secret team-a/wandb" in events
    # Once the key is there the kubelet starts the container.
    cluster.apply_secret("team-a", "wandb", {"token": VALUE})
    pod = pod_of(cluster, "train")
    assert pod["status"]["phase"] == "Running"
    assert "running" in container_state(pod)


def test_a_missing_secret_volume_keeps_the_pod_container_creating_with_failed_mount(cluster, clock):
    cluster.create_workload(with_secret_file(job("train"), "creds", ["key.json"]))
    clock.advance(10)
    pod = pod_of(cluster, "train")
    assert container_state(pod)["waiting"]["reason"] == "ContainerCreating"
    events = cluster.pod_events("team-a", pod["metadata"]["name"])
    mount = [e for e in events if e["reason"] == "FailedMount"]
    assert mount[-1]["message"] == 'MountVolume.SetUp failed for volume "creds" : secret "creds" not found'
    cluster.apply_secret("team-a", "creds", {"other": "x"})
    clock.advance(1)
    events = cluster.pod_events("team-a", pod["metadata"]["name"])
    assert events[-1]["message"].endswith("references non-existent secret key: key.json")
    cluster.apply_secret("team-a", "creds", {"key.json": "{}"})
    assert pod_of(cluster, "train")["status"]["phase"] == "Running"


def test_an_unreferenced_or_present_secret_does_not_hold_a_pod_back(cluster, clock):
    cluster.apply_secret("team-a", "wandb", {"token": VALUE})
    cluster.create_workload(with_secret_file(with_secret_env(job("train"), "wandb", "token"), "wandb"))
    clock.advance(10)
    assert pod_of(cluster, "train")["status"]["phase"] == "Running"


def test_a_private_registry_refuses_a_pod_without_a_matching_pull_secret(cluster, clock):
    cluster.create_workload(job("train", image="registry.example.com/vision/train:1.0"))
    clock.advance(4)
    waiting = container_state(pod_of(cluster, "train"))["waiting"]
    assert waiting["reason"] == "ErrImagePull"
    assert "pulling from host registry.example.com failed" in waiting["message"]
    assert "401 Unauthorized" in waiting["message"]
    clock.advance(15)
    assert container_state(pod_of(cluster, "train"))["waiting"]["reason"] == "ImagePullBackOff"


@pytest.mark.parametrize(
    ("host", "user", "password", "pulls"),
    [
        ("registry.example.com", "ci-bot", "right-token", True),
        ("https://registry.example.com/", "ci-bot", "right-token", True),
        ("registry.example.com", "ci-bot", "wrong-token", False),
        ("other.example.com", "ci-bot", "right-token", False),
    ],
)
def test_a_private_registry_pulls_with_the_right_credential(cluster, clock, host, user, password, pulls):
    cluster.apply_secret(
        "team-a",
        "regcred",
        {".dockerconfigjson": docker_config(host, user, password)},
        secret_type="kubernetes.io/dockerconfigjson",
    )
    manifest = job("train", image="registry.example.com/vision/train:1.0")
    manifest["spec"]["template"]["spec"]["imagePullSecrets"] = [{"name": "regcred"}]
    cluster.create_workload(manifest)
    clock.advance(10)
    pod = pod_of(cluster, "train")
    assert (pod["status"]["phase"] == "Running") is pulls
    if not pulls:
        assert container_state(pod)["waiting"]["reason"] in ("ErrImagePull", "ImagePullBackOff")


def test_only_the_private_repositories_of_a_registry_want_credentials(cluster, clock):
    cluster.create_workload(job("public", image="nvcr.io/nvidia/pytorch:24.03-py3"))
    cluster.create_workload(job("private", image="nvcr.io/acme/model:2"))
    clock.advance(10)
    assert pod_of(cluster, "public")["status"]["phase"] == "Running"
    assert container_state(pod_of(cluster, "private"))["waiting"]["reason"] == "ErrImagePull"


def test_malformed_secret_references_are_refused(cluster):
    manifest = with_secret_env(job("train"), "Bad Name", "")
    manifest["spec"]["template"]["spec"]["containers"][0]["volumeMounts"] = [{"name": "nope", "mountPath": "/x"}]
    manifest["spec"]["template"]["spec"]["imagePullSecrets"] = [{}]
    with pytest.raises(Invalid) as error:
        cluster.create_workload(manifest)
    message = str(error.value)
    assert "secretKeyRef.name: Required value" in message
    assert "secretKeyRef.key: Required value" in message
    assert 'volumeMounts[0].name: Not found: "nope"' in message
    assert "imagePullSecrets[0].name: Required value" in message
