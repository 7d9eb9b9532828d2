"""The fleet against two real control planes (issue 32, item 9): registering a cluster checks the real API server
(a wrong CA, a refused token, an address nobody answers, a name in use: each refused, nothing stored); a job that
prefers the full cluster spills to the other, and that cluster's scheduler binds its pod to the node the portal
chose; while the other cluster's API server is down, the first keeps admitting and the work there is neither
advanced nor lost, and everything resumes when it is back."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config

from accounts.models import Team
from cluster.kubernetes import KubernetesBackend
from gpus import fleet
from gpus.choices import ClusterHealth
from gpus.models import Cluster, Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job

from .controlplane import LocalControlPlane
from .support import wait_for

pytestmark = pytest.mark.django_db(transaction=False)


@pytest.fixture
def other_core(second_controlplane: LocalControlPlane) -> Iterator[client.CoreV1Api]:
    api_client = new_client_from_config(config_file=str(second_controlplane.kubeconfig_path))
    try:
        yield client.CoreV1Api(api_client)
    finally:
        api_client.close()


def _body(plane: LocalControlPlane, **changes) -> dict:
    body = {"name": "east", "display_name": "DGX east", "region": "us-east", "connection": "token"}
    return body | {"server": plane.server, "ca_certificate": plane.ca_path.read_text(), "token": plane.token} | changes


def test_registering_a_real_cluster_and_what_bad_input_gets(
    kube_controlplane: LocalControlPlane,
    second_controlplane: LocalControlPlane,
    people,
    api_client,
    refusing_port: int,
) -> None:
    api_client.force_authenticate(people["admin"])
    before = Cluster.objects.count()
    # The first control plane's CA does not sign the second's certificate.
    wrong_ca = api_client.post("/api/v1/clusters/", _body(second_controlplane,
                               ca_certificate=kube_controlplane.ca_path.read_text()), format="json")  # fmt: skip
    assert wrong_ca.status_code == 400, wrong_ca.content
    assert "not signed by the CA" in " ".join(wrong_ca.json()["ca_certificate"])
    refused = api_client.post("/api/v1/clusters/", _body(second_controlplane, token="not-a-token"), format="json")
    assert refused.status_code == 400 and "rejected the token (HTTP 401)" in " ".join(refused.json()["token"])
    nobody = api_client.post("/api/v1/clusters/", _body(second_controlplane,
                             server=f"https://127.0.0.1:{refusing_port}"), format="json")  # fmt: skip
    assert nobody.status_code == 400 and "cannot be reached" in " ".join(nobody.json()["server"])
    no_token = api_client.post("/api/v1/clusters/", _body(second_controlplane, token=""), format="json")
    assert no_token.status_code == 400 and no_token.json()["token"]
    assert Cluster.objects.count() == before  # nothing half-made

    made = api_client.post("/api/v1/clusters/", _body(second_controlplane), format="json")
    assert made.status_code == 201, made.content
    found = made.json()["capabilities"]
    assert found["server_version"].startswith("v1.20") and found["indexed_jobs"] is False and found["dra"] is False
    assert second_controlplane.token not in made.content.decode()
    clash = api_client.post("/api/v1/clusters/", _body(second_controlplane), format="json")
    assert clash.status_code == 400 and "already registered" in " ".join(clash.json()["name"])


def test_a_job_spills_to_the_second_cluster_whose_scheduler_binds_it_and_survives_its_outage(
    kube_backend: KubernetesBackend, second_controlplane: LocalControlPlane, other_core: client.CoreV1Api,
    make_gpu_node: Callable, kube_namespace: str, test_id: str, people, settings,
) -> None:  # fmt: skip
    settings.PORTAL_K8S_WATCH_CACHE = False  # the registered cluster's backend reads fresh lists
    product = f"NVIDIA-H100-FLEET-{test_id}"
    make_gpu_node("a", gpus=8, product=product)
    node_b = f"gpu-{test_id}-b"
    other_core.create_node({
        "metadata": {"name": node_b, "labels": {"kubernetes.io/hostname": node_b, "nvidia.com/gpu.present": "true",
                     "nvidia.com/gpu.product": product, "nvidia.com/gpu.count": "8", "nvidia.com/gpu.memory": "81559",
                     "nvidia.com/cuda.driver.major": "550"}},
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
                   "allocatable": {"cpu": "64", "memory": "500Gi", "pods": "110", "nvidia.com/gpu": "8"},
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "fake"}]},
    })  # fmt: skip
    try:
        sync_inventory(kube_backend)
        east = fleet.register(people["admin"], fleet.ClusterInput(**{
            k: v for k, v in _body(second_controlplane).items() if k != "display_name"}))  # fmt: skip
        assert fleet.sync(east) is not None
        assert Node.objects.get(cluster=east, name=node_b).gpu_count == 8
        rc = ResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
        assert rc.allocatable == 16  # one class over both clusters
        team = Team.objects.get(slug="vision")
        Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
        team.refresh_from_db()
        actions.set_quota(people["admin"], team, rc, 24, 24)
        request = dict(
            name="first", image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "600"], args=[], env=[],
            count=8, cpu_millicores=4000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=900,
            clusters=["default", "east"],
        )  # fmt: skip
        first = actions.submit_job(people["alice"], team, rc, request).job
        run_cycle(kube_backend)
        first.refresh_from_db()
        assert first.state == JobState.ADMITTED and first.cluster.name == "default", first.wait_message
        spilled = actions.submit_job(people["alice"], team, rc, {**request, "name": "spilled"}).job
        run_cycle(kube_backend)
        spilled.refresh_from_db()
        assert spilled.state == JobState.ADMITTED and spilled.cluster == east and spilled.node_name == node_b

        def bound_on_east() -> str | None:
            for pod in other_core.list_namespaced_pod(kube_namespace).items:
                if (pod.metadata.labels or {}).get("gpu-portal.io/job-id") == str(spilled.pk):
                    return pod.spec.node_name
            return None

        # The second cluster's own scheduler binds the pod to the node the portal chose.
        assert wait_for("the spilled job's pod to be bound", bound_on_east) == node_b

        second_controlplane.stop_apiserver()
        try:
            assert fleet.sync(east) is None
            east.refresh_from_db()
            assert east.health == ClusterHealth.UNREACHABLE and east.unreachable_since is not None
            here = actions.submit_job(people["alice"], team, rc, {**request, "name": "here", "count": 4,
                                      "clusters": []}).job  # fmt: skip
            Job.objects.filter(pk=first.pk).update(state=JobState.CANCELLED)  # room on the first cluster
            result = run_cycle(kube_backend)
            here.refresh_from_db()
            spilled.refresh_from_db()
            assert here.state == JobState.ADMITTED and here.cluster.name == "default", (here.wait_message, result)
            assert spilled.state == JobState.ADMITTED  # neither advanced nor lost while its cluster is away
        finally:
            second_controlplane.start_apiserver_again()
        assert fleet.sync(east) is not None
        east.refresh_from_db()
        assert east.health == ClusterHealth.REACHABLE
        run_cycle(kube_backend)
        spilled.refresh_from_db()
        assert spilled.state == JobState.ADMITTED and bound_on_east() == node_b
    finally:
        other_core.delete_node(node_b)
        for namespace in other_core.list_namespace().items:
            if namespace.metadata.name == kube_namespace:
                other_core.delete_namespace(kube_namespace, propagation_policy="Background")
