"""The admin page of node pools (gpus.pool_admin): admins see each pool with the GPU taints the portal recognises on
its nodes and the nodes an unknown taint keeps work off, and declare the taints GPU work tolerates there. Every
problem of the declaration is named at once; a saved change is audited; nobody else reaches the page."""

from __future__ import annotations

import pytest
from django.urls import reverse

from core.models import AuditEvent
from gpus.models import Node, NodePool
from gpus.node_pools import PoolTaints
from vocab.taints import Taint

LIST = reverse("gpus:nodepool-list")
SAVE = reverse("gpus:nodepool-taints")


@pytest.mark.parametrize("who", ["alice", "bob", "outsider"])
def test_only_admins_reach_the_page(cluster, client, people, who):
    client.force_login(people[who])
    assert client.get(LIST).status_code == 404
    assert client.post(SAVE, {"pool": "l4-pool", "taints": "dedicated=x:NoSchedule"}).status_code == 404
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
        SAVE, {"pool": "l4-pool", "taints": "bad key=x:NoSchedule\ndedicated=ok:Sometimes\nok:NoExecute"}
    )
    assert response.status_code == 400
    html = response.content.decode()
    assert "Line 1:" in html and "qualified name" in html
    assert "Line 2:" in html and "Sometimes" in html
    assert not NodePool.objects.exists()
    assert not AuditEvent.objects.filter(action="node_pool.taints").exists()


def test_a_declaration_is_saved_audited_and_read_by_placement(cluster, client, people):
    client.force_login(people["admin"])
    response = client.post(SAVE, {"pool": "l4-pool", "taints": "dedicated=ml:NoSchedule\n\ndedicated=ml:NoSchedule"})
    assert response.status_code == 302 and response.url.endswith("#pool-l4-pool")
    pool = NodePool.objects.get(name="l4-pool")
    assert pool.declared_taints == [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    assert pool.updated_by == people["admin"]
    (event,) = AuditEvent.objects.filter(action="node_pool.taints")
    assert event.actor == people["admin"] and event.object_repr == "l4-pool"
    assert event.before == {"declared_taints": []}
    assert event.after == {"declared_taints": ["dedicated=ml:NoSchedule"]}
    l4_node = Node.objects.filter(pool="l4-pool").values_list("name", flat=True).first()
    assert Taint("dedicated", "ml", "NoSchedule") in PoolTaints.load().for_nodes([l4_node])


def test_an_unknown_pool_is_refused(cluster, client, people):
    client.force_login(people["admin"])
    assert client.post(SAVE, {"pool": "no-such-pool", "taints": ""}).status_code == 404
