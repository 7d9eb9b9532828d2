"""The inventory sync and the job cycle reading from the watch caches, against the real kube-apiserver, with the
launch in one worker process and the next reconcile in another (two backends sharing write marks, as two Celery
children share them through Redis): a reconcile right after a launch never finds the Job missing, and a label
change reaches the inventory without a list."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client

from accounts.models import Team
from cluster.kubernetes import KubernetesBackend
from cluster.kubernetes_cache import WriteMarks
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle

from .controlplane import LocalControlPlane
from .support import wait_for

pytestmark = pytest.mark.django_db


@pytest.fixture
def worker_backends(kube_controlplane: LocalControlPlane) -> Iterator[tuple[KubernetesBackend, KubernetesBackend]]:
    marks = WriteMarks()
    backends = tuple(
        KubernetesBackend.from_kubeconfig(str(kube_controlplane.kubeconfig_path), watch_cache=True, write_marks=marks)
        for _ in range(2)
    )
    yield backends
    for backend in backends:
        backend.stop_informers()


def test_a_reconcile_in_another_worker_right_after_a_launch_follows_the_job(
    worker_backends, make_gpu_node: Callable, kube_core: client.CoreV1Api, kube_namespace: str, test_id: str, people
) -> None:
    launcher, reconciler = worker_backends
    product = f"NVIDIA-H100-CACHE-{test_id}"
    node_name = make_gpu_node("a", gpus=8, product=product)["metadata"]["name"]
    sync_inventory(reconciler)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 8, 8)
    request = dict(
        name="cached", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "60"], args=[], env=[],
        count=2, cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=600,
    )  # fmt: skip
    jobs = [actions.submit_job(people["alice"], team, rc, {**request, "name": f"cached-{i}"}).job for i in range(3)]
    run_cycle(reconciler)  # the reconciler's caches are up before the launch (the launcher's too, by its reconcile)
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED and job.workload_created_at is not None

    submitted = actions.submit_job(people["alice"], team, rc, {**request, "name": "late"}).job
    run_cycle(launcher)  # launches it
    handed_out = {name: reconciler.informer(name).items() for name in ("nodes", "pods", "jobs")}
    as_handed = copy.deepcopy(handed_out)
    result = run_cycle(reconciler)  # at once, in the other worker
    assert result.lost == 0
    sync_inventory(reconciler)
    # The caches hand out their own objects (read-only): no pass changed one. (The store replaces objects whole, so
    # a changed object can only be a reader's doing.)
    assert handed_out == as_handed
    submitted.refresh_from_db()
    assert submitted.state == JobState.ADMITTED

    # The inventory follows a label change by watch, without listing the nodes again.
    nodes = reconciler.informer("nodes")
    lists = nodes.lists
    kube_core.patch_node(node_name, {"metadata": {"labels": {"portal-test/extra": "yes"}}})
    wait_for(
        "the label in the inventory",
        lambda: sync_inventory(reconciler)
        and Node.objects.get(name=node_name).labels.get("portal-test/extra") == "yes",
    )
    assert nodes.lists == lists

    # Cancelling deletes the Job; the cache of the worker that deleted it drops it at once.
    actions.cancel_job(people["alice"], submitted)
    run_cycle(reconciler)
    assert submitted.workload_name not in {w["metadata"]["name"] for w in reconciler.list_workloads(kube_namespace)}
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
