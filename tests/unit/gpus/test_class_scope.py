"""A resource class split per cluster by the admin's choice (issue 32, item 3): scoped to one cluster, a class counts
that cluster's nodes only and the same GPUs elsewhere fall to a fleet-wide class of their own; two classes of the
same resource and product on one scope are a clash, refused with what to do; the page and the API both offer it."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from core.models import AuditEvent
from gpus import fleet
from gpus.class_admin import update_class
from gpus.models import Cluster, Node, ResourceClass
from tests.sim_objects import H100

CLOUD = {"name": "cloud", "display_name": "GKE europe-west4", "connection": "simulated", "sim_scenario": "cloud"}
CLOUD_H100 = 16  # two a3-highgpu-8g nodes


@pytest.fixture
def cloud(cluster, people, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    row = fleet.register(people["admin"], fleet.ClusterInput(**CLOUD))
    assert fleet.sync(row) is not None
    return row


def test_scoping_a_class_splits_its_totals_and_the_rest_becomes_a_fleet_wide_class(cloud, people):
    h100 = ResourceClass.objects.get(key=H100)
    fleet_total = h100.total
    default = Cluster.objects.get(name="default")
    scoped = update_class(people["admin"], h100, cluster=default)
    assert scoped.key == f"{H100}@default" and scoped.total == fleet_total - CLOUD_H100
    rest = ResourceClass.objects.get(key=H100)
    assert (rest.cluster, rest.total, rest.pk != h100.pk) == (None, CLOUD_H100, True)
    event = AuditEvent.objects.filter(object_type="gpus.ResourceClass", object_id=str(h100.pk)).latest("when", "id")
    assert (event.before["cluster"], event.after["cluster"]) == (None, "default")
    # A later sync keeps the split; the node page lists each node's own class.
    assert fleet.sync(cloud) is not None
    assert ResourceClass.objects.get(pk=h100.pk).total == fleet_total - CLOUD_H100
    assert ResourceClass.objects.get(key=H100).total == CLOUD_H100
    cloud_node = Node.objects.filter(cluster=cloud, product_label=rest.product_label).first()
    assert list(ResourceClass.objects.on_node(cloud_node)) == [rest]


def test_two_classes_of_one_product_on_one_scope_are_a_clash(cloud, people):
    h100 = ResourceClass.objects.get(key=H100)
    default = Cluster.objects.get(name="default")
    update_class(people["admin"], h100, cluster=default)
    rest = ResourceClass.objects.get(key=H100)
    with pytest.raises(ValidationError) as clash:
        update_class(people["admin"], rest, cluster=default)
    expected = f"({H100}@default) already counts nvidia.com/gpu on NVIDIA-H100-80GB-HBM3 nodes on cluster default"
    assert expected in str(clash.value)
    with pytest.raises(ValidationError) as back:
        update_class(people["admin"], h100, cluster=None)
    assert "fleet-wide: two classes of the same resource and product on the same scope would clash" in str(back.value)
    assert ResourceClass.objects.get(pk=h100.pk).cluster == default
    # Scoping the rest to cloud is fine: the fleet-wide class is then offered nowhere.
    update_class(people["admin"], rest, cluster=cloud)
    assert ResourceClass.objects.get(pk=rest.pk).key == f"{H100}@cloud"


def test_the_class_page_and_api_offer_the_scope_and_say_what_clashes(cloud, people, client, api_client):
    h100 = ResourceClass.objects.get(key=H100)
    client.force_login(people["admin"])
    url = reverse("gpus:resourceclass-update", args=[h100.pk])
    saved = client.post(url, {f"rc-{h100.pk}-alias": "", f"rc-{h100.pk}-cluster": "default"})
    assert saved.status_code == 302
    rest = ResourceClass.objects.get(key=H100)
    refused = client.post(
        reverse("gpus:resourceclass-update", args=[rest.pk]),
        {f"rc-{rest.pk}-alias": "", f"rc-{rest.pk}-cluster": "default"},
    )
    assert refused.status_code == 400 and "would clash" in refused.content.decode()
    api_client.force_login(people["admin"])
    answer = api_client.patch(f"/api/v1/resource-classes/{rest.pk}/", {"cluster": "default"}, format="json")
    assert answer.status_code == 400 and "would clash" in answer.json()["cluster"][0]
    answer = api_client.patch(f"/api/v1/resource-classes/{rest.pk}/", {"cluster": "cloud"}, format="json")
    assert answer.status_code == 200 and answer.json()["cluster"] == "cloud"
    assert answer.json()["key"] == f"{H100}@cloud"
    api_client.force_login(people["alice"])
    assert api_client.patch(f"/api/v1/resource-classes/{rest.pk}/", {"cluster": None}, format="json").status_code == 403


def test_a_cluster_a_class_is_scoped_to_is_not_removed(cloud, people):
    rest_of = ResourceClass.objects.get(key=H100)
    update_class(people["admin"], rest_of, cluster=cloud)
    with pytest.raises(fleet.Refused) as refused:
        fleet.remove(people["admin"], cloud)
    assert f"Resource classes are scoped to cluster cloud: {H100}@cloud." in str(refused.value)
    assert Cluster.objects.filter(name="cloud").exists()


def test_the_api_gives_each_class_s_units_per_cluster_as_the_fleet_counts_them(cloud, people, api_client):
    api_client.force_authenticate(people["alice"])

    def per_cluster() -> dict[str, dict[str, tuple[int, int]]]:
        listed = api_client.get("/api/v1/resource-classes/", {"limit": 500}).json()["results"]
        return {c["key"]: {s["cluster"]: (s["free"], s["total"]) for s in c["clusters"]} for c in listed}

    h100 = per_cluster()[H100]
    assert set(h100) == {"default", "cloud"} and h100["cloud"][1] == CLOUD_H100
    assert sum(total for _, total in h100.values()) == ResourceClass.objects.get(key=H100).total
    update_class(people["admin"], ResourceClass.objects.get(key=H100), cluster=Cluster.objects.get(name="default"))
    split = per_cluster()
    assert set(split[f"{H100}@default"]) == {"default"} and set(split[H100]) == {"cloud"}
    Cluster.objects.filter(name="cloud").update(health="unreachable")  # its units count, none free
    assert per_cluster()[H100]["cloud"] == (0, CLOUD_H100)
