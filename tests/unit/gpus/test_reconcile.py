"""Reconcile from the simulated demo cluster into the inventory tables."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from core.models import AuditEvent
from gpus.models import GPU, MigPartition, Node, ResourceClass
from gpus.reconcile import sync_inventory
from tests.factories import TeamFactory

pytestmark = pytest.mark.django_db


def test_demo_inventory_matches_what_the_cluster_advertises(sim_cluster):
    result = sync_inventory(sim_cluster)
    nodes, _ = sim_cluster.list_nodes()
    assert result.nodes_seen == len(nodes) == Node.objects.count()
    for raw in nodes:
        node = Node.objects.get(name=raw["metadata"]["name"])
        assert node.labels == raw["metadata"].get("labels", {})
        assert node.allocatable == raw["status"]["allocatable"]
        assert node.unschedulable == bool(raw["spec"].get("unschedulable"))
    # Every advertised NVIDIA resource shows up in exactly one resource class, with matching totals.
    advertised: dict[str, int] = {}
    for raw in nodes:
        for name, qty in raw["status"]["capacity"].items():
            if name.startswith("nvidia.com/"):
                advertised[name] = advertised.get(name, 0) + int(qty)
    by_resource: dict[str, int] = {}
    for rc in ResourceClass.objects.all():
        by_resource[rc.resource_name] = by_resource.get(rc.resource_name, 0) + rc.total
    assert by_resource == advertised


def test_node_kinds_of_the_demo(sim_cluster):
    sync_inventory(sim_cluster)
    health = dict(Node.objects.values_list("name", "health"))
    broken = Node.objects.get(health="error")
    assert not broken.device_plugin_ok and broken.gpu_count > 0
    assert any(f["layer"] == "device-plugin" and f["severity"] == "error" for f in broken.diagnosis)
    cordoned = Node.objects.get(unschedulable=True)
    assert health[cordoned.name] == "warning"
    assert Node.objects.filter(health="no-gpu").exists()

    mixed = Node.objects.get(mig_strategy="mixed")
    assert mixed.gpus.filter(mig_enabled=True).count() == mixed.gpu_count
    first = mixed.gpus.get(index=0)
    assert [(p.profile, p.start, p.size) for p in first.mig_partitions.order_by("start")] == [
        ("1g.10gb", 0, 1), ("1g.10gb", 1, 1), ("2g.20gb", 2, 2), ("3g.40gb", 4, 4),
    ]  # fmt: skip
    single = Node.objects.get(mig_strategy="single", mig_config__startswith="all-1g")
    assert MigPartition.objects.filter(gpu__node=single).count() == int(single.allocatable["nvidia.com/gpu"])

    shared = ResourceClass.objects.get(kind="shared")
    assert shared.replicas == 4 and shared.gpu_fraction == pytest.approx(0.25)
    mig_3g = ResourceClass.objects.get(resource_name="nvidia.com/mig-3g.40gb")
    assert mig_3g.gpu_fraction == pytest.approx(3 / 7)


def test_usage_and_free_follow_bound_pods(sim_cluster):
    sim_cluster.ensure_namespace("team-vision")
    sim_cluster.create_workload(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train-1", "namespace": "team-vision",
                         "labels": {"app.kubernetes.io/managed-by": "gpu-portal"}},
            "spec": {"template": {"metadata": {"labels": {"app.kubernetes.io/managed-by": "gpu-portal"}}, "spec": {
                "restartPolicy": "Never",
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
                "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                                "resources": {"limits": {"nvidia.com/gpu": "4"}}}],
            }}},
        }
    )  # fmt: skip
    sync_inventory(sim_cluster)
    h100 = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3")
    assert h100.in_use == 4
    assert h100.free == h100.allocatable - 4
    node = Node.objects.get(gpu_in_use__has_key="nvidia.com/gpu")
    assert node.gpu_in_use == {"nvidia.com/gpu": 4}


def test_vanished_node_is_marked_gone_and_comes_back(sim_cluster):
    sync_inventory(sim_cluster)
    name = Node.objects.filter(gpu_count__gt=0).order_by("name").first().name
    spec = next(n for n in sim_cluster.list_nodes()[0] if n["metadata"]["name"] == name)
    sim_cluster.remove_node(name)
    result = sync_inventory(sim_cluster)
    node = Node.objects.get(name=name)
    assert result.nodes_gone == 1 and node.gone_at is not None and node.health == "gone"
    assert GPU.objects.filter(node=node).exists(), "history is kept"
    assert AuditEvent.objects.filter(action="node.gone", object_repr=name).count() == 1
    assert sync_inventory(sim_cluster).nodes_gone == 0, "gone is recorded once"
    sim_cluster.add_node(spec)
    result = sync_inventory(sim_cluster)
    node.refresh_from_db()
    assert result.nodes_back == 1 and node.gone_at is None


def test_team_label_dedicates_a_node(sim_cluster):
    team = TeamFactory(slug="vision")
    name = sim_cluster.list_nodes()[0][0]["metadata"]["name"]
    sim_cluster.patch_node_labels(name, {"gpu-portal.io/team": "vision"})
    sync_inventory(sim_cluster)
    assert Node.objects.get(name=name).team == team
    sim_cluster.patch_node_labels(name, {"gpu-portal.io/team": None})
    sync_inventory(sim_cluster)
    assert Node.objects.get(name=name).team is None


def test_reconcile_is_idempotent(sim_cluster):
    sync_inventory(sim_cluster)
    before = list(MigPartition.objects.values_list("id", flat=True).order_by("id"))
    sync_inventory(sim_cluster)
    assert list(MigPartition.objects.values_list("id", flat=True).order_by("id")) == before


def test_query_count_does_not_grow_with_nodes(sim_cluster):
    sync_inventory(sim_cluster)
    with CaptureQueriesContext(connection) as small:
        sync_inventory(sim_cluster)
    template = sim_cluster.list_nodes()[0][0]
    for i in range(40):
        clone = {**template, "metadata": {**template["metadata"], "name": f"extra-{i:02d}", "uid": f"extra-{i}"}}
        sim_cluster.add_node(clone)
    sync_inventory(sim_cluster)
    with CaptureQueriesContext(connection) as large:
        sync_inventory(sim_cluster)
    assert len(large.captured_queries) <= len(small.captured_queries) + 2, (
        len(small.captured_queries),
        len(large.captured_queries),
    )


def test_class_disappears_when_no_node_advertises_it_any_more(sim_cluster):
    from gpus.resources import node_classes
    from vocab.gfd import parse_node

    node = next(n for n in sim_cluster.list_nodes()[0] if "nvidia.com/mig-3g.40gb" in n["status"]["capacity"])
    # What the kubelet shows after a re-partition: the old resource lingers at 0.
    for section in ("capacity", "allocatable"):
        node["status"][section]["nvidia.com/mig-3g.40gb"] = "0"
    assert "nvidia.com/mig-3g.40gb" not in {c.resource_name for c in node_classes(parse_node(node))}


def test_repartition_moves_classes_and_partitions(tmp_path):
    from cluster.sim import SimulatedCluster
    from tests.sim_objects import DEMO_SCENARIO

    now = [1_800_000_000.0]
    cluster = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=lambda: now[0])
    sync_inventory(cluster)
    node = Node.objects.get(mig_strategy="mixed")
    key_3g = f"nvidia.com/mig-3g.40gb@{node.product_label}"
    assert ResourceClass.objects.get(key=key_3g).total == 8

    cluster.patch_node_labels(node.name, {"nvidia.com/mig.config": "all-1g.10gb"})
    sync_inventory(cluster)
    node.refresh_from_db()
    assert node.mig_config_state == "pending" and node.health == "warning"
    now[0] += 600
    sync_inventory(cluster)
    node.refresh_from_db()
    assert node.mig_config_state == "success"
    gone = ResourceClass.objects.get(key=key_3g)
    assert (gone.present, gone.total, gone.free) == (False, 0, 0), "kept for history, offered no more"
    assert ResourceClass.objects.get(key=f"nvidia.com/mig-1g.10gb@{node.product_label}").total == 56
    assert set(MigPartition.objects.filter(gpu__node=node).values_list("profile", flat=True)) == {"1g.10gb"}
    assert MigPartition.objects.filter(gpu__node=node).count() == 56
