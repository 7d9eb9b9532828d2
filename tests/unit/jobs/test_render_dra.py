"""Workloads of DRA classes ask for their GPUs through ResourceClaimTemplates (issue 33, item 3): every kind renders
its claim template and pod claims, each object valid against Kubernetes 1.37's schema (tests/k8s_schema.py, strict);
the selectors match the simulated driver's devices of the class and no other; a gang in one NVLink domain gets a
ComputeDomain and its channel claims; pools that map nvidia.com/gpu onto DRA keep the limit; and a batch job and a
gang launched through the cycle get their claims allocated by the simulated scheduler on their chosen nodes."""

from __future__ import annotations

import pytest

from cluster.base import forms_for
from cluster.connect import discover
from cluster.dra_cel import device_variable, selector_matches
from cluster.sim import SimulatedCluster
from gpus.choices import GpuRequestMode
from gpus.models import Cluster, Node, NodePool, ResourceClass, settings_cluster_pk
from gpus.reconcile import sync_inventory
from jobs import actions, kinds
from jobs.choices import JobKind, JobState
from jobs.dra_claims import render_claim_template, selectors
from jobs.models import Job, Notebook
from jobs.models.service import InferenceService
from jobs.service import launch as service_launch
from tests.factories import cycle, placed_job, run_until
from tests.k8s_schema import assert_valid

H100 = "dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3"
MIG_1G = "dra:mig.nvidia.com/1g.5gb@NVIDIA-A100-SXM4-40GB"
CLIQUE = "a1b2c3d4-0000-4000-8000-000000000001.1"
#: Two HGX H100 in one NVLink domain (with the ComputeDomain plugin) and an A100 40GB with dynamic MIG.
SCENARIO = {
    "server_version": "v1.34.1",
    "kubernetes_version": "v1.34.1",
    "nodes": [
        *({"name": name, "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 8}, "clique": CLIQUE,
           "cpu": 224, "memory": "2Ti",
           "dra": {"compute_domains": True, "feature_gates": ["TimeSlicingSettings", "MPSSupport"]}}
          for name in ("dra-h100-01", "dra-h100-02")),
        {"name": "dra-a100-01", "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1}, "mig": {"strategy": "mixed"},
         "dra": {"mig": "dynamic"}, "cpu": 64, "memory": "512Gi"},
    ],
}  # fmt: skip


@pytest.fixture
def lab(db, tmp_path, clock, people):
    """The DRA cluster above as the cluster in settings, synced and checked (its capabilities: DRA, NVIDIA's device
    classes); its DRA classes shown to users."""
    sim = SimulatedCluster(tmp_path / "lab.json", scenario=SCENARIO, clock=clock)
    sync_inventory(sim)
    Cluster.objects.filter(pk=settings_cluster_pk()).update(capabilities=discover(sim).as_dict())
    ResourceClass.objects.filter(key__startswith="dra:").update(hidden=False)
    return sim


def _objects(rendered: list[dict], kind: str) -> list[dict]:
    return [obj for obj in rendered if obj["kind"] == kind]


def _valid_in_the_teams_namespace(rendered: list[dict]) -> None:
    """Every object is valid against Kubernetes 1.37 (the ComputeDomain against its CRD) and in the team's namespace."""
    assert_valid(*rendered)
    assert {obj["metadata"]["namespace"] for obj in rendered} == {"team-vision"}


def _pod(workload: dict) -> dict:
    return workload["spec"]["template"]["spec"]


def _matching(sim, rc: ResourceClass) -> set[tuple[str, str]]:
    """(node, device) of every published device the class's selectors select."""
    found = set()
    for item in sim.list_resource_slices(driver="gpu.nvidia.com"):
        for device in item["spec"].get("devices") or []:
            variable = device_variable("gpu.nvidia.com", device)
            if all(selector_matches(expression, variable) for expression in selectors(rc)):
                found.add((item["spec"]["nodeName"], device["name"]))
    return found


def test_a_batch_job_claims_its_gpus_from_a_template(lab, people):
    job = placed_job(people["alice"], H100, node_name="dra-h100-01", count=2)
    rendered = kinds.for_job(job).render(job)
    assert [obj["kind"] for obj in rendered] == ["ResourceClaimTemplate", "Job"]
    _valid_in_the_teams_namespace(rendered)
    template, workload = rendered
    assert template["metadata"] == {
        "name": f"{job.workload_name}-gpus", "namespace": "team-vision",
        "labels": {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/team": "vision",
                   "gpu-portal.io/job-id": str(job.pk)},
    }  # fmt: skip
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["name"] == "gpus"
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"
    assert request["exactly"]["allocationMode"] == "ExactCount" and request["exactly"]["count"] == 2
    assert "config" not in template["spec"]["spec"]["devices"]
    pod = _pod(workload)
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": f"{job.workload_name}-gpus"}]
    container = pod["containers"][0]
    assert container["resources"]["claims"] == [{"name": "gpus"}]
    assert not any(name.startswith("nvidia.com/") for name in container["resources"]["limits"])
    # The claim picks the product; the pod is pinned by node name only.
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["dra-h100-01"]}]}
    # The selectors select exactly the H100s the driver publishes.
    h100 = ResourceClass.objects.get(key=H100)
    assert _matching(lab, h100) == {(f"dra-h100-0{n}", f"gpu-{i}") for n in (1, 2) for i in range(8)}


def test_selectors_are_built_from_the_class_and_quoted(lab):
    mig = ResourceClass.objects.get(key=MIG_1G)
    assert selectors(mig) == [
        "device.attributes[\"gpu.nvidia.com\"].productName.matches(\"^NVIDIA[ -]A100[ -]SXM4[ -]40GB$\")",
        "\"profile\" in device.attributes[\"gpu.nvidia.com\"] && "
        "device.attributes[\"gpu.nvidia.com\"].profile == \"1g.5gb\"",
    ]  # fmt: skip
    assert {device for _, device in _matching(lab, mig)} == {
        device["name"]
        for item in lab.list_resource_slices(node_name="dra-a100-01")
        for device in item["spec"].get("devices") or []
        if (device.get("attributes") or {}).get("profile", {}).get("string") == "1g.5gb"
    }
    for label in ('A100"||true||"', "A100\\", "NVIDIA H100"):
        with pytest.raises(ValueError, match="not a label value"):
            selectors(ResourceClass(key="dra:gpu.nvidia.com@x", resource_name="gpu.nvidia.com", product_label=label))
    odd = ResourceClass(key="dra:mig.nvidia.com/x@A100", resource_name="mig.nvidia.com", product_label="A100",
                        kind="mig", profile='1g.5gb" || true')  # fmt: skip
    with pytest.raises(ValueError, match="not a MIG profile"):
        selectors(odd)


def test_a_gang_in_one_nvlink_domain_gets_a_compute_domain(lab, people):
    nodes = ["dra-h100-01", "dra-h100-02"]
    job = placed_job(people["alice"], H100, kind=JobKind.DISTRIBUTED, workers=2, count=4, node_name=nodes[0],
                     node_names=nodes)  # fmt: skip
    kind = kinds.for_job(job)
    rendered = kind.render(job, forms_for("v1.34.1"))
    assert [obj["kind"] for obj in rendered] == ["Service", "ResourceClaimTemplate", "ComputeDomain", "Job"]
    _valid_in_the_teams_namespace(rendered)
    base = job.workload_name
    (domain,) = _objects(rendered, "ComputeDomain")
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert domain["metadata"]["namespace"] == "team-vision"
    assert domain["spec"] == {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": f"{base}-channel"}}}
    (template,) = _objects(rendered, "ResourceClaimTemplate")
    assert template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] == 4
    pod = _pod(_objects(rendered, "Job")[0])
    assert pod["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": f"{base}-gpus"},
        {"name": "channel", "resourceClaimTemplateName": f"{base}-channel"},
    ]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": "gpus"}, {"name": "channel"}]
    per_rank = kind.render(job, forms_for("v1.20.2"))
    assert [obj["kind"] for obj in per_rank] == ["Service", "ResourceClaimTemplate", "ComputeDomain", "Job", "Job"]
    assert all(_pod(w)["resourceClaims"] == pod["resourceClaims"] for w in _objects(per_rank, "Job"))
    assert kind.attempt_objects(job) == [
        ("Service", base), ("ResourceClaimTemplate", f"{base}-gpus"), ("ComputeDomain", base)
    ]  # fmt: skip
    # A cluster without NVIDIA's ComputeDomain plugin (no channel DeviceClass at its last check): GPU claims only.
    checked = Cluster.objects.get(pk=settings_cluster_pk()).capabilities
    classes = [name for name in checked["dra_device_classes"] if not name.startswith("compute-domain")]
    Cluster.objects.filter(pk=settings_cluster_pk()).update(capabilities=checked | {"dra_device_classes": classes})
    assert [obj["kind"] for obj in kind.render(job, forms_for("v1.34.1"))] == [
        "Service",
        "ResourceClaimTemplate",
        "Job",
    ]
    # Nodes in different NVLink domains (or none): GPU claims only.
    Cluster.objects.filter(pk=settings_cluster_pk()).update(capabilities=checked)
    Node.objects.filter(name="dra-h100-02").update(clique="")
    apart = kind.render(job, forms_for("v1.34.1"))
    assert [obj["kind"] for obj in apart] == ["Service", "ResourceClaimTemplate", "Job"]
    assert [c["name"] for c in _pod(apart[-1])["resourceClaims"]] == ["gpus"]


def test_a_notebook_on_a_mig_slice(lab, people):
    rc = ResourceClass.objects.get(key=MIG_1G)
    team = people["vision"]
    notebook = Notebook.objects.create(
        team=team, owner=people["alice"], resource_class=rc, name="explore", count=1, cpu_millicores=4000,
        memory_mb=16384, image="quay.io/jupyter/pytorch-notebook:cuda12-2024-09-30", ttl_seconds=8 * 3600,
        idle_timeout_seconds=3600, token_hash="sha256:0123456789ab:" + "f" * 64,
    )  # fmt: skip
    job = Job.objects.create(
        team=team, owner=people["alice"], resource_class=rc, kind=JobKind.NOTEBOOK, notebook=notebook,
        name=notebook.name, image=notebook.image, count=1, cpu_millicores=4000, memory_mb=16384,
        max_runtime_seconds=25 * 3600, node_name="dra-a100-01",
    )  # fmt: skip
    job.workload_name = job.default_workload_name()
    rendered = kinds.for_job(job).render(job)
    assert [obj["kind"] for obj in rendered] == ["PersistentVolumeClaim", "Service", "ResourceClaimTemplate", "Job"]
    _valid_in_the_teams_namespace(rendered)
    (request,) = rendered[2]["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "mig.nvidia.com" and request["exactly"]["count"] == 1
    assert [s["cel"]["expression"] for s in request["exactly"]["selectors"]] == selectors(rc)
    assert _pod(rendered[3])["resourceClaims"][0]["resourceClaimTemplateName"] == f"{job.workload_name}-gpus"


def test_a_time_sliced_service_gets_nvidias_gpu_config(lab, people):
    ResourceClass.objects.filter(key=H100).update(sharing_strategy="time-slicing")
    # Written directly, as admission leaves it (submission's counting of DRA devices is not this test's business).
    job = placed_job(people["alice"], H100, kind=JobKind.SERVICE, name="llm-chat", workers=2, count=1, node_name="")
    service = InferenceService.objects.create(team=people["vision"], owner=people["alice"], name="llm-chat", job=job,
                                              port=8000, min_replicas=2, max_replicas=4)  # fmt: skip
    job = service.job
    rendered = kinds.for_job(job).render(job)
    assert [obj["kind"] for obj in rendered] == [
        "ResourceClaimTemplate", "Service", "Deployment", "HorizontalPodAutoscaler"
    ]  # fmt: skip
    _valid_in_the_teams_namespace(rendered[:3])
    assert rendered[3]["metadata"]["namespace"] == "team-vision"
    template, _, deployment, _ = rendered
    assert template["metadata"]["name"] == f"{service.name}-gpus"
    assert template["spec"]["spec"]["devices"]["config"] == [
        {
            "requests": ["gpus"],
            "opaque": {
                "driver": "gpu.nvidia.com",
                "parameters": {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                               "sharing": {"strategy": "TimeSlicing"}},
            },
        }
    ]  # fmt: skip
    pod = _pod(deployment)
    assert pod["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": f"{service.name}-gpus"}]
    assert "nodeAffinity" not in pod["affinity"] or "required" not in str(pod["affinity"]["nodeAffinity"])
    assert not any(name.startswith("nvidia.com/") for name in pod["containers"][0]["resources"]["limits"])
    assert service_launch.render_gpu_claim_template(service, job) == template


def test_mps_on_a_mig_class_is_a_mig_device_config_and_time_slicing_none(lab):
    rc = ResourceClass.objects.get(key=MIG_1G)
    rc.sharing_strategy = "mps"
    config = render_claim_template(rc, 1, "t", "team-vision", {})["spec"]["spec"]["devices"]["config"]
    assert config[0]["opaque"]["parameters"] == {
        "apiVersion": "resource.nvidia.com/v1beta1", "kind": "MigDeviceConfig", "sharing": {"strategy": "MPS"}
    }  # fmt: skip
    rc.sharing_strategy = "time-slicing"  # the driver: time-slicing has no effect on MIG devices
    assert "config" not in render_claim_template(rc, 1, "t", "team-vision", {})["spec"]["spec"]["devices"]


def test_pools_that_map_nvidia_gpu_onto_dra_keep_the_limit(lab, people):
    pool = Node.objects.get(name="dra-h100-01").pool
    NodePool.objects.create(cluster_id=settings_cluster_pk(), name=pool, gpu_request=GpuRequestMode.DRA_EXTENDED)
    job = placed_job(people["alice"], H100, node_name="dra-h100-01", count=2)
    rendered = kinds.for_job(job).render(job)
    assert [obj["kind"] for obj in rendered] == ["Job"]
    pod = _pod(rendered[0])
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "resourceClaims" not in pod and "claims" not in pod["containers"][0]["resources"]
    assert_valid(*rendered)
    # A MIG class has no extended resource name: it still claims.
    mig = placed_job(people["alice"], MIG_1G, node_name="dra-a100-01", count=1)
    assert [obj["kind"] for obj in kinds.for_job(mig).render(mig)] == ["ResourceClaimTemplate", "Job"]


def _admitted(job: Job) -> Job:
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, workload_name=job.workload_name)
    job.refresh_from_db()
    return job


def test_a_batch_job_launched_on_the_dra_cluster_gets_its_claim_allocated(lab, clock, people):
    job = _admitted(placed_job(people["alice"], H100, node_name="dra-h100-02", count=2,
                               command=["sleep", "3600"]))  # fmt: skip
    job = run_until(lab, clock, job, JobState.RUNNING)
    (pod,) = [
        p for p in lab.list_pods("team-vision") if p["metadata"]["labels"].get("gpu-portal.io/job-id") == str(job.pk)
    ]
    assert pod["spec"]["nodeName"] == "dra-h100-02"
    (claim,) = lab.list_resource_claims("team-vision")
    results = claim["status"]["allocation"]["devices"]["results"]
    assert len(results) == 2 and {r["pool"] for r in results} == {"dra-h100-02"}
    assert {r["request"] for r in results} == {"gpus"}
    assert claim["status"]["reservedFor"][0]["name"] == pod["metadata"]["name"]
    assert [t["metadata"]["name"] for t in lab.list_resource_claim_templates("team-vision")] == [
        f"{job.workload_name}-gpus"
    ]
    # Cancelled: the workload goes, and the template with it.
    actions.cancel_job(people["alice"], job)
    cycle(lab, clock, 6)
    assert lab.list_resource_claim_templates("team-vision") == []


def test_a_gang_launched_in_an_nvlink_domain_gets_gpus_and_channels(lab, clock, people):
    nodes = ["dra-h100-01", "dra-h100-02"]
    job = _admitted(placed_job(people["alice"], H100, kind=JobKind.DISTRIBUTED, workers=2, count=4,
                               node_name=nodes[0], node_names=nodes, command=["sleep", "3600"]))  # fmt: skip
    job = run_until(lab, clock, job, JobState.RUNNING)
    (domain,) = lab.list_compute_domains("team-vision")
    assert domain["status"]["status"] == "Ready"
    assert sorted(n["name"] for n in domain["status"]["nodes"]) == nodes
    claims = lab.list_resource_claims("team-vision")
    gpus = [c for c in claims if c["spec"]["devices"]["requests"][0]["name"] == "gpus"]
    assert sorted(r["pool"] for c in gpus for r in c["status"]["allocation"]["devices"]["results"]) == (
        [nodes[0]] * 4 + [nodes[1]] * 4
    )
    assert len(claims) == 4  # a GPU claim and a channel claim per rank
    assert_valid(*lab.list_compute_domains("team-vision"))
    actions.cancel_job(people["alice"], job)
    cycle(lab, clock, 6)
    assert lab.list_compute_domains("team-vision") == []
    assert lab.list_resource_claim_templates("team-vision") == []


def test_a_time_sliced_service_launched_on_the_dra_cluster_runs_its_replicas_on_claimed_gpus(lab, clock, people):
    ResourceClass.objects.filter(key=H100).update(sharing_strategy="time-slicing")
    nodes = ["dra-h100-01", "dra-h100-02"]
    job = placed_job(people["alice"], H100, kind=JobKind.SERVICE, name="llm-chat", workers=2, count=1,
                     node_name=nodes[0], node_names=nodes, command=["sleep", "3600"])  # fmt: skip
    InferenceService.objects.create(team=people["vision"], owner=people["alice"], name="llm-chat", job=job, port=8000,
                                    min_replicas=2, max_replicas=4)  # fmt: skip
    job = _admitted(job)
    for _ in range(5):
        cycle(lab, clock, 6)
    pods = [p for p in lab.list_pods("team-vision") if p["metadata"]["labels"].get("gpu-portal.io/service")]
    assert len(pods) == 2 and all(p["status"]["phase"] == "Running" for p in pods)
    claims = lab.list_resource_claims("team-vision")
    assert len(claims) == 2
    for claim in claims:
        allocation = claim["status"]["allocation"]["devices"]
        assert len(allocation["results"]) == 1
        (config,) = allocation["config"]
        assert config["source"] == "FromClaim"
        assert config["opaque"]["parameters"]["sharing"] == {"strategy": "TimeSlicing"}
    assert [t["metadata"]["name"] for t in lab.list_resource_claim_templates("team-vision")] == ["llm-chat-gpus"]


def test_a_job_whose_workload_vanished_loses_its_claim_template_too(lab, clock, people):
    job = _admitted(placed_job(people["alice"], H100, node_name="dra-h100-01", count=1, command=["sleep", "3600"]))
    job = run_until(lab, clock, job, JobState.RUNNING)
    assert len(lab.list_resource_claim_templates("team-vision")) == 1
    lab.delete_workload("team-vision", job.workload_name)
    cycle(lab, clock, 6)
    job.refresh_from_db()
    assert job.state == JobState.LOST
    assert lab.list_resource_claim_templates("team-vision") == []
