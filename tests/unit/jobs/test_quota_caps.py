"""Per-cluster quota caps (issue 32, item 4): admins set them on the quota, over the API and on the team page; bad
input is refused with every problem at once and nothing stored; a change is audited; the team page and the API
show them."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from core.models import AuditEvent
from gpus.choices import ClusterHealth
from gpus.models import Cluster, ResourceClass
from jobs import actions
from jobs.models import Quota, QuotaClusterCap
from tests.sim_objects import H100


@pytest.fixture
def quota(inventory, people):
    """Vision's H100 quota (8 guaranteed, 16 limit) and a second cluster, cloud, beside the default one."""
    Cluster.objects.create(name="cloud", connection="simulated", health=ClusterHealth.REACHABLE)
    return actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 8, 16)


def caps_of(quota: Quota) -> dict[str, int]:
    return dict(QuotaClusterCap.objects.filter(quota=quota).values_list("cluster__name", "limit"))


def test_the_api_sets_reads_and_audits_caps(api_client, quota, people):
    api_client.force_login(people["admin"])
    response = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"cluster_caps": {"cloud": 4}}, format="json")
    assert response.status_code == 200, response.json()
    assert response.json()["cluster_caps"] == {"cloud": 4}
    assert caps_of(quota) == {"cloud": 4}
    event = AuditEvent.objects.filter(action="quota.set", object_id=str(quota.pk)).latest("when", "id")
    assert (event.before["cluster_caps"], event.after["cluster_caps"]) == ({}, {"cloud": 4})
    # Leaving the caps out keeps them; a member reads them.
    assert api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 12}, format="json").status_code == 200
    assert caps_of(quota) == {"cloud": 4}
    api_client.force_login(people["alice"])
    assert api_client.get(f"/api/v1/quotas/{quota.pk}/").json()["cluster_caps"] == {"cloud": 4}
    # {} removes them all.
    api_client.force_login(people["admin"])
    assert api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"cluster_caps": {}}, format="json").status_code == 200
    assert caps_of(quota) == {}


def test_bad_caps_are_refused_with_every_problem_at_once_and_nothing_stored(api_client, quota, people):
    actions.set_quota(people["admin"], people["vision"], quota.resource_class, 8, 16, cluster_caps={"cloud": 2})
    audits = AuditEvent.objects.count()
    api_client.force_login(people["admin"])
    payload = {"limit": 6, "cluster_caps": {"mars": 1, "cloud": 12, "default": -1}}
    response = api_client.patch(f"/api/v1/quotas/{quota.pk}/", payload, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert errors["limit"] == ["The limit (6) must be at least the guaranteed amount (8)."]
    assert errors["cluster_caps"] == [
        "No cluster 'mars'; the fleet has cloud, default.",
        "The cap on cloud (12) is above the quota's limit (6); a cap only narrows the fleet-wide limit: lower it, "
        "or raise the limit.",
        "The cap on default must be a whole number of units, 0 or more (got -1).",
    ]
    quota.refresh_from_db()
    assert (quota.limit, caps_of(quota)) == (16, {"cloud": 2})
    assert AuditEvent.objects.count() == audits
    # Not an object at all; and a lowered limit may not leave a kept cap above it.
    shape = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"cluster_caps": [4]}, format="json")
    assert shape.status_code == 400 and "cluster name → units" in shape.json()["cluster_caps"][0]
    actions.set_quota(people["admin"], people["vision"], quota.resource_class, 2, 16, cluster_caps={"cloud": 10})
    lowered = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"limit": 8}, format="json")
    assert lowered.status_code == 400
    assert lowered.json()["cluster_caps"] == ["The cap on cloud (10) would be above the limit (8); lower the cap too."]
    assert Quota.objects.get(pk=quota.pk).limit == 16


def test_members_cannot_set_caps(api_client, quota, people):
    api_client.force_login(people["alice"])
    response = api_client.patch(f"/api/v1/quotas/{quota.pk}/", {"cluster_caps": {"cloud": 1}}, format="json")
    assert response.status_code == 403
    assert caps_of(quota) == {}


def test_a_cap_on_a_cluster_a_scoped_class_does_not_count_is_refused(quota, people):
    rc = quota.resource_class
    rc.cluster = Cluster.objects.get(name="cloud")
    rc.save()
    with pytest.raises(ValidationError) as refused:
        actions.set_quota(people["admin"], people["vision"], rc, 8, 16, cluster_caps={"default": 2})
    assert "counts the nodes of cluster cloud only; a cap on default would mean nothing" in str(refused.value)
    assert caps_of(quota) == {}


def test_the_team_page_sets_and_shows_caps(client, quota, people):
    client.force_login(people["admin"])
    url = reverse("jobs:quota-edit", args=["vision", quota.pk])
    form = {f"quota-{quota.pk}-{k}": v for k, v in {"guaranteed": 8, "limit": 16, "monthly_gpu_hours": ""}.items()}
    bad = client.post(url, {**form, f"quota-{quota.pk}-cluster_caps": "cloud=x, mars"})
    assert bad.status_code == 200
    page = bad.content.decode()
    assert "&#x27;cloud=x&#x27;: write cluster=units, e.g. cloud=4." in page
    assert "&#x27;mars&#x27;: write cluster=units, e.g. cloud=4." in page
    refused = client.post(url, {**form, f"quota-{quota.pk}-cluster_caps": "cloud=40"})
    assert "The cap on cloud (40) is above the quota&#x27;s limit (16)" in refused.content.decode()
    assert caps_of(quota) == {}
    saved = client.post(url, {**form, f"quota-{quota.pk}-cluster_caps": "cloud=4"})
    assert saved.status_code == 302
    assert caps_of(quota) == {"cloud": 4}
    client.force_login(people["alice"])
    page = client.get(reverse("jobs:team-detail", args=["vision"])).content.decode()
    assert 'data-testid="quota-caps"' in page and 'at most <strong data-cluster="cloud">4</strong> on cloud' in page
