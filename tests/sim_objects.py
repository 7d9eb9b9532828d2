"""Builders of the simulated cluster's objects, as plain dicts (no database, no Django): the demo scenario and the
names it gives, scenario nodes, the small two-node scenario, a PersistentVolumeClaim, a batch/v1 Job as the portal
renders one, and lookups of a job's pod. The builders of the portal's rows are in tests/factories.py."""

from __future__ import annotations

from pathlib import Path

from cluster.base import MANAGED_BY_LABEL

#: The demo cluster every portal test starts from (the root conftest's ``cluster`` and ``inventory`` fixtures).
DEMO_SCENARIO = Path(__file__).resolve().parent.parent / "cluster" / "scenarios" / "demo.yaml"
#: The demo's H100 resource class, the one the builders and the demo quotas use.
H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
#: The demo's second cluster as an admin registers it (gpus.fleet.ClusterInput): the simulated GKE cluster of
#: cluster/scenarios/cloud.yaml.
CLOUD_CLUSTER = {"name": "cloud", "display_name": "GKE europe-west4", "region": "europe-west4",
                 "connection": "simulated", "sim_scenario": "cloud", "labels": {"tier": "cloud"}}  # fmt: skip
#: The demo's A10s, time-sliced 4 ways (each unit a quarter of a GPU).
A10 = "nvidia.com/gpu@NVIDIA-A10-SHARED"
#: The demo's node of 8 A100 80GB in MIG's mixed strategy (all-balanced).
MIG_NODE = "gpu-a100-mig-01"

GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


def h100_node(name: str, count: int = 8, **extra) -> dict:
    """A scenario node with ``count`` H100 80GB GPUs (8), 64 CPUs and 512 GiB; ``extra`` adds or replaces fields
    (labels, taint, arch: cluster/scenarios/demo.yaml lists them)."""
    return {"name": name, "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": count}, "cpu": 64, "memory": "512Gi"} | (
        extra
    )


SMALL = {
    "namespaces": ["team-a"],
    "nodes": [h100_node("gpu-a"), h100_node("gpu-b"), {"name": "cpu-a", "cpu": 16, "memory": "64Gi"}],
}


def claim(
    name: str, namespace: str = "team-vision", *, storage: str = "500Gi", modes=("ReadWriteMany",), **spec
) -> dict:
    """A PersistentVolumeClaim of ``storage`` (500Gi), ReadWriteMany, in team vision's namespace; ``spec`` adds
    fields (storageClassName, volumeName)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": storage}}, **spec},
    }


def job(
    name: str,
    gpus: int = 1,
    resource: str = "nvidia.com/gpu",
    namespace: str = "team-a",
    tolerate: bool = True,
    image: str = "nvcr.io/nvidia/pytorch:24.03-py3",
    annotations: dict | None = None,
    node_selector: dict | None = None,
    affinity: dict | None = None,
    deadline: int | None = None,
    backoff_limit: int | None = None,
    cpu: str = "4",
    memory: str = "16Gi",
) -> dict:
    pod_spec: dict = {
        "restartPolicy": "Never",
        "containers": [
            {
                "name": "main",
                "image": image,
                "command": ["python", "train.py"],
                "resources": {"limits": {resource: str(gpus), "cpu": cpu, "memory": memory}},
            }
        ],
    }
    if tolerate:
        pod_spec["tolerations"] = [GPU_TOLERATION]
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if affinity:
        pod_spec["affinity"] = affinity
    spec: dict = {
        "template": {"metadata": {"labels": {MANAGED_BY_LABEL: "gpu-portal", "portal-job": name}}, "spec": pod_spec}
    }
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if backoff_limit is not None:
        spec["backoffLimit"] = backoff_limit
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {MANAGED_BY_LABEL: "gpu-portal"},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def pod_of(cluster, name: str, namespace: str = "team-a") -> dict:
    pods = [p for p in cluster.list_pods(namespace) if p["metadata"]["labels"].get("job-name") == name]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]


def scheduled_condition(pod: dict) -> dict:
    return next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
