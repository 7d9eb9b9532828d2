"""The portal's main flows in a real Chromium: logging in, reading capacity and node health, the MIG drawing, API
tokens, and team-dedicated nodes. Expected values come from the database rows the reconcile task wrote for the
demo cluster, so a wrong number or a partition drawn in the wrong slot fails the test."""

import json
import re
import urllib.error
import urllib.request

import pytest
from django.conf import settings

from gpus.choices import NodeHealth, ResourceKind
from gpus.models import MigPartition, Node, ResourceClass
from gpus.reconcile import sync_inventory

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

H100 = "NVIDIA-H100-80GB-HBM3"


def _run_job(cluster, namespace: str, name: str, gpus: int, product: str = H100) -> None:
    """Start a Job holding ``gpus`` whole GPUs of ``product`` in the simulated cluster."""
    cluster.ensure_namespace(namespace)
    managed = {"app.kubernetes.io/managed-by": "gpu-portal"}
    cluster.create_workload(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace, "labels": managed},
            "spec": {
                "template": {
                    "metadata": {"labels": managed},
                    "spec": {
                        "restartPolicy": "Never",
                        "nodeSelector": {"nvidia.com/gpu.product": product},
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [
                            {
                                "name": "train",
                                "image": "busybox",
                                "command": ["sleep", "3600"],
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                            }
                        ],
                    },
                }
            },
        }
    )


def _device_plugin_missing_node() -> Node:
    """The node whose diagnosis says the device plugin advertises nothing."""
    nodes = [
        n
        for n in Node.objects.filter(health=NodeHealth.ERROR)
        if any(f["layer"] == "device-plugin" and f["severity"] == "error" for f in n.diagnosis)
    ]
    assert len(nodes) == 1, "the demo scenario has exactly one node without a device plugin"
    return nodes[0]


def _api_get(live_server, path: str, token: str | None = None) -> tuple[int, dict]:
    """GET an API path without cookies (so only the token can authenticate)."""
    request = urllib.request.Request(live_server.url + path, headers={"Accept": "application/json"})
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_wrong_password_shows_the_error_and_stays_on_the_login_page(page, people):
    login(page, "alice", "not-the-password")

    assert page.url.endswith("/login/")
    error = page.get_by_test_id("login-error")
    expect(error).to_be_visible()
    expect(error).to_contain_text("correct username and password")
    expect(page.get_by_label("Username")).to_have_value("alice")
    expect(page.get_by_test_id("current-user")).to_have_count(0)


def test_overview_shows_capacity_bars_and_the_nodes_needing_attention(page, live_server, inventory, people, artifacts):
    # Enough GPUs in use that a bar scaled to the wrong base (allocatable instead of total) would look different.
    _run_job(inventory, "team-vision", "train-resnet", gpus=8)
    _run_job(inventory, "team-vision", "train-vit", gpus=6)
    sync_inventory(inventory)
    h100 = ResourceClass.objects.get(kind=ResourceKind.GPU, product_label=H100)
    assert h100.in_use == 14 and h100.total > h100.allocatable > h100.in_use  # the setup did what the test needs
    broken = _device_plugin_missing_node()

    login(page, "alice")

    assert page.url == live_server.url + "/"
    expect(page.get_by_role("heading", name="Cluster overview")).to_be_visible()
    expect(page.get_by_test_id("current-user")).to_have_text("alice")
    bar = page.locator(f'[data-testid="capacity"][data-class-key="{h100.key}"]')
    expect(bar).to_be_visible()
    expect(bar).to_contain_text(h100.display_name)
    expect(bar.locator('[data-role="in-use"]')).to_have_text(str(h100.in_use))
    expect(bar.locator('[data-role="allocatable"]')).to_have_text(str(h100.allocatable))
    expect(bar.locator('[data-role="free"]')).to_have_text(str(h100.free))
    # The drawn segments are the numbers' share of the total (the stylesheet loaded and the widths are right).
    track = bar.locator(".bar").bounding_box()["width"]
    used = bar.locator('[data-role="bar-used"]').bounding_box()["width"]
    free = bar.locator('[data-role="bar-free"]').bounding_box()["width"]
    assert used / track == pytest.approx(h100.in_use / h100.total, abs=0.01)
    assert free / track == pytest.approx(h100.free / h100.total, abs=0.01)

    attention = page.get_by_test_id("attention")
    item = attention.locator(f'li[data-node="{broken.name}"]')
    expect(item).to_contain_text("GPUs are labelled but nothing is allocatable")
    expect(item.get_by_role("link", name=broken.name)).to_have_attribute("href", f"/nodes/{broken.name}/")
    healthy = Node.objects.filter(health=NodeHealth.HEALTHY).first()
    expect(attention.locator(f'li[data-node="{healthy.name}"]')).to_have_count(0)
    page.screenshot(path=artifacts / "overview.png", full_page=True)

    with page.expect_navigation():
        item.get_by_role("link", name=broken.name).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(broken.name)


def test_overview_without_a_sync_says_the_worker_must_run(page, people):
    login(page, "alice")

    expect(page.get_by_test_id("no-sync")).to_contain_text("has not been read")
    expect(page.get_by_test_id("no-sync")).to_contain_text("worker")


def test_node_list_filtered_by_product_shows_only_those_nodes(page, live_server, inventory, people):
    product = "NVIDIA-A100-SXM4-80GB"
    expected = set(Node.objects.present().filter(product=product).values_list("name", flat=True))
    assert expected and Node.objects.present().exclude(product=product).exists()
    login(page, "alice")
    page.goto("/nodes/")
    assert page.locator('[data-testid="node-table"] tbody tr').count() == Node.objects.present().count()

    page.get_by_label("GPU product").select_option(product)
    with page.expect_navigation():
        page.get_by_role("button", name="Filter").click()

    assert f"product={product}" in page.url
    rows = page.locator('[data-testid="node-table"] tbody tr')
    assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.node)")) == expected
    assert set(rows.evaluate_all("rows => rows.map(r => r.dataset.product)")) == {product}
    expect(page.get_by_label("GPU product")).to_have_value(product)


@pytest.mark.parametrize("strategy", ["mixed", "single"])
def test_mig_node_draws_each_partition_in_its_slots(page, live_server, inventory, people, artifacts, strategy):
    node = Node.objects.get(mig_strategy=strategy, gpus__mig_enabled=True, gpus__index=0)
    partitions = MigPartition.objects.filter(gpu__node=node).select_related("gpu")
    assert partitions.exists()
    login(page, "alice")
    page.goto(f"/nodes/{node.name}/")

    for gpu in node.gpus.filter(mig_enabled=True):
        expected = [(p.profile, p.start, p.size) for p in partitions if p.gpu_id == gpu.pk]
        drawing = page.locator(f'[data-testid="mig-layout"] .mig-gpu[data-gpu-index="{gpu.index}"]')
        cells = drawing.get_by_test_id("mig-partition")
        drawn = cells.evaluate_all(
            "els => els.map(e => [e.dataset.profile, +e.dataset.start, +e.dataset.size,"
            " getComputedStyle(e).gridColumnStart, getComputedStyle(e).gridColumnEnd, e.textContent])"
        )
        assert [(profile, start, size) for profile, start, size, *_ in drawn] == expected
        for (profile, start, size, column_start, column_end, text), cell in zip(drawn, cells.all(), strict=True):
            assert (column_start, column_end) == (str(start + 1), f"span {size}")
            assert profile in text
            # On screen the partition covers exactly the columns of its first and last slot number.
            box = cell.bounding_box()
            first = drawing.locator(f'[data-slot="{start}"]').bounding_box()
            last = drawing.locator(f'[data-slot="{start + size - 1}"]').bounding_box()
            assert box["x"] == pytest.approx(first["x"], abs=1)
            assert box["x"] + box["width"] == pytest.approx(last["x"] + last["width"], abs=1)
        slots = drawing.locator(".mig-slotnum").count()
        empty = drawing.get_by_test_id("mig-empty")
        assert empty.count() == slots - sum(size for _, _, size in expected)
        used = {s for _, start, size in expected for s in range(start, start + size)}
        assert {int(s) for s in empty.evaluate_all("els => els.map(e => e.dataset.start)")} == set(range(slots)) - used

    mig = page.locator('[data-testid="diagnosis"] li[data-layer="mig"]')
    expect(mig).to_have_attribute("data-severity", "ok")
    expect(mig).to_contain_text(f"MIG {strategy} strategy")
    page.screenshot(path=artifacts / f"node-{node.name}.png", full_page=True)


def test_node_without_device_plugin_shows_the_nothing_allocatable_error(page, live_server, inventory, people):
    broken = _device_plugin_missing_node()
    login(page, "alice")
    page.goto(f"/nodes/{broken.name}/")

    expect(page.get_by_test_id("node-health")).to_have_text(NodeHealth.ERROR.label)
    finding = page.locator('[data-testid="diagnosis"] li[data-layer="device-plugin"]')
    expect(finding).to_have_attribute("data-severity", "error")
    expect(finding).to_contain_text("GPUs are labelled but nothing is allocatable")
    expect(finding).to_contain_text("What to do:")
    expect(finding).to_contain_text("nvidia-device-plugin-daemonset")
    expect(page.get_by_test_id("gpu-resources")).to_have_count(0)


def test_api_token_is_shown_once_works_and_stops_working_when_revoked(page, live_server, inventory, people):
    login(page, "alice")
    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Name").fill("nightly training pipeline")
    page.get_by_label("Valid for (days)").fill("7")
    page.get_by_label("Scope").select_option("read")
    with page.expect_navigation():
        page.get_by_role("button", name="Issue token").click()

    shown = page.get_by_test_id("new-token")
    expect(shown).to_contain_text("only time it is shown")
    token = shown.locator("code").inner_text().strip()
    assert re.fullmatch(r"gpp_[0-9a-f]{8}_[A-Za-z0-9_-]+", token)
    prefix = token.split("_")[1]
    row = page.locator(f'tr[data-token-prefix="{prefix}"]')
    expect(row.locator('[data-role="status"]')).to_have_text("active")
    expect(row).to_contain_text("read")

    status, body = _api_get(live_server, "/api/v1/nodes/", token)
    assert status == 200
    assert body["count"] == Node.objects.visible_to(people["alice"]).present().count() > 0
    assert _api_get(live_server, "/api/v1/nodes/")[0] == 401

    # Coming back to the page (not re-sending the form) never shows the secret again.
    page.goto("/account/tokens/")
    expect(page.get_by_test_id("new-token")).to_have_count(0)
    expect(page.locator("tr[data-token-prefix]")).to_have_count(1)
    assert token not in page.content()

    with page.expect_navigation():
        row.get_by_role("button", name="Revoke token nightly training pipeline").click()
    expect(row.locator('[data-role="status"]')).to_have_text("revoked")
    expect(row.get_by_role("button")).to_have_count(0)
    status, body = _api_get(live_server, "/api/v1/nodes/", token)
    assert status == 401
    assert "revoked" in body["detail"]


def test_outsider_logs_in_but_does_not_see_a_team_dedicated_node(new_page, live_server, inventory, people):
    dedicated = "gpu-h100-07"
    inventory.patch_node_labels(dedicated, {settings.PORTAL_TEAM_NODE_LABEL: "vision"})
    sync_inventory(inventory)
    assert Node.objects.get(name=dedicated).team == people["vision"]

    page = new_page()
    login(page, "outsider")
    expect(page.get_by_test_id("current-user")).to_have_text("outsider")
    expect(page.locator(".account")).to_contain_text("no team")
    page.goto("/nodes/")
    names = page.locator('[data-testid="node-table"] tbody tr').evaluate_all("rows => rows.map(r => r.dataset.node)")
    assert "gpu-h100-01" in names
    assert dedicated not in names
    assert page.goto(f"/nodes/{dedicated}/").status == 404

    member = new_page()
    login(member, "alice")
    member.goto("/nodes/")
    row = member.locator(f'[data-testid="node-table"] tbody tr[data-node="{dedicated}"]')
    expect(row).to_contain_text(people["vision"].name)

    # Logging out is a POST from the top bar; afterwards pages ask to log in again.
    with member.expect_navigation():
        member.get_by_role("button", name="Log out").click()
    member.goto("/nodes/")
    assert "/login/" in member.url


@pytest.mark.parametrize("path", ["/", "/nodes/", "/nodes/gpu-a100-mig-01/", "/resource-classes/", "/account/tokens/"])
def test_pages_fit_a_375px_wide_phone(new_page, live_server, inventory, people, artifacts, path):
    page = new_page(width=375, height=800)
    login(page, "admin")
    response = page.goto(path)

    assert response.status == 200
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    page.get_by_role("button", name="Menu").click()  # a phone's navigation folds behind the Menu button
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Admin")).to_be_in_viewport()
    if path == "/":
        page.screenshot(path=artifacts / "overview-375px.png", full_page=True)
