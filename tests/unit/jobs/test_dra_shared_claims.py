"""Pods of a shared DRA class share devices through ResourceClaims the portal makes (issue 33, item 3): a workload's
pods share ceil(pods / replicas) claims, each of one device with NVIDIA's GpuConfig or MigDeviceConfig sharing
(MPS splits threads and memory among the clients), named by the pods (``resourceClaimName``), created in the team's
namespace and deleted when the workload ends; each object valid against Kubernetes 1.37's schema
(tests/k8s_schema.py, strict). The simulated scheduler allocates such a claim once, reserves it for each pod and
releases it when the last one ends, as kube-scheduler's DynamicResources plugin does; admission counts the service's
replicas on the one device. Bad requests (more replicas than share a device, more than one share a pod) are refused."""

from __future__ import annotations

import pytest
from django.utils import timezone

from cluster.connect import discover
from cluster.sim import SimulatedCluster
from gpus.class_admin import update_class
from gpus.models import Cluster, ResourceClass, settings_cluster_pk
from gpus.reconcile import sync_inventory
from jobs import actions, kinds
from jobs.choices import JobKind, JobState
from jobs.cycle.admit import build_snapshot
from jobs.models import Job, Quota
from jobs.models.service import InferenceService
from jobs.service.ops import service_errors, stop_service
from jobs.validation import check_request
from tests.dra_objects import DRA_SMALL, claim_spec, dra_job, exactly, resource_claim, time_slicing
from tests.factories import cycle, inference_service, placed_job, run_until, submit_job
from tests.k8s_schema import assert_valid
from tests.sim_objects import pod_of

H100 = "dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3"
#: One H100 through NVIDIA's DRA driver with time-slicing and MPS allowed: every share is a share of that GPU.
SCENARIO = {
    "server_version": "v1.34.1",
    "kubernetes_version": "v1.34.1",
    "nodes": [
        {"name": "dra-h100-01", "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 1}, "cpu": 64, "memory": "512Gi",
         "dra": {"feature_gates": ["TimeSlicingSettings", "MPSSupport"]}},
    ],
}  # fmt: skip


@pytest.fixture
def lab(db, tmp_path, clock, people):
    """The cluster above as the cluster in settings, synced and checked; its H100 class shared 4 ways by
    time-slicing, shown to users."""
    sim = SimulatedCluster(tmp_path / "lab.json", scenario=SCENARIO, clock=clock)
    sync_inventory(sim)
    Cluster.objects.filter(pk=settings_cluster_pk()).update(capabilities=discover(sim).as_dict())
    ResourceClass.objects.filter(key__startswith="dra:").update(hidden=False)
    update_class(people["admin"], ResourceClass.objects.get(key=H100), sharing_strategy="time-slicing", replicas=4)
    return sim


def _service(people, replicas: int, **fields) -> InferenceService:
    job = placed_job(people["alice"], H100, kind=JobKind.SERVICE, name="llm-chat", workers=replicas, count=1,
                     node_name="dra-h100-01", command=["sleep", "3600"], **fields)  # fmt: skip
    return InferenceService.objects.create(team=people["vision"], owner=people["alice"], name="llm-chat", job=job,
                                           port=8000, min_replicas=replicas, max_replicas=replicas)  # fmt: skip


def _admitted(job: Job) -> Job:
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, workload_name=job.workload_name)
    job.refresh_from_db()
    return job


def test_a_service_of_four_replicas_on_a_four_way_class_renders_one_claim(lab, people):
    service = _service(people, 4)
    job = service.job
    rendered = kinds.for_job(job).render(job)
    assert [obj["kind"] for obj in rendered] == ["ResourceClaim", "Service", "Deployment", "HorizontalPodAutoscaler"]
    claim, _, deployment, _ = rendered
    assert_valid(claim, deployment)
    assert claim["metadata"] | {"labels": {}} == {"name": "llm-chat-gpus", "namespace": "team-vision", "labels": {}}
    (request,) = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com" and request["exactly"]["count"] == 1
    assert claim["spec"]["devices"]["config"] == [
        {"requests": ["gpus"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": "TimeSlicing"}}}}
    ]  # fmt: skip
    pod = deployment["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimName": "llm-chat-gpus"}]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "gpus"}]


def test_an_mps_claim_splits_threads_and_memory_among_its_clients(lab, people):
    rc = update_class(people["admin"], ResourceClass.objects.get(key=H100), sharing_strategy="mps", replicas=2)
    job = placed_job(people["alice"], H100, node_name="dra-h100-01", count=1)
    claim, workload = kinds.for_job(job).render(job)
    assert_valid(claim, workload)
    (config,) = claim["spec"]["devices"]["config"]
    assert config["opaque"]["parameters"]["sharing"] == {
        "strategy": "MPS",
        "mpsConfig": {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": f"{rc.memory_mb // 2}Mi"},
    }
    pod = workload["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimName": f"{job.workload_name}-gpus"}]
    assert kinds.for_job(job).attempt_objects(job) == [("ResourceClaim", f"{job.workload_name}-gpus")]


def test_four_replicas_run_on_one_gpu_through_one_claim_which_goes_with_the_service(lab, clock, people):
    service = _service(people, 4)
    job = _admitted(service.job)
    for _ in range(5):
        cycle(lab, clock, 6)
    pods = [p for p in lab.list_pods("team-vision") if p["metadata"]["labels"].get("gpu-portal.io/service")]
    assert len(pods) == 4 and all(p["status"]["phase"] == "Running" for p in pods)
    (claim,) = lab.list_resource_claims("team-vision")
    assert claim["metadata"]["name"] == "llm-chat-gpus"
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == "dra-h100-01"
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == sorted(p["metadata"]["name"] for p in pods)
    (config,) = claim["status"]["allocation"]["devices"]["config"]
    assert config["opaque"]["parameters"]["sharing"] == {"strategy": "TimeSlicing"}
    assert lab.list_resource_claim_templates("team-vision") == []
    # Admission sees the four shares on the one device, held: none left on the node, for shares or a whole GPU.
    snap, _ = build_snapshot(timezone.now())
    (node,) = snap.nodes.values()
    assert node.free == {"dra:gpu.nvidia.com": 0, "dra:gpu.nvidia.com~time-slicing*4": 0}
    (view,) = [v for v in snap.active if v.id == job.pk]
    assert (view.count, view.workers) == (4, 1)
    # Its pods named on the node one by one (as a lowered minimum leaves them) still hold the claim's one device.
    Job.objects.filter(pk=job.pk).update(node_names=["dra-h100-01"] * 4)
    (node,) = build_snapshot(timezone.now())[0].nodes.values()
    assert node.free == {"dra:gpu.nvidia.com": 0, "dra:gpu.nvidia.com~time-slicing*4": 0}
    Job.objects.filter(pk=job.pk).update(node_names=[])
    stop_service(people["alice"], service)
    for _ in range(3):
        cycle(lab, clock, 6)
    assert lab.list_resource_claims("team-vision") == []


def test_a_batch_job_s_claim_is_deleted_when_the_job_ends(lab, clock, people):
    job = _admitted(placed_job(people["alice"], H100, node_name="dra-h100-01", count=1, command=["sleep", "3600"]))
    job = run_until(lab, clock, job, JobState.RUNNING)
    (claim,) = lab.list_resource_claims("team-vision")
    assert claim["metadata"]["name"] == f"{job.workload_name}-gpus" and len(claim["status"]["reservedFor"]) == 1
    actions.cancel_job(people["alice"], job)
    cycle(lab, clock, 6)
    assert lab.list_resource_claims("team-vision") == []


def test_the_simulated_scheduler_releases_a_shared_claim_when_its_last_pod_ends(clock):
    cluster = SimulatedCluster(scenario=DRA_SMALL, clock=clock)
    spec = claim_spec(("gpu", exactly("gpu.nvidia.com", 1)), config=[{"requests": ["gpu"], **time_slicing()}])
    cluster.apply_resource_claim(resource_claim("shared", spec))
    for name, seconds in (("a", 30), ("b", 60), ("c", 90)):
        cluster.create_workload(dra_job(name, {}, claims={"gpu": "shared"}, seconds=seconds))
    claim = cluster.get_resource_claim("team-a", "shared")
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == sorted(
        pod_of(cluster, name)["metadata"]["name"] for name in "abc"
    )
    assert len({pod_of(cluster, name)["spec"]["nodeName"] for name in "abc"}) == 1
    clock.advance(45)
    claim = cluster.get_resource_claim("team-a", "shared")
    assert [r["name"] for r in claim["status"]["reservedFor"]] == [pod_of(cluster, n)["metadata"]["name"] for n in "bc"]
    assert claim["status"]["allocation"]  # still held by the two left
    clock.advance(60)
    assert cluster.get_resource_claim("team-a", "shared")["status"] == {}  # the last one ended: deallocated
    assert_valid(cluster.get_resource_claim("team-a", "shared"))


def test_more_replicas_than_share_a_device_and_more_than_one_share_a_pod_are_refused(lab, people):
    rc = ResourceClass.objects.get(key=H100)
    errors = service_errors({"min_replicas": 2, "max_replicas": 5, "count": 1}, rc, None)
    assert errors == {"max_replicas": [
        f"The replicas of a service on {rc.display_name} share one device through one claim, which 4 users share: "
        "ask for at most 4 replicas, or pick a whole-GPU class."
    ]}  # fmt: skip
    problems = check_request(team=people["vision"], resource_class=rc, count=2, cpu_millicores=1000, memory_mb=1024,
                             image="python:3.12", user=people["alice"])  # fmt: skip
    assert problems["count"] == [
        f"Each pod of {rc.display_name} takes one share (1/4 of a device, time-slicing): ask for 1, not 2. For more "
        "of a GPU pick a whole-GPU class."
    ]


def test_a_service_submitted_on_the_shared_class_is_admitted_onto_one_gpu_and_a_second_workload_waits(
    lab, clock, people
):
    """Through submission and admission: the minimum of 4 replicas is one group of 4 shares on the node's one GPU; a
    batch job of one share then waits for a device of its own (its claim would need one), though quota has room."""
    rc = ResourceClass.objects.get(key=H100)
    Quota.objects.create(team=people["vision"], resource_class=rc, guaranteed=8, limit=8)
    service = inference_service(people["alice"], resource_class=rc, min_replicas=4, max_replicas=4)
    assert service.job.state == JobState.QUEUED and service.job.workers == 4
    for _ in range(4):
        cycle(lab, clock, 30)
    service.refresh_from_db()
    assert service.job.state == JobState.RUNNING
    pods = [p for p in lab.list_pods("team-vision") if p["metadata"]["labels"].get("gpu-portal.io/service")]
    assert len(pods) == 4 and {p["spec"]["nodeName"] for p in pods} == {"dra-h100-01"}
    (claim,) = lab.list_resource_claims("team-vision")
    assert len(claim["status"]["reservedFor"]) == 4
    batch = submit_job(people["alice"], resource_class=rc, count=1)
    cycle(lab, clock, 30)
    batch.refresh_from_db()
    assert batch.state == JobState.QUEUED and batch.wait_reason == "capacity"


def test_a_rollout_keeps_the_one_claim_and_a_lost_service_takes_it_along(lab, clock, people):
    from jobs.service.ops import update_service  # noqa: PLC0415

    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 4, 4)
    service = _service(people, 2)
    _admitted(service.job)
    for _ in range(5):
        cycle(lab, clock, 6)
    (claim,) = lab.list_resource_claims("team-vision")
    # A new image rolls the Deployment out: the new pods share the same claim (the class and count cannot change
    # under a running service, so the claim stays right); no second claim, no template.
    update_service(people["alice"], service, {"image": "nvcr.io/nvidia/pytorch:24.05-py3"})
    for _ in range(5):
        cycle(lab, clock, 6)
    pods = [p for p in lab.list_pods("team-vision") if p["metadata"]["labels"].get("gpu-portal.io/service")]
    assert {c["image"] for p in pods for c in p["spec"]["containers"]} == {"nvcr.io/nvidia/pytorch:24.05-py3"}
    (after,) = lab.list_resource_claims("team-vision")
    assert after["metadata"]["uid"] == claim["metadata"]["uid"]
    assert sorted(r["name"] for r in after["status"]["reservedFor"]) == sorted(p["metadata"]["name"] for p in pods)
    assert lab.list_resource_claim_templates("team-vision") == []
    # Its Deployment deleted behind the portal's back: the service is lost, and its claim does not stay behind.
    lab.delete_deployment("team-vision", "llm-chat")
    for _ in range(3):
        cycle(lab, clock, 6)
    service.job.refresh_from_db()
    assert service.job.state not in (JobState.RUNNING, JobState.ADMITTED)
    assert lab.list_resource_claims("team-vision") == []


def test_a_lost_service_on_an_unshared_class_takes_its_claim_template_along(lab, clock, people):
    update_class(people["admin"], ResourceClass.objects.get(key=H100), sharing_strategy="none", replicas=1)
    service = _service(people, 1)
    _admitted(service.job)
    for _ in range(5):
        cycle(lab, clock, 6)
    (template,) = lab.list_resource_claim_templates("team-vision")
    assert template["metadata"]["name"] == "llm-chat-gpus" and len(lab.list_resource_claims("team-vision")) == 1
    lab.delete_deployment("team-vision", "llm-chat")
    for _ in range(3):
        cycle(lab, clock, 6)
    assert lab.list_resource_claim_templates("team-vision") == [] and lab.list_resource_claims("team-vision") == []
