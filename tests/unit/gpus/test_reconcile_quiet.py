"""An inventory sync with nothing changed builds no models and writes only "last seen": its queries do not grow
with the nodes, and a node is looked at again as soon as its Node object, its pods or its team change."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from gpus.models import GPU, Node
from gpus.reconcile import sync_inventory
from tests.factories import TeamFactory
from tests.sim_objects import GPU_TOLERATION

pytestmark = pytest.mark.django_db


def built_nodes(monkeypatch) -> list[str]:
    """The names of the Node rows loaded as models from now on."""
    built: list[str] = []
    from_db = Node.from_db.__func__

    def counting(cls, db, field_names, values):
        node = from_db(cls, db, field_names, values)
        built.append(node.name)
        return node

    monkeypatch.setattr(Node, "from_db", classmethod(counting))
    return built


def quiet_queries(cluster) -> int:
    sync_inventory(cluster)
    with CaptureQueriesContext(connection) as queries:
        result = sync_inventory(cluster)
    assert result.nodes_created == 0
    return len(queries)


def test_a_sync_with_nothing_changed_has_the_same_queries_for_more_nodes(sim_cluster, monkeypatch):
    small = quiet_queries(sim_cluster)
    template = sim_cluster.list_nodes()[0][0]
    for i in range(40):
        metadata = {**template["metadata"], "name": f"extra-{i:02d}", "uid": f"extra-{i}"}
        sim_cluster.add_node({**template, "metadata": metadata})
    large = quiet_queries(sim_cluster)
    assert large == small
    built = built_nodes(monkeypatch)
    before = dict(Node.objects.values_list("name", "last_seen"))
    sync_inventory(sim_cluster)
    assert built == [], "no Node model is built when no node changed"
    after = dict(Node.objects.values_list("name", "last_seen"))
    assert all(after[name] > before[name] for name in before), "every node present is still seen"


def test_a_quiet_node_is_looked_at_again_when_its_object_pods_or_team_change(sim_cluster, monkeypatch, settings):
    sync_inventory(sim_cluster)
    built = built_nodes(monkeypatch)
    name = Node.objects.filter(gpu_count__gt=0, health="healthy").order_by("name").values_list("name", flat=True)[0]
    # The Node object changes (a label: the team's node).
    team = TeamFactory(slug="vision-x")
    sim_cluster.patch_node_labels(name, {settings.PORTAL_TEAM_NODE_LABEL: "vision-x"})
    sync_inventory(sim_cluster)
    assert built == [name]
    assert Node.objects.get(name=name).team_id == team.pk
    # A pod lands on it: the usage changes, the Node object does not.
    resource = next(r for r in Node.objects.get(name=name).allocatable if r.startswith("nvidia.com/"))
    sim_cluster.ensure_namespace("team-x")
    sim_cluster.create_workload(workload("w", resource, name))
    built.clear()
    sync_inventory(sim_cluster)
    assert built == [name]
    assert Node.objects.get(name=name).gpu_in_use == {resource: 1}
    # The team that the label names is created only now: the row follows it.
    built.clear()
    Node.objects.filter(name=name).update(team=None)
    sync_inventory(sim_cluster)
    assert built == [name] and Node.objects.get(name=name).team_id == team.pk
    # Its GPU rows are left alone while it is quiet, and rebuilt when its object changes.
    gpus = set(GPU.objects.filter(node__name=name).values_list("pk", flat=True))
    built.clear()
    sync_inventory(sim_cluster)
    assert built == [] and set(GPU.objects.filter(node__name=name).values_list("pk", flat=True)) == gpus


def workload(name: str, resource: str, node: str) -> dict:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "team-x", "labels": {"app.kubernetes.io/managed-by": "gpu-portal"}},
        "spec": {
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/managed-by": "gpu-portal"}},
                "spec": {
                    "restartPolicy": "Never",
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "tolerations": [GPU_TOLERATION],
                    "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {resource: "1"}}}],
                },
            }
        },
    }
