"""The reconcile path end to end: beat's task message → broker → a real Celery worker process → database."""

import pytest

from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.models import Node, ResourceClass
from gpus.tasks import reconcile_inventory
from tests.sim_objects import DEMO_SCENARIO

from .processes import wait_for

pytestmark = pytest.mark.integration


def test_worker_fills_inventory_and_marks_vanished_nodes_gone(celery_worker_process):
    worker = celery_worker_process
    cluster = SimulatedCluster(worker["sim_state"], scenario=DEMO_SCENARIO)
    expected = {n["metadata"]["name"] for n in cluster.list_nodes()[0]}

    reconcile_inventory.apply_async(queue=worker["queue"])
    wait_for(lambda: Node.objects.count() == len(expected), what="the worker to write the nodes", log=worker["log"])
    assert set(Node.objects.values_list("name", flat=True)) == expected
    h100 = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3")
    assert h100.total == 64 and h100.kind == "gpu"

    victim = sorted(expected)[0]
    cluster.remove_node(victim)
    reconcile_inventory.apply_async(queue=worker["queue"])
    wait_for(lambda: Node.objects.filter(name=victim, gone_at__isnull=False).exists(), what="the node to be gone")
    assert Node.objects.count() == len(expected), "a vanished node is kept, not deleted"
    assert AuditEvent.objects.filter(action="node.gone", object_repr=victim, actor_name="system").exists()
