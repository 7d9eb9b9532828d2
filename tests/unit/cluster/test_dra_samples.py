"""Sample DRA objects of the kinds the portal renders, held to Kubernetes 1.37's schemas (tests/k8s_schema.py):
claim templates for a product, a MIG profile, time-slicing and MPS, a prioritized list, and workloads that use them."""

import pytest

from tests.dra_objects import claim_spec, claim_template, compute_domain, dra_job, exactly, time_slicing
from tests.k8s_schema import assert_valid, schema_problems

H100 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
MPS = {
    "opaque": {
        "driver": "gpu.nvidia.com",
        "parameters": {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 50,
                                                         "defaultPinnedDeviceMemoryLimit": "10Gi"}},
        },
    }
}  # fmt: skip


def _subrequest(name, *selectors, count=1):
    return {**exactly("gpu.nvidia.com", count, *selectors), "name": name}


SAMPLES = {
    "batch": claim_spec(("gpu", exactly("gpu.nvidia.com", 4, H100))),
    "mig-notebook": claim_spec(
        ("mig", exactly("mig.nvidia.com", None, "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"))
    ),
    "time-sliced": claim_spec(("gpu", exactly("gpu.nvidia.com", None, H100)), config=[time_slicing("Medium")]),
    "mps": claim_spec(("gpu", exactly("gpu.nvidia.com")), config=[{**MPS, "requests": ["gpu"]}]),
    "h100-else-a100": claim_spec(
        first_available={
            "gpu": [
                _subrequest("h100", H100, count=2),
                _subrequest("a100", "device.attributes['gpu.nvidia.com'].productName.startsWith('NVIDIA A100')"),
            ]
        }
    ),
    "whole-node": claim_spec(("gpus", exactly("gpu.nvidia.com", None, H100, allocationMode="All"))),
}


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_sample_claim_templates_are_valid(name):
    assert_valid(claim_template(name, SAMPLES[name]))


def test_workloads_with_claims_are_valid():
    job = dra_job("gang-0", {"gpu": "batch", "channel": "nvl-channel"})
    pod_template = job["spec"]["template"]
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat", "namespace": "team-a"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "chat"}},
                 "template": {**pod_template, "metadata": {"labels": {"app": "chat"}}}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "team-a"},
        "spec": pod_template["spec"],
    }
    assert_valid(job, deployment, pod, compute_domain("nvl", "nvl-channel", nodes=2))


def test_a_misspelt_request_field_is_caught():
    spec = claim_spec(("gpu", exactly()))
    spec["devices"]["requests"][0]["exactly"]["devicClassName"] = "gpu.nvidia.com"
    assert schema_problems(claim_template("typo", spec)) == [
        "ResourceClaimTemplate/typo: spec.spec.devices.requests.0.exactly: Additional properties are not allowed "
        "('devicClassName' was unexpected)"
    ]
