"""The job cycle against the real kube-apiserver and kube-scheduler: the rendered Job is accepted as it is,
the scheduler binds its pod to exactly the node the portal chose, and cancelling deletes it."""

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
from jobs.models import Job

from .support import wait_for

pytestmark = pytest.mark.django_db


def test_the_portal_places_runs_and_cancels_a_job_on_a_real_control_plane(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people
) -> None:
    product = f"NVIDIA-H100-TEST-{test_id}"  # a product only this test's nodes have
    make_gpu_node("a", gpus=8, product=product)
    make_gpu_node("b", gpus=8, product=product)
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    assert rc.allocatable == 16
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 16, 16)
    request = dict(
        name="warmup", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "60"], args=[], env=[],
        count=2, cpu_millicores=4000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=600,
    )  # fmt: skip
    first = actions.submit_job(people["alice"], team, rc, request).job
    run_cycle(kube_backend)
    first.refresh_from_db()
    assert first.state == JobState.ADMITTED and first.workload_created_at is not None
    # Best fit: the second job goes to the node the first one already uses, keeping the other node whole.
    second = actions.submit_job(people["alice"], team, rc, {**request, "name": "second", "count": 4}).job
    run_cycle(kube_backend)
    second.refresh_from_db()
    assert second.node_name == first.node_name

    def bound(job: Job) -> str | None:
        for pod in kube_backend.list_pods(kube_namespace):
            if pod["metadata"]["labels"].get("gpu-portal.io/job-id") == str(job.pk):
                return pod["spec"].get("nodeName")
        return None

    for job in (first, second):
        assert wait_for(f"job {job.pk}'s pod to be bound", lambda job=job: bound(job)) == job.node_name
    workload = next(
        w for w in kube_backend.list_workloads(kube_namespace) if w["metadata"]["name"] == second.workload_name
    )
    pod_spec = workload["spec"]["template"]["spec"]
    assert pod_spec["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod_spec["containers"][0]["securityContext"]["privileged"] is False

    actions.cancel_job(people["alice"], second)
    run_cycle(kube_backend)
    names = wait_for(
        "the cancelled job's workload to go",
        lambda: (names := {w["metadata"]["name"] for w in kube_backend.list_workloads(kube_namespace)})
        and second.workload_name not in names
        and names,
    )
    assert first.workload_name in names


def test_a_notebook_is_accepted_by_a_real_api_server_and_stopping_keeps_its_volume(
    kube_backend: KubernetesBackend, make_gpu_node: Callable, kube_namespace: str, test_id: str, people
) -> None:
    from jobs.choices import NotebookState, StopReason
    from jobs.notebook.sessions import launch_notebook, stop_notebook

    product = f"NVIDIA-H100-NB-{test_id}"
    make_gpu_node("nb", gpus=8, product=product)
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 1, 1)
    notebook = launch_notebook(
        people["alice"], team, rc, {"name": "explore", "count": 1, "cpu_millicores": 2000, "memory_mb": 4096}
    ).notebook
    run_cycle(kube_backend)
    notebook.refresh_from_db()
    job = notebook.session
    assert job.state == JobState.ADMITTED and job.workload_created_at is not None  # the API server took all three
    core = kube_backend.core
    claim = core.read_namespaced_persistent_volume_claim(notebook.volume_name, kube_namespace)
    assert claim.spec.resources.requests["storage"] == "20Gi"
    service = core.read_namespaced_service(notebook.resource_name, kube_namespace)
    assert service.spec.cluster_ip and service.spec.selector == {"gpu-portal.io/notebook": notebook.resource_name}
    [workload] = [w for w in kube_backend.list_workloads(kube_namespace) if w["metadata"]["name"] == job.workload_name]
    pod_spec = workload["spec"]["template"]["spec"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    assert pod_spec["volumes"][0]["persistentVolumeClaim"]["claimName"] == notebook.volume_name

    assert stop_notebook(people["alice"], notebook, StopReason.USER, kube_backend) is True
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.STOPPED
    wait_for(
        "the stopped notebook's workload to go",
        lambda: job.workload_name not in {w["metadata"]["name"] for w in kube_backend.list_workloads(kube_namespace)},
    )
    assert core.read_namespaced_persistent_volume_claim(notebook.volume_name, kube_namespace).metadata.uid == (
        claim.metadata.uid
    )


def test_a_job_another_team_makes_with_the_portals_labels_deletes_nothing_on_a_real_control_plane(
    kube_backend: KubernetesBackend, kube_core, make_gpu_node: Callable, kube_namespace: str, test_id: str, people
) -> None:
    """Audit finding 1 against the real apiserver: a Job in team nlp's namespace carrying the portal's labels,
    one of team vision's job ids and the name of vision's other workload is never followed and deletes nothing."""
    from jobs.render import render_job

    product = f"NVIDIA-H100-TEST-{test_id}"
    make_gpu_node("a", gpus=8, product=product)
    sync_inventory(kube_backend)
    rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    vision, nlp = Team.objects.get(slug="vision"), Team.objects.get(slug="nlp")
    attacker_ns = f"{kube_namespace}-nlp"
    kube_core.create_namespace({"metadata": {"name": attacker_ns}})
    Team.objects.filter(pk=vision.pk).update(namespace=kube_namespace)
    Team.objects.filter(pk=nlp.pk).update(namespace=attacker_ns)
    vision.refresh_from_db()
    actions.set_quota(people["admin"], vision, rc, 8, 8)
    request = dict(
        name="keep", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "60"], args=[], env=[],
        count=1, cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=600,
    )  # fmt: skip
    victim = actions.submit_job(people["alice"], vision, rc, request).job
    other = actions.submit_job(people["alice"], vision, rc, {**request, "name": "other"}).job
    run_cycle(kube_backend)
    victim.refresh_from_db()
    other.refresh_from_db()
    assert victim.workload_created_at is not None and other.workload_created_at is not None
    try:
        for name in (other.workload_name, f"{victim.workload_name}-old"):
            forged = render_job(victim)
            forged["metadata"]["namespace"] = attacker_ns
            forged["metadata"]["name"] = name
            kube_backend.create_workload(forged)
        for _ in range(2):
            result = run_cycle(kube_backend)
            assert result.deleted == 0
        names = {w["metadata"]["name"] for w in kube_backend.list_workloads(kube_namespace)}
        assert {victim.workload_name, other.workload_name} <= names
        assert {w["metadata"]["name"] for w in kube_backend.list_workloads(attacker_ns)} == {
            other.workload_name, f"{victim.workload_name}-old",
        }  # fmt: skip
    finally:
        kube_core.delete_namespace(attacker_ns, propagation_policy="Background")
