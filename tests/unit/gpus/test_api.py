"""Inventory API: filtering, pagination, visibility per team, admin-only edits with audit."""

import pytest

from core.models import AuditEvent
from gpus.models import Node, ResourceClass
from gpus.reconcile import sync_inventory

pytestmark = pytest.mark.django_db


@pytest.fixture
def dedicated(inventory, people):
    """One H100 node dedicated to team vision."""
    name = Node.objects.filter(product="NVIDIA-H100-80GB-HBM3").order_by("name").first().name
    inventory.patch_node_labels(name, {"gpu-portal.io/team": "vision"})
    sync_inventory(inventory)
    return name


def names(response):
    return {n["name"] for n in response.json()["results"]}


def test_filter_by_product_and_health(api_client, inventory, people):
    api_client.force_login(people["admin"])
    h100 = api_client.get("/api/v1/nodes/", {"product": "NVIDIA-H100-80GB-HBM3", "limit": 100}).json()
    assert h100["count"] == Node.objects.filter(product="NVIDIA-H100-80GB-HBM3").count() > 0
    assert {n["product"] for n in h100["results"]} == {"NVIDIA-H100-80GB-HBM3"}
    broken = api_client.get("/api/v1/nodes/", {"health": "error"}).json()
    assert broken["count"] == Node.objects.filter(health="error").count() >= 1


def test_pagination(api_client, inventory, people):
    api_client.force_login(people["admin"])
    page = api_client.get("/api/v1/nodes/", {"limit": 3, "offset": 0}).json()
    assert len(page["results"]) == 3 and page["count"] == Node.objects.count() and page["next"]


def test_node_detail_has_gpus_partitions_and_diagnosis(api_client, inventory, people):
    api_client.force_login(people["alice"])
    node = Node.objects.get(mig_strategy="mixed")
    data = api_client.get(f"/api/v1/nodes/{node.name}/").json()
    assert data["name"] == node.name
    assert len(data["gpus"]) == node.gpu_count
    assert {p["profile"] for p in data["gpus"][0]["mig_partitions"]} == {"1g.10gb", "2g.20gb", "3g.40gb"}
    assert [d["layer"] for d in data["diagnosis"]][:3] == ["node", "driver", "device-plugin"]


def test_team_dedicated_node_visibility(api_client, dedicated, people):
    for user, sees in [("alice", True), ("bob", False), ("outsider", False), ("admin", True)]:
        api_client.force_login(people[user])
        listed = dedicated in names(api_client.get("/api/v1/nodes/", {"limit": 200}))
        detail = api_client.get(f"/api/v1/nodes/{dedicated}/").status_code
        gpus = api_client.get("/api/v1/gpus/", {"node": dedicated}).json()["count"]
        assert listed is sees, user
        assert detail == (200 if sees else 404), user
        assert (gpus > 0) is sees, user


def test_team_filter_lists_shared_and_own_nodes(api_client, dedicated, people):
    api_client.force_login(people["admin"])
    for_nlp = names(api_client.get("/api/v1/nodes/", {"team": "nlp", "limit": 200}))
    for_vision = names(api_client.get("/api/v1/nodes/", {"team": "vision", "limit": 200}))
    assert dedicated in for_vision and dedicated not in for_nlp
    assert for_nlp < for_vision


def test_gpu_and_partition_filters(api_client, inventory, people):
    api_client.force_login(people["alice"])
    node = Node.objects.get(mig_strategy="mixed")
    parts = api_client.get("/api/v1/mig-partitions/", {"node": node.name, "profile": "3g.40gb", "limit": 100}).json()
    assert parts["count"] == node.gpu_count
    assert all(p["start"] == 4 and p["size"] == 4 for p in parts["results"])


def test_resource_classes_hidden_from_members_and_editable_by_admins(api_client, inventory, people):
    rc = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3")
    api_client.force_login(people["bob"])
    assert api_client.patch(f"/api/v1/resource-classes/{rc.pk}/", {"alias": "x"}, format="json").status_code == 403
    api_client.force_login(people["admin"])
    response = api_client.patch(
        f"/api/v1/resource-classes/{rc.pk}/", {"alias": "H100 (training)", "hidden": True, "total": 1}, format="json"
    )
    assert response.status_code == 200
    rc.refresh_from_db()
    assert rc.alias == "H100 (training)" and rc.hidden and rc.total == 64, "counts are read-only"
    event = AuditEvent.objects.get(action="resource_class.update", object_id=str(rc.pk))
    assert event.before["alias"] == "" and event.after["alias"] == "H100 (training)" and event.actor == people["admin"]
    api_client.force_login(people["bob"])
    keys = {c["key"] for c in api_client.get("/api/v1/resource-classes/", {"limit": 100}).json()["results"]}
    assert rc.key not in keys
    assert api_client.get(f"/api/v1/resource-classes/{rc.pk}/").status_code == 404


def test_reconcile_keeps_admin_edits(api_client, inventory, people):
    rc = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-H100-80GB-HBM3")
    rc.alias, rc.hidden = "Big iron", True
    rc.save()
    sync_inventory(inventory)
    rc.refresh_from_db()
    assert (rc.alias, rc.hidden) == ("Big iron", True)


def test_inventory_is_read_only_over_the_api(api_client, inventory, people):
    api_client.force_login(people["admin"])
    node = Node.objects.first()
    assert api_client.delete(f"/api/v1/nodes/{node.name}/").status_code == 405
    assert api_client.post("/api/v1/gpus/", {}, format="json").status_code == 405


def test_node_api_exposes_what_kind_of_node_it_is_read_only(api_client, inventory, people):
    """The managed EKS L4 node of the demo (one GPU marked unhealthy): provider, instance type, where the model came
    from, architecture and unhealthy GPUs come back; a PATCH cannot change any of them."""
    api_client.force_login(people["alice"])
    node = Node.objects.get(provider="eks")
    data = api_client.get(f"/api/v1/nodes/{node.name}/").json()
    assert data["provider"] == "eks" and data["instance_type"] == "g6.12xlarge"
    assert data["product_source"] == "node.kubernetes.io/instance-type=g6.12xlarge"
    assert (data["architecture"], data["clique"], data["unhealthy_gpus"]) == ("amd64", "", 1)
    assert data["driver_upgrade_state"] == "" and data["blocked_reason"] == ""
    listed = api_client.get("/api/v1/nodes/", {"limit": 200}).json()["results"]
    row = next(n for n in listed if n["name"] == node.name)
    assert row["unhealthy_gpus"] == 1 and row["provider"] == "eks"
    api_client.force_login(people["admin"])
    answer = api_client.patch(f"/api/v1/nodes/{node.name}/", {"provider": "gke"}, format="json")
    assert answer.status_code == 405
    assert Node.objects.get(pk=node.pk).provider == "eks"


def test_node_api_says_why_work_is_kept_off(api_client, inventory, people):
    api_client.force_login(people["admin"])
    node = Node.objects.filter(gone_at__isnull=True).exclude(provider="eks").first()
    Node.objects.filter(pk=node.pk).update(
        driver_upgrade_state="upgrade-failed", blocked_reason="its driver upgrade failed"
    )
    data = api_client.get(f"/api/v1/nodes/{node.name}/").json()
    assert (data["driver_upgrade_state"], data["blocked_reason"]) == ("upgrade-failed", "its driver upgrade failed")
