"""An inference service's rendered objects on a real kube-apiserver v1.20 with its scheduler and
controller-manager: the API server accepts the Deployment, Service and HPA (autoscaling/v2beta2, the version this
server serves), the deployment controller makes a ReplicaSet and pods, the scheduler binds the replicas to GPU
nodes, an image change makes a new ReplicaSet revision and rollback returns the previous template.

Then the portal's own cycle (jobs.cycle.run.run_cycle) does it: it admits a service's minimum, creates its objects and
its Ingress (networking.k8s.io/v1, served from v1.19), sees the replicas ready (the control plane has no kubelet, so
the test sets the pods' Ready condition as a kubelet would), runs the job, rolls an image change and removes
everything at stop. And the simulated API server refuses bad Ingresses with exactly the real server's messages."""

from __future__ import annotations

import pytest
from kubernetes import client

from accounts.models import Team
from cluster.base import AUTOSCALING_V2BETA2, Invalid, NotFound
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass as PortalResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models.service import InferenceService
from jobs.service import ops as service_ops
from jobs.service.render import Probe, ResourceClass, ServiceSpec, render_deployment, render_hpa, render_service
from vocab.taints import Taint

from .support import wait_for


def _spec(namespace: str, product: str, image: str = "registry.example.com/vision/serve:1") -> ServiceSpec:
    return ServiceSpec(
        name="llm",
        namespace=namespace,
        team="vision",
        owner="alice",
        image=image,
        port=8000,
        resource_class=ResourceClass(
            key=f"nvidia.com/gpu@{product}", resource_name="nvidia.com/gpu", product_label=product
        ),  # fmt: skip
        count=1,
        cpu_millicores=1000,
        memory_mb=2048,
        min_replicas=2,
        max_replicas=4,
        readiness=Probe(port=8000, path="/health", initial_delay_seconds=5),
        liveness=Probe(port=8000),
        metric="requests_per_second",
        metric_target="20",
        # What gpus.node_pools.PoolTaints.for_product finds on make_gpu_node's nodes: the GPU Operator's taint.
        gpu_taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
    )


def test_a_service_runs_on_the_real_control_plane(kube_backend, kube_namespace, make_gpu_node, test_id):
    product = f"TEST-{test_id}".upper()
    nodes = {make_gpu_node("a", gpus=1, product=product)["metadata"]["name"],
             make_gpu_node("b", gpus=1, product=product)["metadata"]["name"]}  # fmt: skip
    spec = _spec(kube_namespace, product)
    assert kube_backend.autoscaling_api() == AUTOSCALING_V2BETA2

    deployment = kube_backend.apply_deployment(render_deployment(spec))
    assert deployment["spec"]["replicas"] == 2
    service = kube_backend.ensure_service(render_service(spec))
    assert service["spec"]["clusterIP"]
    hpa = kube_backend.apply_hpa(render_hpa(spec, kube_backend.autoscaling_api()))
    assert hpa["apiVersion"] == AUTOSCALING_V2BETA2 and hpa["spec"]["maxReplicas"] == 4
    assert kube_backend.get_hpa(kube_namespace, "llm")["spec"]["metrics"][0]["pods"]["metric"]["name"] == (
        "requests_per_second")  # fmt: skip

    def bound():
        pods = [p for p in kube_backend.list_pods(kube_namespace) if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 else None

    pods = wait_for("both replicas bound", bound, timeout=60)
    assert {p["spec"]["nodeName"] for p in pods} == nodes  # one per node: each has one GPU
    (first,) = kube_backend.list_replica_sets(kube_namespace, "llm")
    assert first["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"

    kube_backend.apply_deployment(render_deployment(_spec(kube_namespace, product, image="registry.example.com/x:2")))

    def two_revisions():
        replica_sets = kube_backend.list_replica_sets(kube_namespace, "llm")
        return replica_sets if len(replica_sets) == 2 else None

    old, new = wait_for("a second ReplicaSet", two_revisions, timeout=60)
    assert old["metadata"]["name"] == first["metadata"]["name"]
    assert new["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert new["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/x:2"

    wait_for("revision 2 on the Deployment", lambda: kube_backend.get_deployment(kube_namespace, "llm")["metadata"]
             .get("annotations", {}).get("deployment.kubernetes.io/revision") == "2" or None, timeout=60)  # fmt: skip
    rolled = kube_backend.rollback_deployment(kube_namespace, "llm")
    assert rolled["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/vision/serve:1"

    def reused():
        by_name = {rs["metadata"]["name"]: rs for rs in kube_backend.list_replica_sets(kube_namespace, "llm")}
        revision = by_name[first["metadata"]["name"]]["metadata"]["annotations"]["deployment.kubernetes.io/revision"]
        return by_name if revision == "3" else None

    by_name = wait_for("the first ReplicaSet as revision 3", reused, timeout=60)
    assert len(by_name) == 2

    paused = kube_backend.set_deployment_paused(kube_namespace, "llm", True)
    assert paused["spec"]["paused"] is True
    assert kube_backend.scale_deployment(kube_namespace, "llm", 3)["spec"]["replicas"] == 3
    assert kube_backend.delete_hpa(kube_namespace, "llm") is True
    assert kube_backend.delete_deployment(kube_namespace, "llm") is True
    assert kube_backend.delete_deployment(kube_namespace, "llm") is False


def _mark_ready(kube_core, namespace: str, pod: dict) -> None:
    """What the kubelet reports of a started container whose readiness probe passed."""
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"},
                                                 {"type": "ContainersReady", "status": "True"}]}  # fmt: skip
    kube_core.patch_namespaced_pod_status(pod["metadata"]["name"], namespace, {"status": status})


def _service_pods(kube_backend, namespace: str) -> list[dict]:
    return [p for p in kube_backend.list_pods(namespace) if p["metadata"]["labels"].get("gpu-portal.io/service")]


@pytest.mark.django_db
def test_the_portal_cycle_runs_rolls_and_stops_a_service_with_its_ingress(
    kube_backend, kube_core, kube_namespace, make_gpu_node, test_id, people, settings
):
    settings.PORTAL_SERVICE_URL_TEMPLATE = "https://{name}-{team}.apps.example.com"
    settings.PORTAL_SERVICE_INGRESS_CLASS = "nginx"
    product = f"NVIDIA-H100-SVC-{test_id}".upper()
    nodes = {make_gpu_node("a", gpus=1, product=product)["metadata"]["name"],
             make_gpu_node("b", gpus=1, product=product)["metadata"]["name"]}  # fmt: skip
    sync_inventory(kube_backend)
    rc = PortalResourceClass.objects.get(key=f"nvidia.com/gpu@{product}")
    team = Team.objects.get(slug="vision")
    Team.objects.filter(pk=team.pk).update(namespace=kube_namespace)
    team.refresh_from_db()
    actions.set_quota(people["admin"], team, rc, 2, 2)
    created = service_ops.create_service(
        people["alice"], team, rc,
        {"name": "llm", "image": "registry.example.com/vision/serve:1", "command": ["serve"], "count": 1,
         "cpu_millicores": 1000, "memory_mb": 2048},
        {"port": 8000, "readiness": {"type": "http", "path": "/health"}, "min_replicas": 2, "max_replicas": 2,
         "metric": "cpu", "metric_target": 70.0},
    )  # fmt: skip

    run_cycle(kube_backend)
    service = InferenceService.objects.select_related("job").get(pk=created.pk)
    assert service.job.state == JobState.ADMITTED and service.job.workload_created_at is not None
    assert kube_backend.get_deployment(kube_namespace, "llm")["spec"]["replicas"] == 2
    hpa = kube_backend.get_hpa(kube_namespace, "llm")
    assert hpa["apiVersion"] == AUTOSCALING_V2BETA2 and hpa["spec"]["maxReplicas"] == 2
    assert kube_core.read_namespaced_service("llm", kube_namespace).spec.cluster_ip
    ingress = kube_backend.get_ingress(kube_namespace, "llm")
    assert ingress["spec"]["ingressClassName"] == "nginx"
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "llm-vision.apps.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"] == {"name": "llm", "port": {"number": 80}}
    assert ingress["spec"]["tls"] == [{"hosts": ["llm-vision.apps.example.com"]}]

    def bound():
        pods = [p for p in _service_pods(kube_backend, kube_namespace) if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 else None

    pods = wait_for("the minimum's two replicas bound", bound, timeout=60)
    assert {p["spec"]["nodeName"] for p in pods} == nodes
    run_cycle(kube_backend)
    assert InferenceService.objects.get(pk=created.pk).job.state == JobState.ADMITTED  # not ready yet: not running
    for pod in pods:
        _mark_ready(kube_core, kube_namespace, pod)
    wait_for("the Deployment to count two ready replicas",
             lambda: (kube_backend.get_deployment(kube_namespace, "llm").get("status") or {}).get("readyReplicas") == 2
             or None, timeout=60)  # fmt: skip
    run_cycle(kube_backend)
    service = InferenceService.objects.select_related("job").get(pk=created.pk)
    assert service.job.state == JobState.RUNNING
    assert service.observed["ready"] == 2 and {r["node"] for r in service.job.ranks} == nodes

    service_ops.update_service(people["alice"], service, {"image": "registry.example.com/vision/serve:2"})
    run_cycle(kube_backend)

    def two_revisions():
        replica_sets = kube_backend.list_replica_sets(kube_namespace, "llm")
        return replica_sets if len(replica_sets) == 2 else None

    old, new = wait_for("a second ReplicaSet for the new image", two_revisions, timeout=60)
    assert new["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert new["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/vision/serve:2"
    assert old["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example.com/vision/serve:1"
    assert kube_backend.get_deployment(kube_namespace, "llm")["metadata"]["annotations"][
        "gpu-portal.io/service-revision"] == "2"  # fmt: skip

    service_ops.stop_service(people["alice"], InferenceService.objects.get(pk=created.pk))
    run_cycle(kube_backend)
    assert InferenceService.objects.get(pk=created.pk).job.state == JobState.CANCELLED
    for get in (kube_backend.get_deployment, kube_backend.get_hpa, kube_backend.get_ingress):
        with pytest.raises(NotFound):
            get(kube_namespace, "llm")
    assert kube_backend.delete_service(kube_namespace, "llm") is False  # already gone


BAD_INGRESSES = {
    "no rules": {},
    "IP host, no pathType, bad class": {
        "ingressClassName": "Nginx_X",
        "rules": [{"host": "1.2.3.4", "http": {"paths": [
            {"path": "rel", "backend": {"service": {"name": "llm", "port": {"number": 80}}}}]}}],
    },
    "bad wildcard, type, service name": {"rules": [{"host": "a.*.example.com", "http": {"paths": [
        {"path": "/", "pathType": "Bogus", "backend": {"service": {"name": "Bad_svc", "port": {"name": "http"}}}}]}}]},
    "upper-case host, no port": {"rules": [{"host": "UP.example.com", "http": {"paths": [
        {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "llm", "port": {}}}}]}}]},
    "no backend, bad secret": {
        "rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {}}]}}],
        "tls": [{"hosts": ["*.b"], "secretName": "Bad_S"}],
    },
    "no paths": {"rules": [{"host": "a.example.com", "http": {"paths": []}}]},
    "port out of range": {"defaultBackend": {"service": {"name": "llm", "port": {"number": 70000}}}},
    "bad port name": {"defaultBackend": {"service": {"name": "llm", "port": {"name": "Http_x"}}}},
    "relative prefix": {"rules": [{"host": "a.example.com", "http": {"paths": [
        {"path": "api", "pathType": "Prefix", "backend": {"service": {"name": "llm", "port": {"number": 80}}}}]}}]},
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_INGRESSES))
def test_the_simulated_api_server_refuses_bad_ingresses_with_the_real_servers_words(
    case, kube_backend, kube_namespace, tmp_path
):
    # The simulated server says it is the version of the real one it is compared with.
    scenario = {"namespaces": [kube_namespace], "nodes": [], "server_version": kube_backend.server_version()}
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=scenario)
    manifest = {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "bad", "namespace": kube_namespace}, "spec": BAD_INGRESSES[case]}  # fmt: skip
    with pytest.raises(Invalid) as real:
        kube_backend.apply_ingress(manifest)
    with pytest.raises(Invalid) as simulated:
        sim.apply_ingress(manifest)
    assert str(simulated.value) in str(real.value)


def test_the_test_control_plane_serves_no_metrics_api(kube_backend):
    # No metrics server and no adapter run beside the test apiserver: discovery finds none of the metrics groups,
    # so the portal refuses services that would scale on them (jobs.service.ops.service_errors).
    assert kube_backend.metrics_apis() == frozenset()
    groups = {group.name for group in client.ApisApi(kube_backend.api_client).get_api_versions().groups}
    assert "apps" in groups and "autoscaling" in groups  # discovery itself answered
