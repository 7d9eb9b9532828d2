"""KubernetesBackend's DRA calls (cluster/kubernetes_dra.py) against the test control plane (v1.20.2), which predates
resource.k8s.io: discovery says the API is not served and every read answers empty instead of failing, so the
inventory of a device-plugin cluster goes on as before; deleting what a workload claims from answers "gone". Where
stand-in CRDs serve the paths, ResourceClaimTemplates and ComputeDomains are created once (a second create returns
the first) and deleted."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config

from cluster.base import Invalid, NotFound
from cluster.connect import discover
from cluster.kubernetes import KubernetesBackend

from .support import wait_for

pytestmark = pytest.mark.kube


def test_dra_reads_are_empty_where_resource_k8s_io_is_not_served(kube_backend):
    assert "resource.k8s.io" not in kube_backend.api_groups()
    assert kube_backend.resource_api_versions() == []
    assert kube_backend.list_device_classes() == []
    assert kube_backend.list_resource_slices() == []
    assert kube_backend.list_resource_slices(node_name="gpu-node", driver="gpu.nvidia.com") == []
    assert kube_backend.list_resource_claims() == []
    assert kube_backend.list_resource_claims("default") == []
    found = discover(kube_backend)
    assert (found.dra, found.dra_v1, found.dra_versions, found.dra_device_classes) == (False, False, (), ())
    assert found.as_dict()["dra_versions"] == []
    assert kube_backend.delete_resource_claim_template("default", "gpj-1-train-gpus") is False
    assert kube_backend.delete_compute_domain("default", "gpj-1-train") is False
    with pytest.raises(NotFound):
        kube_backend.apply_resource_claim_template(_template("default"))


def _template(namespace: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpj-1-train-gpus", "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com",
                                                                                 "count": 2}}]}}},
    }  # fmt: skip


def _stand_in(kind: str, plural: str, scope: str, group: str = "resource.k8s.io", version: str = "v1") -> dict:
    """A CRD serving ``plural`` at resource.k8s.io/v1, the path the built-in API (Kubernetes 1.34+) serves it at (or
    at ``group``/``version``: NVIDIA's ComputeDomain). A *.k8s.io group needs the api-approved annotation;
    "unapproved, ..." is what a test may write there."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{group}",
            "annotations": {"api-approved.kubernetes.io": "unapproved, a test stand-in for the built-in DRA API"},
        },
        "spec": {
            "group": group,
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": version,
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                        }
                    },
                }
            ],
        },
    }


def test_dra_reads_go_through_the_generic_client_where_resource_k8s_io_v1_is_served(second_controlplane):
    # v1.20 has no built-in resource.k8s.io, so CRDs stand in for two of its kinds on a control plane of this module
    # alone: the paths, discovery and list responses are the API server's own; only the objects' schemas are open.
    api_client = new_client_from_config(config_file=str(second_controlplane.kubeconfig_path))
    extensions = client.ApiextensionsV1Api(api_client)
    extensions.create_custom_resource_definition(_stand_in("DeviceClass", "deviceclasses", "Cluster"))
    extensions.create_custom_resource_definition(_stand_in("ResourceClaim", "resourceclaims", "Namespaced"))
    extensions.create_custom_resource_definition(
        _stand_in("ResourceClaimTemplate", "resourceclaimtemplates", "Namespaced")
    )
    extensions.create_custom_resource_definition(
        _stand_in("ComputeDomain", "computedomains", "Namespaced", "resource.nvidia.com", "v1beta1")
    )
    crds = ("deviceclasses.resource.k8s.io", "resourceclaims.resource.k8s.io",
            "resourceclaimtemplates.resource.k8s.io", "computedomains.resource.nvidia.com")  # fmt: skip

    def established():
        return all(
            any(
                c.type == "Established" and c.status == "True"
                for c in extensions.read_custom_resource_definition(name).status.conditions or []
            )
            for name in crds
        )

    wait_for("the stand-in CRDs to be established", established)
    custom = client.CustomObjectsApi(api_client)
    for name in ("gpu.nvidia.com", "mig.nvidia.com", "example.com-fpga"):
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": {}}
        custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", body)
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c1"}, "spec": {}}
    custom.create_namespaced_custom_object("resource.k8s.io", "v1", "default", "resourceclaims", claim)

    backend = KubernetesBackend.from_kubeconfig(str(second_controlplane.kubeconfig_path))
    assert backend.resource_api_versions() == ["resource.k8s.io/v1"]
    classes = backend.list_device_classes()
    assert sorted(c["metadata"]["name"] for c in classes) == ["example.com-fpga", "gpu.nvidia.com", "mig.nvidia.com"]
    assert {(c["apiVersion"], c["kind"]) for c in classes} == {("resource.k8s.io/v1", "DeviceClass")}
    assert all("managedFields" not in c["metadata"] for c in classes)
    assert [c["metadata"]["name"] for c in backend.list_resource_claims("default")] == ["c1"]
    assert [c["metadata"]["name"] for c in backend.list_resource_claims()] == ["c1"]
    assert backend.list_resource_claims("kube-system") == []
    found = discover(backend)
    assert (found.dra, found.dra_v1, found.dra_device_classes) == (True, True, ("gpu.nvidia.com", "mig.nvidia.com"))

    # What a workload claims from: created once (a second create answers with the first), then deleted.
    made = backend.apply_resource_claim_template(_template("default"))
    again = backend.apply_resource_claim_template({**_template("default"), "spec": {"spec": {}}})
    assert made["metadata"]["uid"] == again["metadata"]["uid"] and again["spec"] == _template("default")["spec"]
    channel = {"resourceClaimTemplate": {"name": "gpj-1-train-channel"}}
    domain = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
              "metadata": {"name": "gpj-1-train", "namespace": "default"},
              "spec": {"numNodes": 2, "channel": channel}}  # fmt: skip
    assert backend.apply_compute_domain(domain)["spec"] == domain["spec"]
    assert backend.apply_compute_domain(domain)["metadata"]["name"] == "gpj-1-train"
    assert backend.delete_resource_claim_template("default", "gpj-1-train-gpus") is True
    assert backend.delete_resource_claim_template("default", "gpj-1-train-gpus") is False
    assert backend.delete_compute_domain("default", "gpj-1-train") is True
    assert backend.delete_compute_domain("default", "gpj-1-train") is False
    with pytest.raises(Invalid):
        backend.apply_compute_domain({**domain, "metadata": {"name": "no-namespace"}})
    api_client.close()
