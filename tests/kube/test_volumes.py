"""Volumes against the real kube-apiserver, kube-controller-manager (its PersistentVolume controller) and
kube-scheduler v1.20: a published dataset's read-only PersistentVolume and pre-bound claim are accepted and bound;
a job that mounts it and a team claim, with /dev/shm and /scratch, is accepted as rendered; its pod waits while a
claim is unbound, with the scheduler's own words, and is bound to the portal's node once the claim is."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from accounts.models import Team
from cluster.kubernetes import KubernetesBackend
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import TeamVolume
from jobs.storage import volumes

from .support import wait_for

pytestmark = pytest.mark.django_db


def test_a_job_with_a_dataset_a_team_claim_shm_and_scratch_is_accepted_and_bound(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people
) -> None:
    product = f"NVIDIA-H100-VOL-{test_id}"
    make_gpu_node("vol", gpus=8, product=product)
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace, slug=f"v{test_id}")
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 8, 8)

    # A team claim of no class that nothing can bind yet: the scheduler must keep the pod waiting.
    kube_backend.ensure_pvc(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": kube_namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "resources": {"requests": {"storage": "10Gi"}},
            },
        }
    )
    dataset = volumes.save_dataset(
        people["admin"],
        {"name": f"imagenet-{test_id}", "source": "nfs", "server": "nfs.example.internal",
         "path": "/exports/imagenet", "capacity_gib": 100},
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
    rows = {v.name: v for v in TeamVolume.objects.filter(team=team)}
    assert rows[dataset.claim_name].phase == "Bound" and rows[dataset.claim_name].access_modes == ["ReadOnlyMany"]
    assert rows["checkpoints"].phase == "Pending"

    request = dict(
        name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
        count=1, cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=600,
        volumes=[{"claim": dataset.claim_name, "mount_path": "/data", "read_only": True},
                 {"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False}],
        shm_mb=2048,
    )  # fmt: skip
    job = actions.submit_job(people["alice"], team, rc, request).job
    run_cycle(kube_backend)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.workload_created_at is not None  # the API server took it as is
    [workload] = [w for w in kube_backend.list_workloads(kube_namespace) if w["metadata"]["name"] == job.workload_name]
    pod_volumes = {v["name"]: v for v in workload["spec"]["template"]["spec"]["volumes"]}
    assert pod_volumes["vol-0"]["persistentVolumeClaim"] == {"claimName": dataset.claim_name, "readOnly": True}
    assert pod_volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}  # the server's canonical form

    def pod():
        pods = [
            p
            for p in kube_backend.list_pods(kube_namespace)
            if p["metadata"]["labels"].get("job-name") == job.workload_name
        ]
        return pods[0] if pods else None

    def unschedulable_message():
        current = pod()
        for condition in (current or {}).get("status", {}).get("conditions") or []:
            if condition["type"] == "PodScheduled" and condition["status"] == "False":
                return condition["message"]
        return None

    message = wait_for("the scheduler to hold the pod for its unbound claim", unschedulable_message)
    assert "pod has unbound immediate PersistentVolumeClaims" in message
    # An admin provides a volume for the claim; the controller binds it and the scheduler places the pod.
    kube_backend.ensure_pv(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": f"ckpt-{test_id}"},
            "spec": {
                "capacity": {"storage": "10Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "nfs": {"server": "nfs.example.internal", "path": "/exports/ckpt"},
            },
        }
    )
    node = wait_for(
        "the pod to be bound once its claim is", lambda: (pod() or {}).get("spec", {}).get("nodeName"), timeout=60
    )
    assert node == job.node_name
    # Unpublishing removes the team's pair (the PV is Retain: the data itself is never touched).
    volumes.save_dataset(people["admin"], {f: getattr(dataset, f) for f in volumes.AUDIT_FIELDS}, [], dataset)
    volumes.reconcile_volumes(kube_backend)
    # The pod still uses the claim, so Kubernetes' storage-object-in-use protection keeps both until it ends:
    # the claim and the volume are deleted (deletionTimestamp set) and go when their last user does.
    gone = {
        v["metadata"]["name"]: v["metadata"].get("deletionTimestamp")
        for v in kube_backend.list_pvs()
        if v["metadata"]["name"] == dataset.volume_name(team)
    }
    assert not gone or gone[dataset.volume_name(team)]
    claim_left = kube_backend.core.read_namespaced_persistent_volume_claim(dataset.claim_name, kube_namespace)
    assert claim_left.metadata.deletion_timestamp is not None
    kube_backend.delete_pv(f"ckpt-{test_id}")
