"""Faults at the HTTP layer between the portal and the real kube-apiserver (tests/kube/faultproxy.py): answers of
500, connections dropped before and after the apiserver acted, resets, and answers delayed past the client's
timeout. The job cycle, run through them, converges: every admitted job ends with exactly one workload (nothing
twice), none without (nothing lost), and cancelled jobs' workloads are gone. The retry budget bounds what a failing
apiserver costs.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from kubernetes import client

from accounts.models import Team
from cluster.base import ClusterError
from cluster.kubernetes import KubernetesBackend, RetryBudget
from cluster.metrics import API_FAILURES, API_RETRIES
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job
from jobs.render import JOB_ID_LABEL

from .controlplane import LocalControlPlane
from .faultproxy import FaultProxy

pytestmark = pytest.mark.django_db

#: Two requests in five meet a fault, of every kind.
FAULTY = {"ok": 0.6, "error": 0.1, "drop_before": 0.06, "drop_after": 0.1, "reset": 0.06, "delay": 0.08}
CLIENT_TIMEOUT = 1.5


def backend_through(proxy: FaultProxy, plane: LocalControlPlane, **kwargs) -> KubernetesBackend:
    configuration = client.Configuration()
    configuration.host = proxy.url
    configuration.api_key = {"authorization": plane.token}
    configuration.api_key_prefix = {"authorization": "Bearer"}
    options = {"retries": 4, "backoff_seconds": 0.01, "request_timeout": CLIENT_TIMEOUT,
               "retry_budget": RetryBudget(retries=10_000)} | kwargs  # fmt: skip
    return KubernetesBackend(client.ApiClient(configuration), **options)


def until(what: str, step: Callable[[], bool], attempts: int = 40) -> None:
    """Run ``step`` until it says done; a step that raises ClusterError (the faults won) is simply run again."""
    for _ in range(attempts):
        try:
            if step():
                return
        except ClusterError:
            pass
    pytest.fail(f"{what}: not done after {attempts} attempts")


def counter(metric, **labels) -> float:
    return (metric.labels(**labels) if labels else metric)._value.get()


def test_the_job_cycle_converges_through_faults_with_nothing_twice_and_nothing_lost(
    kube_controlplane: LocalControlPlane,
    kube_backend: KubernetesBackend,
    make_gpu_node: Callable,
    kube_namespace: str,
    test_id: str,
    people,
) -> None:
    product = f"NVIDIA-H100-FAULTS-{test_id}"
    for suffix in ("a", "b", "c"):
        make_gpu_node(suffix, gpus=8, product=product)
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    retries_before = sum(counter(API_RETRIES, reason=r) for r in ("server_error", "timeout", "connection"))

    with FaultProxy(kube_controlplane.server, FAULTY, delay_seconds=CLIENT_TIMEOUT + 1.0) as proxy:
        faulty = backend_through(proxy, kube_controlplane)
        until("the inventory reconcile", lambda: sync_inventory(faulty) is not None)
        rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
        actions.set_quota(people["admin"], team, rc, 24, 24)
        request = dict(
            image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "600"], args=[], env=[], count=2,
            cpu_millicores=1000, memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=3600,
        )  # fmt: skip
        jobs = [actions.submit_job(people["alice"], team, rc, {**request, "name": f"f{i}"}).job for i in range(8)]

        def all_launched() -> bool:
            run_cycle(faulty)
            return not Job.objects.filter(pk__in=[j.pk for j in jobs]).exclude(workload_created_at__isnull=False)

        until("every job's workload created", all_launched)

        doomed = jobs[:3]
        for job in doomed:
            job.refresh_from_db()
            actions.cancel_job(people["alice"], job)

        def cancelled_gone() -> bool:
            run_cycle(faulty)
            left = {w["metadata"]["name"] for w in kube_backend.list_workloads(kube_namespace)}
            return not left & {j.workload_name for j in doomed}

        until("the cancelled jobs' workloads deleted", cancelled_gone)

    # Every kind of fault really happened, writes included, and the client retried through them.
    assert all(proxy.outcomes[o] > 0 for o in FAULTY), proxy.outcomes
    assert proxy.writes["drop_after"] + proxy.writes["reset"] > 0, proxy.writes
    retries_after = sum(counter(API_RETRIES, reason=r) for r in ("server_error", "timeout", "connection"))
    assert retries_after > retries_before

    # Read back without the proxy: one workload per live job, none for the cancelled, nothing else.
    workloads = kube_backend.list_workloads(kube_namespace)
    by_job: dict[str, list[str]] = {}
    for workload in workloads:
        by_job.setdefault(workload["metadata"]["labels"][JOB_ID_LABEL], []).append(workload["metadata"]["name"])
    survivors = jobs[3:]
    for job in survivors:
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED or job.state == JobState.RUNNING, (job.pk, job.state)
        assert by_job.get(str(job.pk)) == [job.workload_name], (job.pk, by_job)
        live = kube_backend.batch.read_namespaced_job(job.workload_name, kube_namespace)
        assert live.metadata.uid == job.workload_uid  # the object the portal recorded is the one that exists
    assert set(by_job) == {str(j.pk) for j in survivors}
    for job in doomed:
        job.refresh_from_db()
        assert job.state == JobState.CANCELLED


def test_the_retry_budget_bounds_what_a_failing_apiserver_costs(kube_controlplane: LocalControlPlane) -> None:
    failures_before = counter(API_FAILURES)
    with FaultProxy(kube_controlplane.server, {"error": 1.0}) as proxy:
        backend = backend_through(proxy, kube_controlplane, retries=4, retry_budget=RetryBudget(retries=3, window=600))
        with pytest.raises(ClusterError, match=r"retry budget \(3 retries per 600 s\) is spent"):
            backend.list_nodes()
        assert proxy.outcomes["error"] == 4  # the first try and the budget's three retries
        with pytest.raises(ClusterError, match="retry budget"):
            backend.get_node("any")
        assert proxy.outcomes["error"] == 5  # no retry left: one request, then the error
        proxy.healthy()
        assert backend.list_nodes()[1]  # a healthy server answers at once, budget or not
    assert counter(API_FAILURES) == failures_before + 2


def test_a_lost_create_answer_is_not_a_second_workload(
    kube_controlplane: LocalControlPlane, kube_backend: KubernetesBackend, kube_namespace: str
) -> None:
    """The apiserver creates the Job, the answer is lost, the retry meets the Job: one Job, reported as created."""
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "lost-answer", "namespace": kube_namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                }
            },
        },
    }
    with FaultProxy(kube_controlplane.server, {"drop_after": 1.0}) as proxy:
        backend = backend_through(proxy, kube_controlplane, retries=3)
        # Every request's answer is lost: the create's retries meet their own Job, yet never hear back.
        with pytest.raises(ClusterError):
            backend.create_workload(manifest)
        proxy.healthy()
        created = backend.create_workload(manifest)  # the next cycle's attempt: 409, read back, ours
    jobs = [w for w in kube_backend.list_workloads(kube_namespace) if w["metadata"]["name"] == "lost-answer"]
    assert len(jobs) == 1 and created["metadata"]["uid"] == jobs[0]["metadata"]["uid"]
    assert proxy.writes["drop_after"] >= 2
