"""Builders of Dynamic Resource Allocation objects for the simulated cluster's tests, as plain dicts: a small DRA
scenario, requests, ResourceClaimTemplates and ResourceClaims, a Job whose pod uses claims, ComputeDomains."""

from __future__ import annotations

from cluster.base import MANAGED_BY_LABEL
from cluster.sim import DURATION_ANNOTATION
from tests.sim_objects import GPU_TOLERATION

#: Two H100s (ComputeDomain plugin too), two L4s and one A100 40GB with dynamic MIG, all through NVIDIA's DRA
#: driver, on a 1.34 API server.
DRA_SMALL = {
    "server_version": "v1.34.1",
    "kubernetes_version": "v1.34.1",
    "namespaces": ["team-a"],
    "nodes": [
        {"name": "dra-h100", "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 2}, "dra": {"compute_domains": True},
         "clique": "c0ffee00-0000-4000-8000-000000000001.1"},
        {"name": "dra-l4", "gpu": {"product": "NVIDIA L4", "count": 2}, "dra": {}},
        {"name": "dra-a100", "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1}, "mig": {"strategy": "mixed"},
         "dra": {"mig": "dynamic"}},
    ],
}  # fmt: skip


def exactly(device_class: str = "gpu.nvidia.com", count: int | None = None, *selectors: str, **extra) -> dict:
    """An ExactDeviceRequest of ``device_class`` with CEL ``selectors``; ``count`` omitted means one."""
    request: dict = {"deviceClassName": device_class, **extra}
    if count is not None:
        request["count"] = count
    if selectors:
        request["selectors"] = [{"cel": {"expression": expression}} for expression in selectors]
    return request


def claim_spec(*requests: tuple[str, dict], config: list | None = None, first_available: dict | None = None) -> dict:
    """A ResourceClaimSpec: ``requests`` as (name, ExactDeviceRequest); ``first_available`` {name: [subrequests]}."""
    listed = [{"name": name, "exactly": request} for name, request in requests]
    for name, subrequests in (first_available or {}).items():
        listed.append({"name": name, "firstAvailable": subrequests})
    devices: dict = {"requests": listed}
    if config:
        devices["config"] = config
    return {"devices": devices}


def claim_template(name: str, spec: dict, namespace: str = "team-a") -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"spec": spec},
    }


def resource_claim(name: str, spec: dict, namespace: str = "team-a") -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def time_slicing(interval: str = "Long") -> dict:
    """NVIDIA's opaque GpuConfig asking for time-slicing."""
    return {
        "opaque": {
            "driver": "gpu.nvidia.com",
            "parameters": {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
            },
        }
    }


def dra_job(
    name: str,
    templates: dict[str, str],
    namespace: str = "team-a",
    seconds: int | None = None,
    claims: dict | None = None,
) -> dict:
    """A Job whose pod uses ResourceClaims: ``templates`` {pod claim name: template name}, ``claims`` {pod claim
    name: claim name}; every container uses every claim. Runs ``seconds`` (until deleted without)."""
    pod_claims = [{"name": claim, "resourceClaimTemplateName": template} for claim, template in templates.items()]
    pod_claims += [{"name": claim, "resourceClaimName": existing} for claim, existing in (claims or {}).items()]
    metadata: dict = {"labels": {MANAGED_BY_LABEL: "gpu-portal"}}
    if seconds is not None:
        metadata["annotations"] = {DURATION_ANNOTATION: str(seconds)}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {MANAGED_BY_LABEL: "gpu-portal"}},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": metadata,
                "spec": {
                    "restartPolicy": "Never",
                    "tolerations": [GPU_TOLERATION],
                    "resourceClaims": pod_claims,
                    "containers": [
                        {
                            "name": "main",
                            "image": "nvcr.io/nvidia/pytorch:24.03-py3",
                            "command": ["python", "train.py"],
                            "resources": {
                                "limits": {"cpu": "4", "memory": "16Gi"},
                                "claims": [{"name": claim["name"]} for claim in pod_claims],
                            },
                        }
                    ],
                },
            },
        },
    }


def compute_domain(name: str, template: str, namespace: str = "team-a", nodes: int = 0) -> dict:
    return {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"numNodes": nodes, "channel": {"resourceClaimTemplate": {"name": template}}},
    }
