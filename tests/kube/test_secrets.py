"""Team secrets on a real control plane: the KubernetesBackend's Secret calls (values in, redacted out), and a
job using a dataset claim, a secret variable, a secret file and an imagePullSecret is accepted by the real
kube-apiserver as the portal renders it, and the real kube-scheduler binds its pod to the node the portal chose once
the real PersistentVolume controller has bound the claim."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from kubernetes import client

from accounts.models import Team
from cluster.base import Invalid, NotFound
from cluster.kubernetes import KubernetesBackend
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.storage import secrets, volumes

from .support import wait_for

pytestmark = pytest.mark.django_db
VALUE = "kube-secret-value-5d1e"


def test_secrets_round_trip_without_values(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, kube_namespace
):
    created = kube_backend.apply_secret(kube_namespace, "wandb", {"token": VALUE, "entity": "acme"})
    assert created["data"] == {"entity": "", "token": ""} and VALUE not in json.dumps(created)
    raw = kube_core.read_namespaced_secret("wandb", kube_namespace)
    assert base64.b64decode(raw.data["token"]).decode() == VALUE
    rotated = kube_backend.apply_secret(kube_namespace, "wandb", {"token": "new"})
    assert rotated["data"] == {"token": ""}
    assert [s["metadata"]["name"] for s in kube_backend.list_secrets(kube_namespace)] == ["wandb"]
    with pytest.raises(Invalid):
        kube_backend.apply_secret(kube_namespace, "Bad_Name", {"a": "b"})
    assert kube_backend.delete_secret(kube_namespace, "wandb") is True
    assert kube_backend.delete_secret(kube_namespace, "wandb") is False
    with pytest.raises(NotFound):
        kube_backend.get_secret(kube_namespace, "wandb")


def test_a_job_with_a_claim_secrets_and_a_pull_secret_is_accepted_and_bound(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people, monkeypatch
) -> None:
    monkeypatch.setattr(secrets, "get_backend", lambda: kube_backend)
    product = f"NVIDIA-H100-SECRETS-{test_id}"
    make_gpu_node("s", gpus=8, product=product)
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    # The slug names the dataset's cluster-scoped PersistentVolume: one per test run.
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace, slug=f"s{test_id}")
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 8, 8)
    dataset = volumes.save_dataset(
        people["admin"],
        {"name": f"corpus-{test_id}", "source": "nfs", "server": "nfs.example.internal", "path": "/exports/corpus",
         "capacity_gib": 10},
        [team],
    )  # fmt: skip
    volumes.reconcile_volumes(kube_backend)
    wait_for(
        "the dataset claim to be bound by the PersistentVolume controller",
        lambda: kube_backend.core.read_namespaced_persistent_volume_claim(
            dataset.claim_name, kube_namespace
        ).status.phase
        == "Bound",
    )
    volumes.reconcile_volumes(kube_backend)
    secrets.create_secret(people["alice"], team, "wandb", {"token": VALUE, "key.json": "{}"})
    credential = secrets.create_registry_credential(
        people["alice"], team, "registry.example.com", "ci-bot", "registry-token"
    )
    stored = kube_backend.get_secret(kube_namespace, credential.secret_name)
    assert stored["type"] == "kubernetes.io/dockerconfigjson"
    job = actions.submit_job(
        people["alice"], team, rc,
        dict(
            name="with-secrets", image="registry.example.com/vision/train:1.0", command=["sleep", "60"], args=[],
            env=[], count=1, cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False,
            max_runtime_seconds=600,
            secret_env=[{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}],
            secret_files=[{"secret": "wandb", "path": "/secrets/wandb", "keys": ["key.json"]}],
            volumes=[{"claim": dataset.claim_name, "mount_path": "/data/corpus", "read_only": True}],
        ),
    ).job  # fmt: skip
    run_cycle(kube_backend)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.workload_created_at is not None, job.wait_message
    workload = next(
        w for w in kube_backend.list_workloads(kube_namespace) if w["metadata"]["name"] == job.workload_name
    )
    pod_spec = workload["spec"]["template"]["spec"]
    assert pod_spec["imagePullSecrets"] == [{"name": credential.secret_name}]
    sources = {v["name"]: v for v in pod_spec["volumes"]}
    assert sources["secret-file-0"]["secret"]["secretName"] == "wandb"
    assert sources["vol-0"]["persistentVolumeClaim"] == {"claimName": dataset.claim_name, "readOnly": True}
    assert sources["dshm"]["emptyDir"]["medium"] == "Memory"
    env = pod_spec["containers"][0]["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "token"}}} in env

    def bound() -> str | None:
        for pod in kube_backend.list_pods(kube_namespace):
            if pod["metadata"]["labels"].get("gpu-portal.io/job-id") == str(job.pk):
                return pod["spec"].get("nodeName")
        return None

    assert wait_for(f"job {job.pk}'s pod to be bound", bound) == job.node_name
