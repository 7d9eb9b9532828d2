"""The node shapes of issue 17 in a real Chromium, on the demo cluster: the node list, the EKS node (a managed node
pool, one GPU marked unhealthy), the MPS node, the carving page's MPS choice and the resource classes page say what
they are. Screenshots go to test-artifacts/ (or $FIDELITY_SHOTS) for a person to look at."""

import os
from pathlib import Path

import pytest

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture
def shots(artifacts) -> Path:
    where = Path(os.environ.get("FIDELITY_SHOTS") or artifacts)
    where.mkdir(parents=True, exist_ok=True)
    return where


def test_fidelity_pages(page, inventory, people, shots):
    login(page, "admin")
    page.goto("/nodes/")
    expect(page.get_by_text("eks-g6-01")).to_be_visible()
    expect(page.get_by_test_id("node-unhealthy")).to_have_text("1 GPU unhealthy")
    expect(page.get_by_test_id("node-provider")).to_have_text("EKS")
    page.screenshot(path=str(shots / "fid-node-list.png"), full_page=True)

    page.goto("/nodes/eks-g6-01/")
    expect(page.get_by_text("EKS-managed GPU stack").first).to_be_visible()
    expect(page.get_by_text("1 of 4 GPUs unhealthy").first).to_be_visible()
    # Carving is a node-pool setting on a managed pool: no Carve button that would only be refused.
    expect(page.get_by_test_id("configure-managed")).to_be_visible()
    expect(page.get_by_test_id("configure-node")).to_have_count(0)
    page.screenshot(path=str(shots / "fid-eks-unhealthy-node.png"), full_page=True)

    page.goto("/nodes/gpu-l40s-mps-01/")
    expect(page.get_by_text("MPS sharing, 4 clients per GPU").first).to_be_visible()
    expect(page.get_by_text("MPS, 4 clients per GPU")).to_be_visible()
    page.screenshot(path=str(shots / "fid-mps-node.png"), full_page=True)

    page.goto("/nodes/gpu-a10-01/configure/")
    page.get_by_label("MPS (run at once, memory and compute split)").check()
    expect(page.get_by_test_id("mps-caveat")).to_be_visible()
    page.screenshot(path=str(shots / "fid-configure-mps.png"), full_page=True)

    page.goto("/resource-classes/")
    expect(page.get_by_test_id("shared-caveat").filter(has_text="MPS share").first).to_be_visible()
    page.screenshot(path=str(shots / "fid-resource-classes.png"), full_page=True)
