"""Carving GPUs in a real Chromium: an admin types a layout per GPU, previews the slot drawing and what the node
will advertise, is told why an impossible layout is refused, applies a good one, follows the operation's progress
and sees the node change. The simulated cluster runs on a clock the test moves; the background steps are run
with the same function beat runs."""

import time
from datetime import UTC, datetime

import pytest

from cluster.sim import SimulatedCluster
from gpus.models import Node, NodeConfigOperation
from gpus.nodeconfig import advance_operations
from gpus.reconcile import sync_inventory
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

NODE = "gpu-a100-40g-01"  # 4x A100 40GB, MIG single strategy, all-1g.5gb


@pytest.fixture
def clocked(tmp_path, people):
    now = [time.time()]
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=lambda: now[0])
    sync_inventory(sim)

    def advance(seconds: float = 0):
        now[0] += seconds
        return advance_operations(sim, now=datetime.fromtimestamp(now[0], UTC))

    return sim, advance


def test_admin_draws_a_layout_applies_it_and_sees_the_node_change(page, clocked, artifacts):
    sim, advance = clocked
    login(page, "admin")
    page.goto(f"/nodes/{NODE}/")
    page.get_by_test_id("configure-node").click()
    expect(page.get_by_role("heading", name="Carve the GPUs")).to_be_visible()
    # Today: seven 1g.5gb per GPU, drawn in slots 0-6.
    current = page.get_by_test_id("current-layout")
    expect(current.locator('[data-gpu-index="0"] [data-testid="current-partition"]')).to_have_count(7)

    # An impossible layout is refused with the hardware's reason, and nothing is requested.
    for index in range(4):
        page.get_by_role("textbox", name=f"GPU {index}", exact=True).fill("3g.20gb@2")
    page.get_by_role("button", name="Preview").click()
    expect(page.get_by_test_id("config-errors")).to_contain_text("GPU 0: 3g.20gb cannot start at slot 2")
    assert not NodeConfigOperation.objects.exists()

    # The single strategy needs one profile everywhere: two 3g.20gb per GPU, typed without slots.
    for index in range(4):
        page.get_by_role("textbox", name=f"GPU {index}", exact=True).fill("2x 3g.20gb")
    page.get_by_role("button", name="Preview").click()
    proposed = page.get_by_test_id("proposed-layout")
    gpu0 = proposed.locator('[data-gpu-index="0"] [data-testid="proposed-partition"]')
    expect(gpu0).to_have_count(2)
    expect(gpu0.nth(0)).to_have_attribute("data-start", "0")
    expect(gpu0.nth(1)).to_have_attribute("data-start", "4")
    # Each partition spans its four memory slots: as wide as four empty slots of the grid.
    box = gpu0.nth(0).bounding_box()
    numbers = proposed.locator('[data-gpu-index="0"] .mig-slotnum')
    slot_width = numbers.nth(1).bounding_box()["x"] - numbers.nth(0).bounding_box()["x"]
    assert box["width"] == pytest.approx(4 * slot_width, rel=0.1)
    advertised = page.get_by_test_id("advertised-after")
    expect(advertised.locator('[data-resource="nvidia.com/gpu"]')).to_contain_text("8")
    expect(page.get_by_test_id("preview")).to_contain_text("NVIDIA-A100-SXM4-40GB-MIG-3g.20gb")
    expect(page.get_by_test_id("drain-nothing")).to_be_visible()  # nothing runs there: the drain ends at once
    page.screenshot(path=str(artifacts / "node-configure-preview.png"), full_page=True)

    # Apply asks first: without the box ticked the page says so and nothing is requested.
    with page.expect_navigation():
        page.get_by_role("button", name="Apply").click()
    expect(page.get_by_test_id("config-errors")).to_contain_text("I understand what this drain does")
    assert not NodeConfigOperation.objects.exists()
    page.get_by_test_id("confirm-apply").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Apply").click()
    op = NodeConfigOperation.objects.get()
    expect(page.get_by_test_id("op-state")).to_have_attribute("data-state", "pending")
    expect(page.locator('[data-testid="op-steps"] [data-status="current"]')).to_have_text("Pending")

    advance()
    page.reload()
    expect(page.get_by_test_id("op-state")).to_have_attribute("data-state", "waiting")
    expect(page.get_by_test_id("op-cluster-state")).to_have_text("pending")
    labels = sim.get_node(NODE)["metadata"]["labels"]
    assert labels["nvidia.com/mig.config"] == op.requested["config"]

    advance(31)  # MIG Manager finishes
    page.reload()
    expect(page.get_by_test_id("op-state")).to_have_attribute("data-state", "done")
    expect(page.locator('[data-testid="op-steps"] [data-status="done"]')).to_have_count(6)
    page.screenshot(path=str(artifacts / "node-config-done.png"), full_page=True)

    page.goto(f"/nodes/{NODE}/")
    node = Node.objects.get(name=NODE)
    assert node.allocatable["nvidia.com/gpu"] == "8"
    expect(page.locator('[data-testid="gpu-resources"] [data-resource="nvidia.com/gpu"]')).to_contain_text("8")
    layout = page.get_by_test_id("mig-layout")
    expect(layout.locator('[data-gpu-index="0"] [data-testid="mig-partition"][data-profile="3g.20gb"]')).to_have_count(
        2
    )
    expect(page.get_by_test_id("node-facts")).to_contain_text(op.requested["config"])


def test_a_failed_apply_is_shown_with_its_reason_and_reverted(page, clocked):
    sim, advance = clocked
    sim.fail_next_mig_reconfiguration(NODE, "injected")
    login(page, "admin")
    page.goto(f"/nodes/{NODE}/configure/")
    page.get_by_label("Preset for every GPU").select_option("all-7g.40gb")
    with page.expect_navigation():
        page.get_by_role("button", name="Preview").click()
    page.get_by_test_id("confirm-apply").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Apply").click()
    advance()
    advance(31)
    page.reload()
    expect(page.get_by_test_id("op-state")).to_have_attribute("data-state", "failed")
    expect(page.get_by_test_id("op-reason")).to_contain_text("MIG Manager could not apply all-7g.40gb")
    expect(page.locator('[data-testid="op-steps"] [data-status="failed"]')).to_have_text("Waiting for the GPU Operator")
    with page.expect_navigation():
        page.get_by_test_id("revert").click()
    expect(page.get_by_test_id("op-config")).to_have_text("all-1g.5gb")
    advance()
    page.reload()
    expect(page.get_by_test_id("op-state")).to_have_attribute("data-state", "done")
    assert sim.get_node(NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-1g.5gb"
