"""The inventory of a DRA cluster (issue 33, items 1 and 2): discovery says whether resource.k8s.io is served and which
of NVIDIA's device classes exist; the sync reads ResourceSlices into GPU rows with UUIDs, static MIG devices into
partitions, partitionable GPUs' free counters into what can still be carved, and DRA resource classes; the node
diagnosis names missing slices and tainted devices; admins choose per node pool how its GPUs are requested."""

from __future__ import annotations

import pytest
from django.urls import reverse

from cluster.connect import discover
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.choices import GpuRequestMode, NodeHealth
from gpus.dra_inventory import node_inventories
from gpus.models import GPU, Cluster, MigPartition, Node, NodePool, ResourceClass, settings_cluster_pk
from gpus.node_pools import choose_gpu_request
from gpus.reconcile import sync_inventory
from tests.dra_objects import DRA_SMALL, claim_spec, claim_template, dra_job, exactly

H100_CLASS = "dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3"
A100_3G = "dra:mig.nvidia.com/3g.20gb@NVIDIA-A100-SXM4-40GB"
A100_7G = "dra:mig.nvidia.com/7g.40gb@NVIDIA-A100-SXM4-40GB"
A100_WHOLE = "dra:gpu.nvidia.com@NVIDIA-A100-SXM4-40GB"


@pytest.fixture
def dra(db, tmp_path, clock):
    """The dra scenario (2 HGX H100 with whole GPUs, 1 HGX A100 with dynamic MIG, a CPU node), synced."""
    sim = SimulatedCluster(tmp_path / "dra.json", scenario="dra", clock=clock)
    sync_inventory(sim)
    return sim


def _slice_uuids(sim, node):
    return {
        d["attributes"]["uuid"]["string"]
        for s in sim.list_resource_slices(node_name=node)
        for d in s["spec"].get("devices") or []
        if d["attributes"]["type"]["string"] == "gpu"
    }


def test_discovery_reports_resource_k8s_io_and_nvidia_device_classes(tmp_path, clock):
    found = discover(SimulatedCluster(tmp_path / "a.json", scenario="dra", clock=clock))
    assert found.dra and found.dra_v1
    assert found.dra_versions == ("resource.k8s.io/v1",)
    # The ComputeDomain classes come with the ComputeDomain plugin, which the scenario's nodes do not run.
    assert found.dra_device_classes == ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")
    small = discover(SimulatedCluster(tmp_path / "c.json", scenario=DRA_SMALL, clock=clock))
    assert "compute-domain-default-channel.nvidia.com" in small.dra_device_classes
    assert found.as_dict()["dra_device_classes"][0] == "gpu.nvidia.com"
    old = discover(
        SimulatedCluster(tmp_path / "b.json", scenario={**DRA_SMALL, "server_version": "v1.33.5"}, clock=clock)
    )
    assert (old.dra, old.dra_v1, old.dra_versions, old.dra_device_classes) == (False, False, (), ())


def test_gpus_come_from_the_slices_with_their_uuids(dra):
    for name in ("dra-h100-01", "dra-h100-02", "dra-a100-01"):
        gpus = GPU.objects.filter(node__name=name)
        assert gpus.count() == 8
        assert {g.uuid for g in gpus} == _slice_uuids(dra, name)
    h100 = GPU.objects.get(node__name="dra-h100-01", index=3)
    assert (h100.product, h100.memory_mb, h100.mig_enabled) == ("NVIDIA-H100-80GB-HBM3", 81559, False)
    assert h100.dra["device"] == "gpu-3" and h100.dra["architecture"] == "Hopper"
    assert "counters" not in h100.dra  # not partitionable
    assert not GPU.objects.filter(node__name="dra-cpu-01").exists()


def test_a_dynamic_mig_gpu_records_its_counters_and_what_can_be_carved(dra):
    a100 = GPU.objects.get(node__name="dra-a100-01", index=0)
    assert a100.mig_enabled and a100.dra["free_counters"] == a100.dra["counters"]
    assert a100.dra["counters"]["memory-slice-7"] == 1
    assert a100.dra["carvable"] == {
        "1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1,
    }  # fmt: skip
    assert not MigPartition.objects.filter(gpu=a100).exists()  # nothing carved: no partition exists


def test_allocated_devices_take_their_counters(dra):
    # A claim holding the 3g.20gb placement at slot 0 of gpu-0: half the memory slices are gone, so only one more
    # 3g.20gb fits, and neither the 7g.40gb nor the whole GPU.
    held = {"request": "r", "driver": "gpu.nvidia.com", "pool": "dra-a100-01", "device": "gpu-0-mig-3g20gb-9-0"}
    claim = {"status": {"allocation": {"devices": {"results": [held]}}}}
    node = node_inventories(dra.list_resource_slices(), [claim])["dra-a100-01"]
    gpu0, gpu1 = node.gpus[0], node.gpus[1]
    assert [gpu0.free_counters[f"memory-slice-{i}"] for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert gpu0.carvable["3g.20gb"] == 1 and gpu0.carvable["7g.40gb"] == 0 and gpu0.carvable["1g.5gb"] == 3
    assert gpu0.carved == {"3g.20gb": 1} and not gpu0.whole_free
    assert gpu1.carvable["7g.40gb"] == 1 and gpu1.whole_free


def test_partitions_the_scheduler_carved_are_counted_from_the_claims(db, tmp_path, clock):
    # The simulated kube-scheduler allocates three 2g.10gb placements of the one dynamic-MIG A100: six of its
    # eight memory slices are taken, so no 2g.10gb more fits, one 1g.5gb does, and the whole GPU is not free.
    sim = SimulatedCluster(tmp_path / "s.json", scenario=DRA_SMALL, clock=clock)
    spec = claim_spec(("mig", exactly("mig.nvidia.com", 3, "device.attributes['gpu.nvidia.com'].profile == '2g.10gb'")))
    sim.apply_resource_claim_template(claim_template("three-2g", spec))
    sim.create_workload(dra_job("three", {"mig": "three-2g"}))
    sync_inventory(sim)
    gpu = GPU.objects.get(node__name="dra-a100", index=0)
    free = gpu.dra["free_counters"]
    assert [free[f"memory-slice-{i}"] for i in range(8)] == [0, 0, 0, 0, 0, 0, 1, 1]
    assert gpu.dra["carvable"]["2g.10gb"] == 0 and gpu.dra["carvable"]["1g.5gb"] == 1
    two = ResourceClass.objects.get(key="dra:mig.nvidia.com/2g.10gb@NVIDIA-A100-SXM4-40GB")
    assert (two.total, two.in_use, two.free) == (3, 3, 0)
    whole = ResourceClass.objects.get(key=A100_WHOLE)
    assert (whole.total, whole.in_use, whole.free) == (1, 1, 0)


def test_dra_resource_classes_use_their_own_keys_and_are_offered(dra):
    h100 = ResourceClass.objects.get(key=H100_CLASS)
    assert (h100.kind, h100.resource_name, h100.product_label) == ("gpu", "gpu.nvidia.com", "NVIDIA-H100-80GB-HBM3")
    assert (h100.total, h100.allocatable, h100.free, h100.in_use, h100.node_count) == (16, 16, 16, 0, 2)
    assert not h100.hidden  # offered to teams like any class: admission counts DRA devices (jobs.scheduling.dra)
    three = ResourceClass.objects.get(key=A100_3G)
    assert (three.kind, three.profile, three.resource_name) == ("mig", "3g.20gb", "mig.nvidia.com")
    assert (three.total, three.free) == (16, 16)  # 2 per GPU could be carved, 8 GPUs
    assert ResourceClass.objects.get(key=A100_WHOLE).free == 8
    # The device-plugin keys of the same products are not made from DRA devices.
    assert not ResourceClass.objects.filter(key__startswith="nvidia.com/gpu@NVIDIA-H100").exists()


def test_a_dra_node_is_diagnosed_as_dra_not_as_a_broken_device_plugin(dra):
    node = Node.objects.get(name="dra-h100-01")
    titles = {f["title"]: f for f in node.diagnosis}
    assert "8 GPUs published through NVIDIA's DRA driver" in titles
    assert "GPUs are labelled but nothing is allocatable" not in titles
    assert titles["GPUs offered through NVIDIA's DRA driver, not the device plugin"]["severity"] == "info"
    # A GPU node like any other: healthy, and taking work (admission counts its devices in the DRA classes).
    assert node.health == NodeHealth.HEALTHY
    assert node.blocked_reason == ""


def test_a_tainted_device_shows_in_the_diagnosis(db, tmp_path, clock):
    scenario = {
        **DRA_SMALL,
        "nodes": [
            {"name": "dra-h100", "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 2},
             "dra": {"taints": [{"device": "gpu-1", "key": "example.com/xid", "value": "79", "effect": "NoSchedule"}]}},
        ],
    }  # fmt: skip
    sim = SimulatedCluster(tmp_path / "t.json", scenario=scenario, clock=clock)
    sync_inventory(sim)
    finding = next(f for f in Node.objects.get(name="dra-h100").diagnosis if f["title"] == "Device gpu-1 is tainted")
    assert finding["severity"] == "warning"
    assert finding["detail"] == (
        "Device gpu-1 of dra-h100 carries the device taint example.com/xid=79:NoSchedule: claims that do not "
        "tolerate it are not given this device."
    )
    assert GPU.objects.get(node__name="dra-h100", index=1).dra["taints"][0]["key"] == "example.com/xid"
    h100 = ResourceClass.objects.get(key=H100_CLASS)
    assert (h100.total, h100.allocatable) == (2, 1)  # a NoSchedule-tainted device takes no new claim


def test_static_mig_devices_become_partitions(db, tmp_path, clock):
    scenario = {
        **DRA_SMALL,
        "nodes": [
            {"name": "mig", "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1},
             "mig": {"strategy": "mixed", "layout": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}},
             "dra": {"mig": "static"}},
        ],
    }  # fmt: skip
    sim = SimulatedCluster(tmp_path / "m.json", scenario=scenario, clock=clock)
    sync_inventory(sim)
    gpu = GPU.objects.get(node__name="mig", index=0)
    parts = list(gpu.mig_partitions.order_by("start").values_list("profile", "start", "size", "resource_name"))
    assert parts == [
        ("1g.5gb", 1, 1, "mig.nvidia.com"),
        ("2g.10gb", 2, 2, "mig.nvidia.com"),
        ("3g.20gb", 4, 4, "mig.nvidia.com"),
    ]
    assert all(p.uuid.startswith("MIG-") and not p.placement_inferred for p in gpu.mig_partitions.all())
    assert gpu.sharing == "mig"


def test_a_node_that_should_run_the_dra_driver_but_has_no_slices(dra):
    # The pool of the H100 nodes is set to DRA; a node whose slices are gone (its plugin stopped) is an error.
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    NodePool.objects.create(cluster=cluster, name="", gpu_request=GpuRequestMode.DRA)
    dra.patch_node_labels("dra-cpu-01", {"nvidia.com/gpu.present": "true"})
    sync_inventory(dra)
    node = Node.objects.get(name="dra-cpu-01")
    finding = next(f for f in node.diagnosis if f["layer"] == "dra")
    assert (finding["severity"], finding["title"]) == ("error", "No ResourceSlices for this node")
    assert finding["detail"].startswith(
        "its node pool's GPUs are requested through DRA, but no ResourceSlice of driver gpu.nvidia.com names dra-cpu-01"
    )
    # A node that publishes its slices has no such finding.
    assert not [f for f in Node.objects.get(name="dra-h100-01").diagnosis if f["severity"] == "error"]


def test_the_pool_choice_needs_a_cluster_serving_dra_and_is_audited(dra, people):
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    admin = people["admin"]
    with pytest.raises(Exception) as refused:
        choose_gpu_request(admin, cluster, "", "dra-extended")
    assert refused.value.messages == [
        "Cluster default does not serve resource.k8s.io/v1 (its last check found no version; v1 is stable from "
        "Kubernetes 1.34): its pools can use only the device plugin. Check the cluster again once it is upgraded.",
        "Extended-resource mapping onto DRA needs Kubernetes 1.36 or later (the DRAExtendedResource feature, beta "
        "there); default runs an unknown version. Choose DRA instead.",
    ]
    assert not NodePool.objects.exists() and not AuditEvent.objects.filter(action="node_pool.gpu_request").exists()
    cluster.capabilities = discover(dra).as_dict()
    cluster.save()
    row = choose_gpu_request(admin, cluster, "", "dra")
    assert row.gpu_request == "dra"
    event = AuditEvent.objects.get(action="node_pool.gpu_request")
    assert (event.before, event.after) == ({"gpu_request": "device-plugin"}, {"gpu_request": "dra"})


def test_the_page_offers_the_choice_only_where_dra_is_served(dra, client, people):
    client.force_login(people["admin"])
    page = client.get(reverse("gpus:nodepool-list")).content.decode()
    assert 'data-testid="pool-gpu-request-fixed"' in page and 'name="gpu_request"' not in page
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    cluster.capabilities = discover(dra).as_dict()
    cluster.save()
    page = client.get(reverse("gpus:nodepool-list")).content.decode()
    assert 'name="gpu_request"' in page
    save = reverse("gpus:nodepool-gpu-request")
    bad = client.post(save, {"cluster": "default", "pool": "", "gpu_request": "magic"})
    assert bad.status_code == 400
    assert "Choose how GPUs are requested: one of device-plugin, dra, dra-extended (not &#x27;magic&#x27;)." in (
        bad.content.decode()
    )
    assert client.post(save, {"cluster": "default", "pool": "", "gpu_request": "dra"}).status_code == 302
    assert NodePool.objects.get(cluster=cluster, name="").gpu_request == "dra"
    detail = client.get(reverse("gpus:cluster-detail", args=["default"])).content.decode()
    assert "<code>resource.k8s.io/v1</code>" in detail and "<code>mig.nvidia.com</code>" in detail


def test_utilisation_samples_join_dra_gpus_by_uuid(dra):
    # Telemetry joins DCGM samples to GPU rows by UUID (telemetry.pages): a DRA GPU's row carries the UUID its
    # slice publishes, which is the one dcgm-exporter reports for it.
    from telemetry import samples, scrape
    from telemetry.models import GpuSample

    home = Cluster.objects.get(pk=settings_cluster_pk())
    assert scrape.scrape_cluster(home, dra).failed == 0
    rows = set(GPU.objects.filter(node__name="dra-h100-01").values_list("uuid", flat=True))
    sampled = set(GpuSample.objects.filter(node_name="dra-h100-01").values_list("gpu_uuid", flat=True))
    assert len(rows) == 8 and rows == sampled
    sparks = samples.sparklines("gpu_uuid", sorted(rows), node=(home.pk, "dra-h100-01"))
    assert set(sparks) == rows


def test_the_node_page_shows_dra_devices_and_what_can_be_carved(dra, client, people):
    client.force_login(people["admin"])
    page = client.get(reverse("gpus:node-detail", args=["dra-a100-01"])).content.decode()
    uuid = GPU.objects.get(node__name="dra-a100-01", index=0).uuid
    assert f"<code>{uuid}</code>" in page
    assert page.count('data-testid="gpu-dra"') == 8
    assert "3g.20gb × 2" in page and "7g.40gb × 1" in page
    assert "8 GPUs published through NVIDIA&#x27;s DRA driver" in page


def test_what_claims_hold_is_recorded_as_the_portal_s_or_someone_else_s(dra):
    # The portal's claim (its label, or owned by one of its pods) holds a 3g.20gb at slice 0 of gpu-0; someone
    # else's holds a 1g.5gb at slice 6 of gpu-0 and the whole gpu-1: admission pins the first and counts the others
    # taken (jobs.scheduling.dra).
    def claim(devices: list[str], **metadata) -> dict:
        results = [{"request": "r", "driver": "gpu.nvidia.com", "pool": "dra-a100-01", "device": d} for d in devices]
        return {"metadata": metadata, "status": {"allocation": {"devices": {"results": results}}}}

    slices = dra.list_resource_slices()
    one = "gpu-0-mig-1g5gb-19-6"
    ours = claim(["gpu-0-mig-3g20gb-9-0"], labels={"app.kubernetes.io/managed-by": "gpu-portal"})
    owned = claim(["gpu-2"], namespace="team-a", ownerReferences=[{"kind": "Pod", "name": "p-0"}])
    theirs = claim([one, "gpu-1"], namespace="team-b", labels={"app": "x"})
    managed = ("app.kubernetes.io/managed-by", "gpu-portal")
    node = node_inventories(slices, [ours, owned, theirs], managed, {("team-a", "p-0")})["dra-a100-01"]
    gpu0, gpu1, gpu2 = node.gpus[:3]
    assert (gpu0.placed, gpu0.foreign) == ([("3g.20gb", 0)], [("1g.5gb", 6)])
    assert (gpu1.placed, gpu1.foreign) == ([], [("", 0)])
    assert (gpu2.placed, gpu2.foreign) == ([("", 0)], [])
    # Without telling them apart, every claim is someone else's.
    assert node_inventories(slices, [ours])["dra-a100-01"].gpus[0].foreign == [("3g.20gb", 0)]
