"""KubernetesBackend's DRA reads (cluster/kubernetes_dra.py) against the test control plane (v1.20.2), which predates
resource.k8s.io: discovery says the API is not served and every read answers empty instead of failing, so the
inventory of a device-plugin cluster goes on as before."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.config import new_client_from_config

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


def _stand_in(kind: str, plural: str, scope: str) -> dict:
    """A CRD serving ``plural`` at resource.k8s.io/v1, the path the built-in API (Kubernetes 1.34+) serves it at. A
    *.k8s.io group needs the api-approved annotation; "unapproved, ..." is what a test may write there."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.resource.k8s.io",
            "annotations": {"api-approved.kubernetes.io": "unapproved, a test stand-in for the built-in DRA API"},
        },
        "spec": {
            "group": "resource.k8s.io",
            "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
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

    def established():
        return all(
            any(
                c.type == "Established" and c.status == "True"
                for c in extensions.read_custom_resource_definition(f"{p}.resource.k8s.io").status.conditions or []
            )
            for p in ("deviceclasses", "resourceclaims")
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
    api_client.close()
