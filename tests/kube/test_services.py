"""An inference service's rendered objects on a real kube-apiserver v1.20 with its scheduler and
controller-manager: the API server accepts the Deployment, Service and HPA (autoscaling/v2beta2, the version this
server serves), the deployment controller makes a ReplicaSet and pods, the scheduler binds the replicas to GPU
nodes, an image change makes a new ReplicaSet revision and rollback returns the previous template."""

from __future__ import annotations

from cluster.base import AUTOSCALING_V2BETA2
from jobs.render_service import Probe, ResourceClass, ServiceSpec, render_deployment, render_hpa, render_service

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
