"""The carving pages and API: admin-only, a preview that draws the layout and says what the node advertises,
refusals with reasons, and an operation that can be followed and reverted."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest
from django.urls import reverse

from core.models import AuditEvent
from gpus.choices import NodeConfigState
from gpus.models import NodeConfigOperation
from gpus.nodeconfig import advance_operations
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db

MIG_NODE = "gpu-a100-mig-01"


@pytest.fixture
def admin_client(client, people, inventory):
    client.login(username="admin", password=PASSWORD)
    return client


def test_non_admins_cannot_see_or_use_the_pages_or_the_api(client, api_client, people, inventory):
    client.login(username="alice", password=PASSWORD)
    assert client.get(reverse("gpus:node-configure", args=[MIG_NODE])).status_code == 404
    assert client.get(reverse("gpus:nodeconfig-list")).status_code == 404
    page = client.get(reverse("gpus:node-detail", args=[MIG_NODE])).content.decode()
    assert 'data-testid="configure-node"' not in page
    url = reverse("api:nodeconfigoperation-list")
    assert api_client.post(url, {"node": MIG_NODE, "kind": "mig", "preset": "all-1g.10gb"}).status_code in (401, 403)
    api_client.force_authenticate(people["alice"])
    assert api_client.get(url).status_code == 403
    assert api_client.post(url, {"node": MIG_NODE, "kind": "mig", "preset": "all-1g.10gb"}).status_code == 403
    assert not NodeConfigOperation.objects.exists()


def test_preview_draws_the_layout_and_what_the_node_will_advertise(admin_client):
    url = reverse("gpus:node-configure", args=[MIG_NODE])
    page = admin_client.get(url).content.decode()
    assert 'data-testid="current-layout"' in page and "1g.10gb@0, 1g.10gb@1, 2g.20gb@2, 3g.40gb@4" in page
    form = {"kind": "mig", "preset": "", "preview": "1", "replicas": "1"}
    form.update({f"gpu_{i}": "3g.40gb, 3g.40gb" for i in range(8)})
    form["gpu_7"] = "off"
    response = admin_client.post(url, form)
    page = response.content.decode()
    assert response.status_code == 200 and 'data-testid="preview"' in page
    assert page.count('data-testid="proposed-partition"') == 14  # 2 per GPU on 7 GPUs
    assert 'data-resource="nvidia.com/mig-3g.40gb"><code>nvidia.com/mig-3g.40gb</code>: <strong>14</strong>' in page
    assert 'data-resource="nvidia.com/gpu"><code>nvidia.com/gpu</code>: <strong>1</strong>' in page
    assert "will disappear" in page  # 1g.10gb and 2g.20gb are only on this node
    assert not NodeConfigOperation.objects.exists()


def test_an_invalid_layout_is_refused_with_the_reason(admin_client, inventory):
    url = reverse("gpus:node-configure", args=[MIG_NODE])
    form = {"kind": "mig", "preset": "", "apply": "1", "replicas": "1"}
    form.update({f"gpu_{i}": "off" for i in range(8)})
    form["gpu_3"] = "3g.40gb@2, 4g.40gb@0"
    page = admin_client.post(url, form).content.decode()
    assert 'data-testid="config-errors"' in page
    assert "GPU 3: 3g.40gb cannot start at slot 2; it may start at 0, 4." in page
    assert not NodeConfigOperation.objects.exists()
    assert inventory.get_node(MIG_NODE)["metadata"]["labels"]["nvidia.com/mig.config"] == "all-balanced"


def test_every_gpus_problems_are_reported_at_once(admin_client, inventory):
    """ux-walk 2 (A5, A09): a layout that reads well but that the hardware refuses (GPU 0) is reported together with
    another GPU's problem in its text (GPU 1), not in a second round once GPU 1 is fixed."""
    url = reverse("gpus:node-configure", args=[MIG_NODE])
    form = {"kind": "mig", "preset": "", "preview": "1", "replicas": "1"}
    form.update({f"gpu_{i}": "off" for i in range(8)})
    form["gpu_0"] = "3g.40gb@2, 3g.40gb@4"
    form["gpu_1"] = "7g.80gb, 1g.10gb"
    page = admin_client.post(url, form).content.decode()
    assert "GPU 0: 3g.40gb cannot start at slot 2; it may start at 0, 4." in page
    assert "GPU 1: " in page
    assert not NodeConfigOperation.objects.exists()


def test_a_preset_sent_back_shows_its_layout_in_the_per_gpu_fields(admin_client):
    """ux-walk 2: after a preset was picked, the per-GPU fields still showed the node's old layout."""
    url = reverse("gpus:node-configure", args=[MIG_NODE])
    form = {"kind": "mig", "preset": "all-3g.40gb", "preview": "1", "replicas": "1"}
    form.update({f"gpu_{i}": "1g.10gb@0, 1g.10gb@1, 2g.20gb@2, 3g.40gb@4" for i in range(8)})
    page = admin_client.post(url, form).content.decode()
    assert page.count('value="3g.40gb@0, 3g.40gb@4"') == 8 and 'value="1g.10gb@0' not in page
    assert "data-preset-layouts=" in page


@pytest.fixture
def clocked(tmp_path, db):
    """The demo cluster on a clock the test moves."""
    from cluster.sim import SimulatedCluster
    from gpus.reconcile import sync_inventory
    from tests.sim_objects import DEMO_SCENARIO

    now = [time.time()]
    sim = SimulatedCluster(tmp_path / "clocked.json", scenario=DEMO_SCENARIO, clock=lambda: now[0])
    sync_inventory(sim)
    return sim, now


def test_apply_creates_an_operation_whose_page_shows_progress_and_revert(admin_client, clocked):
    inventory, now = clocked
    url = reverse("gpus:node-configure", args=[MIG_NODE])
    inventory.fail_next_mig_reconfiguration(MIG_NODE, "boom")
    response = admin_client.post(
        url, {"kind": "mig", "preset": "all-2g.20gb", "apply": "1", "confirm": "1", "replicas": "1"}
    )
    op = NodeConfigOperation.objects.get()
    assert response.status_code == 302 and response["Location"] == op.get_absolute_url()
    assert AuditEvent.objects.filter(action="node.config.request", object_id=str(op.pk)).exists()
    page = admin_client.get(op.get_absolute_url()).content.decode()
    assert 'data-state="pending"' in page and 'http-equiv="refresh"' in page
    node_page = admin_client.get(reverse("gpus:node-detail", args=[MIG_NODE])).content.decode()
    assert 'data-testid="node-reconfiguring"' in node_page
    # A second request while this one runs is refused.
    again = admin_client.post(
        url, {"kind": "mig", "preset": "all-3g.40gb", "apply": "1", "confirm": "1", "replicas": "1"}
    )
    assert "already being reconfigured" in again.content.decode()

    advance_operations(inventory, now=datetime.fromtimestamp(now[0], UTC))
    op.refresh_from_db()
    assert op.state == NodeConfigState.WAITING
    now[0] += 60  # MIG Manager's 30 s are over
    advance_operations(inventory, now=datetime.fromtimestamp(now[0], UTC))
    op.refresh_from_db()
    assert op.state == NodeConfigState.FAILED
    page = admin_client.get(op.get_absolute_url()).content.decode()
    assert 'data-testid="op-reason"' in page and 'data-testid="revert"' in page
    assert 'http-equiv="refresh"' not in page
    response = admin_client.post(reverse("gpus:nodeconfig-revert", args=[op.pk]))
    revert = NodeConfigOperation.objects.exclude(pk=op.pk).get()
    assert response["Location"] == revert.get_absolute_url() and revert.requested["config"] == "all-balanced"


def test_api_creates_reads_dry_runs_and_refuses(api_client, people, inventory):
    api_client.force_authenticate(people["admin"])
    url = reverse("api:nodeconfigoperation-list")
    dry = api_client.post(url, {"node": "gpu-a10-01", "kind": "time-slicing", "replicas": 8, "dry_run": True})
    assert dry.status_code == 200
    assert dry.json()["expected_resources"] == {"nvidia.com/gpu": 32}
    assert any("no memory isolation" in w for w in dry.json()["warnings"])
    assert not NodeConfigOperation.objects.exists()

    bad = api_client.post(
        url, {"node": MIG_NODE, "kind": "mig", "gpus": ["7g.80gb, 1g.10gb"] + ["off"] * 7}, format="json"
    )
    assert bad.status_code == 400
    assert bad.json()["layout"] == [
        "GPU 0: The instances need 8 compute slices; a A100-80GB has 7, so at most 7 × 1g.10gb."
    ]  # refused before any placement search (audit finding 9)
    crowded = api_client.post(
        url, {"node": MIG_NODE, "kind": "mig", "gpus": ["1g.10gb@0, 1g.10gb@4, 4g.40gb"] + ["off"] * 7}, format="json"
    )
    assert crowded.status_code == 400
    assert "do not fit in the slots left free on this A100-80GB" in crowded.json()["layout"][0]
    pinned = api_client.post(
        url, {"node": MIG_NODE, "kind": "mig", "gpus": ["7g.80gb@0, 1g.10gb@7"] + ["off"] * 7}, format="json"
    )
    assert pinned.status_code == 400 and "GPU 0: 1g.10gb cannot start at slot 7" in pinned.json()["layout"][0]

    created = api_client.post(url, {"node": MIG_NODE, "kind": "mig", "preset": "all-1g.10gb"}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["state"] == "pending" and body["config"] == "all-1g.10gb"
    assert body["expected_resources"] == {"nvidia.com/mig-1g.10gb": 56}
    assert body["previous"]["config"] == "all-balanced"
    detail = api_client.get(body["url"])
    assert detail.status_code == 200 and detail.json()["id"] == body["id"]
    listed = api_client.get(url, {"node": MIG_NODE, "state": "pending"}).json()
    assert [o["id"] for o in listed["results"]] == [body["id"]]
    revert = api_client.post(reverse("api:nodeconfigoperation-revert", args=[body["id"]]))
    assert revert.status_code == 400 and "Only the node's latest reconfiguration" in revert.json()["detail"][0]


def test_the_schema_describes_the_carving_endpoints(openapi_schema):
    schema = openapi_schema
    paths = schema["paths"]
    assert {"get", "post"} <= set(paths["/api/v1/node-config-operations/"])
    assert "post" in paths["/api/v1/node-config-operations/{id}/revert/"]
    components = schema["components"]["schemas"]
    assert components["NodeConfigStateEnum"]["enum"] == [
        "pending", "draining", "applying", "waiting", "refreshing", "done", "failed", "aborted",
    ]  # fmt: skip
    assert set(components["NodeConfigRequestRequest"]["properties"]) >= {"node", "kind", "preset", "gpus", "replicas"}


def test_a_huge_mig_count_is_refused_before_any_search_naming_the_maximum(api_client, people, inventory):
    """Audit finding 9: ``10000000x1g.10gb`` tied up a web worker; the count is bounded first."""
    api_client.force_authenticate(people["admin"])
    url = reverse("api:nodeconfigoperation-list")
    body = {"node": MIG_NODE, "kind": "mig", "gpus": ["10000000x1g.10gb"] + ["off"] * 7, "dry_run": True}
    response = api_client.post(url, body, format="json")
    assert response.status_code == 400
    assert response.json()["layout"] == ["GPU 0: At most 7 × 1g.10gb fit on one A100-80GB; 10000000 were asked for."]
    many = api_client.post(url, {**body, "gpus": ["off"] * 100000}, format="json")
    assert many.status_code == 400 and "has 8 GPUs" in many.json()["layout"][0]
    unicode = api_client.post(url, {**body, "gpus": ["\u00b2x1g.10gb"] + ["off"] * 7}, format="json")
    assert unicode.status_code == 400 and "must be a number" in unicode.json()["layout"][0]
