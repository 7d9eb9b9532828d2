"""Rendering an inference service (jobs/service/render.py): golden files for one service's Deployment, Service and
HorizontalPodAutoscaler (both autoscaling API versions), and the pod guarantees every workload has. Regenerate the
golden files with UPDATE_GOLDEN=1 after an intended change and review the diff."""

from __future__ import annotations

import pytest
from django.test import override_settings

from cluster.base import AUTOSCALING_V2, AUTOSCALING_V2BETA2
from jobs.render import RENDERED_VOLUME_SOURCES
from jobs.service.render import render_deployment, render_hpa, render_service
from tests.factories import service_spec
from tests.golden import assert_golden


@override_settings(PORTAL_RUNTIME_CLASS="nvidia", PORTAL_PREEMPTION_GRACE=60, PORTAL_SCRATCH_GIB=100,
                   PORTAL_SERVICE_POOL_LABEL="gpu-portal.io/pool=inference",
                   PORTAL_SERVICE_POOL_TAINT="gpu-portal.io/pool=inference:NoSchedule")  # fmt: skip
@pytest.mark.parametrize(("api", "golden"), [(AUTOSCALING_V2BETA2, "service-llm-v2beta2.yaml"),
                                              (AUTOSCALING_V2, "service-llm-v2.yaml")])  # fmt: skip
def test_golden_service(api, golden):
    spec = service_spec()
    assert_golden(golden, [render_deployment(spec), render_service(spec), render_hpa(spec, api)])


def test_the_pods_never_escalate_and_stay_in_the_team_namespace():
    deployment = render_deployment(service_spec())
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["metadata"]["namespace"] == "team-vision"
    assert not any(pod[field] for field in ("hostNetwork", "hostPID", "hostIPC"))
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    for volume in pod["volumes"]:
        assert set(volume) - {"name"} <= RENDERED_VOLUME_SOURCES
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_replicas_start_at_the_minimum_and_spread_over_nodes():
    deployment = render_deployment(service_spec(min_replicas=3))
    assert deployment["spec"]["replicas"] == 3
    terms = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in deployment["spec"]["selector"]["matchLabels"].items())


def test_without_the_pool_or_surge():
    deployment = render_deployment(service_spec(dedicated_pool=False, max_surge=0, liveness=None))
    pod = deployment["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and len(pod["tolerations"]) == 1
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    assert "livenessProbe" not in pod["containers"][0]


def test_hpa_metrics_and_cap():
    cpu = render_hpa(service_spec(metric="cpu", metric_target="60"), AUTOSCALING_V2, max_replicas=4)
    assert cpu["spec"]["metrics"] == [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}}}
    ]
    assert cpu["spec"]["maxReplicas"] == 4
    assert render_hpa(service_spec(), AUTOSCALING_V2, max_replicas=1)["spec"]["maxReplicas"] == 2  # never below the min
    assert render_hpa(service_spec(), AUTOSCALING_V2, max_replicas=60)["spec"]["maxReplicas"] == 6  # nor above the max
    external = render_hpa(service_spec(metric="queue_depth", metric_external=True), AUTOSCALING_V2BETA2)
    assert external["spec"]["metrics"][0]["type"] == "External"
    with pytest.raises(ValueError):
        render_hpa(service_spec(), "autoscaling/v1")


def test_replicas_find_their_gpus_on_a_managed_pool_without_gpu_feature_discovery():
    """A GKE pool's nodes carry the accelerator type, not GFD's product label: the node affinity takes either, so a
    service's replicas are scheduled on a managed cluster of the fleet too (the simulated scheduler judges it)."""
    from cluster.sim.selectors import node_affinity_matches

    spec = render_deployment(service_spec(dedicated_pool=False))["spec"]["template"]["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    keys = {term["matchExpressions"][0]["key"]: term["matchExpressions"][0]["values"] for term in terms}
    assert keys["nvidia.com/gpu.product"] == ["NVIDIA-H100-80GB-HBM3"]
    assert keys["cloud.google.com/gke-accelerator"] == ["nvidia-h100-80gb", "nvidia-h100-mega-80gb"]
    gke = {"metadata": {"name": "gke-a3", "labels": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}}}
    l4 = {"metadata": {"name": "gke-g2", "labels": {"cloud.google.com/gke-accelerator": "nvidia-l4"}}}
    gfd = {"metadata": {"name": "h100", "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}}
    assert node_affinity_matches(spec, gke) and node_affinity_matches(spec, gfd)
    assert not node_affinity_matches(spec, l4)
