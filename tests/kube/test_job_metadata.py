"""A job with labels, a working directory, and a task of a job array, against the real kube-apiserver and
kube-scheduler: the rendered Job is accepted as it is (label grammar, workingDir), the labels land on the Job
and its pod next to the portal's own, the pod gets the task's index, and it is bound to the portal's node."""

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

from .support import wait_for

pytestmark = pytest.mark.django_db


def test_labels_working_dir_and_array_index_are_accepted_and_the_pod_is_bound(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people
) -> None:
    product = f"NVIDIA-H100-META-{test_id}"
    make_gpu_node("m", gpus=8, product=product)
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 8, 8)
    labels = {"git-sha": "1a2b3c4d", "example.com/pipeline-run": "run_42.a", "empty": ""}
    request = dict(
        name="meta", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "60"], args=[], env=[],
        count=1, cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=600,
        labels=labels, working_dir="/workspace/project",
    )  # fmt: skip
    array = actions.submit_array(people["alice"], team, rc, request, size=2, parallelism=1).array
    run_cycle(kube_backend)
    tasks = list(array.tasks.order_by("array_index"))
    for task in tasks:
        task.refresh_from_db()
    admitted = [t for t in tasks if t.state == JobState.ADMITTED]
    assert len(admitted) == 1, [t.state for t in tasks]  # the parallelism cap of 1
    assert [t.wait_reason for t in tasks if t.state == JobState.QUEUED] == ["array"]
    task = admitted[0]
    workload = next(
        w for w in kube_backend.list_workloads(kube_namespace) if w["metadata"]["name"] == task.workload_name
    )
    for key, value in labels.items():
        assert workload["metadata"]["labels"][key] == value
    assert workload["metadata"]["labels"]["gpu-portal.io/job-id"] == str(task.pk)

    def pod():
        for candidate in kube_backend.list_pods(kube_namespace):
            if candidate["metadata"]["labels"].get("gpu-portal.io/job-id") == str(task.pk):
                return candidate if candidate["spec"].get("nodeName") else None
        return None

    bound = wait_for(f"task {task.pk}'s pod to be bound", pod)
    assert bound["spec"]["nodeName"] == task.node_name
    assert bound["metadata"]["labels"]["git-sha"] == "1a2b3c4d"
    container = bound["spec"]["containers"][0]
    assert container["workingDir"] == "/workspace/project"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PORTAL_ARRAY_INDEX"] == str(task.array_index) and env["PORTAL_ARRAY_SIZE"] == "2"
