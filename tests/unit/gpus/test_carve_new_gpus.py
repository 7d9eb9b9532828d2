"""Issue 31 item 17: the carve preview (gpus.nodeconfig_plan.plan_mig) on Blackwell nodes read from their Node
objects: the B200 shape of tests/node_shapes.py (single strategy) and an RTX PRO 6000 Blackwell node (mixed)."""

from dataclasses import dataclass, field

import pytest

from gpus.models import Node
from gpus.nodeconfig_plan import ConfigRefused, plan_mig
from gpus.reconcile import sync_inventory
from tests.node_shapes import node, shapes

pytestmark = pytest.mark.django_db

RTX_PRO = "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition"


@dataclass
class NodesOnly:
    """A cluster of fixed Node objects and no pods: all sync_inventory reads."""

    nodes: list[dict] = field(default_factory=list)
    name: str = "fixed"

    def list_nodes(self, label_selector=None):
        return self.nodes, "1"

    def list_pods(self, label_selector=None):
        return []

    def resource_api_versions(self):
        return []  # no resource.k8s.io: nothing published through DRA


@pytest.fixture
def blackwell(db):
    rtx = node(
        "rtx-pro",
        {
            "nvidia.com/gpu.product": RTX_PRO,
            "nvidia.com/gpu.count": "2",
            "nvidia.com/gpu.present": "true",
            "nvidia.com/mig.capable": "true",
            "nvidia.com/mig.strategy": "mixed",
            "nvidia.com/mig.config": "all-balanced",
            "nvidia.com/mig.config.state": "success",
        },
        {"nvidia.com/mig-1g.24gb": "4", "nvidia.com/mig-2g.48gb": "2"},
    )
    sync_inventory(NodesOnly([shapes()["b200-mig-single"], rtx]))
    return {n.name: n for n in Node.objects.all()}


def test_a_b200_preset_previews_what_the_single_strategy_advertises(blackwell):
    b200 = blackwell["shape-b200-mig-single"]
    assert (b200.product, b200.gpu_count, b200.mig_capable) == ("NVIDIA-B200", 8, True)
    plan = plan_mig(b200, preset="all-1g.45gb")
    assert plan.expected_resources == {"nvidia.com/gpu": 32}
    assert plan.expected_product_label == "NVIDIA-B200-MIG-1g.45gb"
    # A mixed layout cannot run under the single strategy: refused with the reason, not an error page.
    with pytest.raises(ConfigRefused, match="single MIG strategy"):
        plan_mig(b200, preset="all-balanced")


def test_an_rtx_pro_custom_layout_with_variants_previews_per_profile_resources(blackwell):
    rtx = blackwell["rtx-pro"]
    layout = [("1g.24gb-me", 0), ("1g.24gb+me.all", 1), ("2g.48gb+gfx", 2)]
    plan = plan_mig(rtx, placements=[layout, None])
    assert plan.expected_resources == {
        "nvidia.com/gpu": 1,
        "nvidia.com/mig-1g.24gb-me": 1,
        "nvidia.com/mig-1g.24gb.me.all": 1,
        "nvidia.com/mig-2g.48gb.gfx": 1,
    }
    with pytest.raises(ConfigRefused, match="may start at 0, 2"):
        plan_mig(rtx, placements=[[("2g.48gb", 1)], None])
