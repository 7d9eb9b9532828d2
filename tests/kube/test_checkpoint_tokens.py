"""A job's checkpoint token on a real control plane: the cycle's launch makes the attempt's Secret in the team's
namespace before the workload, the real kube-apiserver accepts the workload whose pod reads it by secretKeyRef, and
the Secret ends up owned by the workload (ownerReferences with its uid), which a later apply without owners keeps."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable

import pytest
from kubernetes import client

from accounts.models import Team, hash_token
from cluster.kubernetes import KubernetesBackend
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import JobCheckpointToken
from jobs.render import checkpoint_secret_name

pytestmark = pytest.mark.django_db


def test_the_token_secret_is_made_before_the_workload_and_owned_by_it(
    kube_backend: KubernetesBackend, kube_core: client.CoreV1Api, make_gpu_node: Callable, kube_namespace: str,
    test_id: str, people,
) -> None:  # fmt: skip
    product = f"NVIDIA-H100-CKPT-{test_id}"
    make_gpu_node("c", gpus=8, product=product)
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 8, 8)
    job = actions.submit_job(
        people["alice"], team, rc,
        dict(name="ckpt", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["sleep", "60"], args=[], env=[], count=1,
             cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=True, max_runtime_seconds=600,
             checkpoint={"signal": "SIGUSR1", "grace_seconds": 60, "report": "token"}),
    ).job  # fmt: skip
    run_cycle(kube_backend)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.workload_created_at is not None, job.wait_message
    workload = kube_backend.batch.read_namespaced_job(job.workload_name, kube_namespace)
    env = {e.name: e for e in workload.spec.template.spec.containers[0].env}
    ref = env["PORTAL_CHECKPOINT_TOKEN"].value_from.secret_key_ref
    name = checkpoint_secret_name(job.workload_name)
    assert (ref.name, ref.key) == (name, "token") and env["PORTAL_CHECKPOINT_TOKEN"].value is None
    secret = kube_core.read_namespaced_secret(name, kube_namespace)
    raw = base64.b64decode(secret.data["token"]).decode()
    assert JobCheckpointToken.objects.get(job=job).key_hash == hash_token(raw)
    assert raw not in json.dumps(kube_backend.api_client.sanitize_for_serialization(workload))
    assert secret.metadata.creation_timestamp <= workload.metadata.creation_timestamp
    owners = [(o.kind, o.name, o.uid) for o in secret.metadata.owner_references or []]
    assert owners == [("Job", job.workload_name, workload.metadata.uid)]
    # A later apply that names no owners (a value changed) keeps them.
    kube_backend.apply_secret(kube_namespace, name, {"token": raw})
    kept = kube_core.read_namespaced_secret(name, kube_namespace).metadata.owner_references
    assert [o.uid for o in kept or []] == [workload.metadata.uid]
