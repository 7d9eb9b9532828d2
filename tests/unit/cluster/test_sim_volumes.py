"""The simulated PersistentVolume controller and the scheduler's VolumeBinding filter.

Modelled on kube-controller-manager's PV controller (pkg/controller/volume/persistentvolume/pv_controller.go,
v1.20): a claim is Pending until a volume is bound to it (a static PersistentVolume that names it or matches it,
or one a storage class provisions), Bound with the volume's capacity and access modes afterwards; and on
kube-scheduler's VolumeBinding plugin: a pod whose claim is missing or still unbound is not placed.
"""

from __future__ import annotations

import pytest

from cluster.base import Invalid
from cluster.sim import SimulatedCluster
from tests.sim_objects import SMALL, job, pod_of, scheduled_condition

SLOW = {
    **SMALL,
    "storage_classes": {
        "fast": {"provisioner": "sim.gpu-portal.io/local-volume", "default": True, "provision_seconds": 20},
    },
}


def claim(name: str = "data", *, storage: str = "100Gi", modes=("ReadWriteOnce",), **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {"accessModes": list(modes), "resources": {"requests": {"storage": storage}}, **spec},
    }


def nfs_volume(name: str = "imagenet", *, storage: str = "2Ti", modes=("ReadOnlyMany",), **spec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": list(modes),
            "nfs": {"server": "nfs.example.internal", "path": "/datasets/imagenet", "readOnly": True},
            **spec,
        },
    }


def with_claim(manifest: dict, claim_name: str) -> dict:
    pod = manifest["spec"]["template"]["spec"]
    pod["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    pod["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return manifest


@pytest.fixture
def slow(clock) -> SimulatedCluster:
    return SimulatedCluster(None, scenario=SLOW, clock=clock)


def test_a_claim_is_pending_until_its_class_provisions_a_volume(slow, clock):
    made = slow.ensure_pvc(claim())
    assert made["status"] == {"phase": "Pending"}
    assert made["spec"]["storageClassName"] == "fast"  # the default class, as DefaultStorageClass admission does
    slow.create_workload(with_claim(job("train"), "data"))
    pod = pod_of(slow, "train")
    assert not pod["spec"].get("nodeName")
    assert scheduled_condition(pod)["message"] == (
        "0/3 nodes are available: 3 pod has unbound immediate PersistentVolumeClaims."
    )
    clock.advance(21)
    bound = slow.get_pvc("team-a", "data")
    assert bound["status"]["phase"] == "Bound"
    assert bound["status"]["capacity"] == {"storage": "100Gi"}
    assert bound["status"]["accessModes"] == ["ReadWriteOnce"]
    [volume] = slow.list_pvs()
    assert volume["metadata"]["name"] == bound["spec"]["volumeName"] == f"pvc-{bound['metadata']['uid']}"
    assert volume["spec"]["claimRef"]["name"] == "data" and volume["status"]["phase"] == "Bound"
    assert pod_of(slow, "train")["spec"]["nodeName"] in ("gpu-a", "gpu-b")
    reasons = [
        e["reason"] for e in slow.list_events("team-a") if e["involvedObject"]["kind"] == "PersistentVolumeClaim"
    ]
    assert reasons == ["ExternalProvisioning", "ProvisioningSucceeded"]


def test_a_claim_naming_a_static_volume_waits_for_it_and_gets_its_size_and_modes(slow, clock):
    slow.ensure_pvc(claim("imagenet", storage="1Ti", modes=("ReadOnlyMany",), volumeName="imagenet-team-a",
                          storageClassName=""))  # fmt: skip
    assert slow.get_pvc("team-a", "imagenet")["status"]["phase"] == "Pending"
    slow.ensure_pv(nfs_volume("imagenet-team-a", claimRef={"namespace": "team-a", "name": "imagenet"}))
    bound = slow.get_pvc("team-a", "imagenet")
    assert bound["status"] == {"phase": "Bound", "accessModes": ["ReadOnlyMany"], "capacity": {"storage": "2Ti"}}
    # A static volume is Retain by default: deleting the claim releases it, the data stays.
    assert slow.delete_pvc("team-a", "imagenet") is True
    [volume] = slow.list_pvs()
    assert volume["status"]["phase"] == "Released"
    assert slow.delete_pv("imagenet-team-a") is True and slow.list_pvs() == []


def test_a_volume_too_small_or_lacking_the_mode_is_not_bound(slow):
    slow.ensure_pv(nfs_volume("small", storage="10Gi"))
    slow.ensure_pvc(claim("big", storage="100Gi", modes=("ReadOnlyMany",), volumeName="small", storageClassName=""))
    assert slow.get_pvc("team-a", "big")["status"]["phase"] == "Pending"
    slow.ensure_pvc(claim("rw", storage="1Gi", modes=("ReadWriteMany",), volumeName="small", storageClassName=""))
    assert slow.get_pvc("team-a", "rw")["status"]["phase"] == "Pending"
    assert slow.list_pvs()[0]["status"]["phase"] == "Available"


def test_an_unknown_class_leaves_the_claim_pending_with_the_controllers_words(slow):
    slow.ensure_pvc(claim("x", storageClassName="gold"))
    assert slow.get_pvc("team-a", "x")["status"]["phase"] == "Pending"
    [event] = [e for e in slow.list_events("team-a") if e["involvedObject"]["name"] == "x"]
    assert event["reason"] == "ProvisioningFailed"
    assert event["message"] == 'storageclass.storage.k8s.io "gold" not found'


def test_a_bound_claim_whose_volume_is_deleted_is_lost(slow, clock):
    slow.ensure_pv(nfs_volume("v1", modes=("ReadWriteMany",)))
    slow.ensure_pvc(claim("shared", modes=("ReadWriteMany",), storageClassName=""))
    assert slow.get_pvc("team-a", "shared")["spec"]["volumeName"] == "v1"
    slow.delete_pv("v1")
    assert slow.get_pvc("team-a", "shared")["status"]["phase"] == "Lost"


def test_list_pvcs_is_per_namespace_and_includes_claims_the_portal_did_not_make(slow):
    slow.ensure_namespace("team-b")
    slow.ensure_pvc(claim("a"))
    slow.ensure_pvc({**claim("b"), "metadata": {"name": "b", "namespace": "team-b"}})
    assert [c["metadata"]["name"] for c in slow.list_pvcs("team-a")] == ["a"]
    assert sorted(c["metadata"]["name"] for c in slow.list_pvcs()) == ["a", "b"]


@pytest.mark.parametrize(
    ("manifest", "words"),
    [
        (claim(modes=()), "spec.accessModes: Required value"),
        (claim(modes=("ReadWriteEverywhere",)), 'Unsupported value: "ReadWriteEverywhere"'),
        (claim("Bad_Name"), "metadata.name"),
    ],
)
def test_invalid_claims_are_refused_like_the_api_server(slow, manifest, words):
    with pytest.raises(Invalid, match=words):
        slow.ensure_pvc(manifest)


def test_a_volume_needs_exactly_one_source(slow):
    bare = nfs_volume()
    del bare["spec"]["nfs"]
    with pytest.raises(Invalid, match="must specify a volume type"):
        slow.ensure_pv(bare)
    with pytest.raises(Invalid, match="more than 1 volume type"):
        slow.ensure_pv(nfs_volume(csi={"driver": "x", "volumeHandle": "y"}))
