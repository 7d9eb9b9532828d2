"""The admin page of node pools (gpus.pool_admin): admins see each pool with the GPU taints the portal recognises on
its nodes and the nodes an unknown taint keeps work off, and declare the taints GPU work tolerates there. Every
problem of the declaration is named at once; a saved change is audited; nobody else reaches the page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.models import AuditEvent
from gpus import fleet
from gpus.models import Node, NodePool
from gpus.node_pools import PoolTaints
from tests.sim_objects import CLOUD_CLUSTER
from vocab.taints import Taint

LIST = reverse("gpus:nodepool-list")
SAVE = reverse("gpus:nodepool-taints")


@pytest.mark.parametrize("who", ["alice", "bob", "outsider"])
def test_only_admins_reach_the_page(cluster, client, people, who):
    client.force_login(people[who])
    assert client.get(LIST).status_code == 404
    assert (
        client.post(SAVE, {"cluster": "default", "pool": "l4-pool", "taints": "dedicated=x:NoSchedule"}).status_code
        == 404
    )
    assert not NodePool.objects.exists()


def test_the_page_lists_pools_with_their_recognised_gpu_taints(cluster, client, people):
    client.force_login(people["admin"])
    page = client.get(LIST)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'data-pool="l4-pool"' in html  # the demo's EKS node group
    assert "Nodes without a pool label" in html
    assert "nvidia.com/gpu=present:NoSchedule" in html


def test_every_problem_is_named_at_once_and_nothing_is_saved(cluster, client, people):
    client.force_login(people["admin"])
    response = client.post(
        SAVE,
        {
            "cluster": "default",
            "pool": "l4-pool",
            "taints": "bad key=x:NoSchedule\ndedicated=ok:Sometimes\nok:NoExecute",
        },
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Line 1:" in html and "qualified name" in html
    assert "Line 2:" in html and "Sometimes" in html
    assert not NodePool.objects.exists()
    assert not AuditEvent.objects.filter(action="node_pool.taints").exists()


def test_a_declaration_is_saved_audited_and_read_by_placement(cluster, client, people):
    client.force_login(people["admin"])
    taints = "dedicated=ml:NoSchedule\n\ndedicated=ml:NoSchedule"
    response = client.post(SAVE, {"cluster": "default", "pool": "l4-pool", "taints": taints})
    assert response.status_code == 302 and response.url.endswith("#pool-default-l4-pool")
    pool = NodePool.objects.get(name="l4-pool")
    assert pool.declared_taints == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    assert pool.updated_by == people["admin"]
    (event,) = AuditEvent.objects.filter(action="node_pool.taints")
    assert event.actor == people["admin"] and (event.object_repr, event.cluster) == ("l4-pool", "default")
    assert event.before == {"declared_taints": []}
    assert event.after == {"declared_taints": ["dedicated=ml:NoSchedule"]}
    l4_node = Node.objects.filter(pool="l4-pool").values_list("name", flat=True).first()
    assert Taint("dedicated", "ml", "NoSchedule") in PoolTaints.load().for_nodes(None, [l4_node])


def test_an_unknown_pool_is_refused(cluster, client, people):
    client.force_login(people["admin"])
    assert client.post(SAVE, {"cluster": "default", "pool": "no-such-pool", "taints": ""}).status_code == 404
    assert client.post(SAVE, {"cluster": "no-such-cluster", "pool": "l4-pool", "taints": ""}).status_code == 404
    assert not NodePool.objects.exists()


def test_two_clusters_pools_of_one_name_are_two_pools(cluster, client, people, settings, tmp_path):
    """The demo's EKS node group and the cloud cluster's GKE pool are both called l4-pool: a declaration for one is
    not the other's, on the page and in what placement reads."""
    settings.DATA_DIR = tmp_path
    cloud = fleet.register(people["admin"], fleet.ClusterInput(**CLOUD_CLUSTER))
    assert fleet.sync(cloud) is not None
    client.force_login(people["admin"])
    html = client.get(LIST).content.decode()
    assert 'data-pool="l4-pool" data-cluster="default"' in html and 'data-pool="l4-pool" data-cluster="cloud"' in html
    response = client.post(SAVE, {"cluster": "cloud", "pool": "l4-pool", "taints": "dedicated=ml:NoSchedule"})
    assert response.status_code == 302 and response.url.endswith("#pool-cloud-l4-pool")
    assert list(NodePool.objects.values_list("cluster__name", "name")) == [("cloud", "l4-pool")]
    table = PoolTaints.load()
    cloud_l4 = Node.objects.filter(cluster=cloud, pool="l4-pool").values_list("name", flat=True).first()
    default_l4 = Node.objects.filter(cluster__name="default", pool="l4-pool").values_list("name", flat=True).first()
    assert Taint("dedicated", "ml", "NoSchedule") in table.for_nodes(cloud.pk, [cloud_l4])
    assert Taint("dedicated", "ml", "NoSchedule") not in table.for_nodes(None, [default_l4])
    # A node name of one cluster says nothing of the other's node of the same name.
    assert table.for_nodes(cloud.pk, [default_l4]) == [] or default_l4 == cloud_l4
