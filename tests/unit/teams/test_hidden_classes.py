"""Issue 16 finding 8: a hidden resource class is for admins only. Non-admins do not see it on node pages, in
the notebook form, on the team pages (quota rows) or in the quotas API; admins still see it everywhere."""

from __future__ import annotations

import pytest

from gpus.models import Node, ResourceClass
from jobs import actions

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
L4 = "nvidia.com/gpu@NVIDIA-L4"


@pytest.fixture
def hidden(inventory, people):
    """Vision has quotas for H100 (hidden) and L4 (shown)."""
    h100, l4 = ResourceClass.objects.get(key=H100), ResourceClass.objects.get(key=L4)
    actions.set_quota(people["admin"], people["vision"], h100, 1, 2)
    actions.set_quota(people["admin"], people["vision"], l4, 1, 1)
    ResourceClass.objects.filter(pk=h100.pk).update(hidden=True)
    return {**people, "h100": h100, "l4": l4}


@pytest.mark.parametrize(("viewer", "shown"), [("alice", False), ("admin", True)])
def test_team_page_and_team_list_hide_hidden_quota_rows_from_non_admins(client, hidden, viewer, shown):
    client.force_login(hidden[viewer])
    page = client.get("/teams/vision/").content.decode()
    assert (f'data-class-key="{H100}"' in page) is shown
    assert f'data-class-key="{L4}"' in page
    listing = client.get("/teams/").content.decode()
    assert (hidden["h100"].display_name in listing) is shown
    assert hidden["l4"].display_name in listing


@pytest.mark.parametrize(("viewer", "shown"), [("alice", False), ("admin", True)])
def test_node_page_lists_a_hidden_class_only_for_admins(client, hidden, viewer, shown):
    node = Node.objects.filter(product_label="NVIDIA-H100-80GB-HBM3", team__isnull=True).first()
    client.force_login(hidden[viewer])
    response = client.get(f"/nodes/{node.name}/")
    assert response.status_code == 200
    assert (hidden["h100"] in list(response.context["classes"])) is shown


@pytest.mark.parametrize(("viewer", "shown"), [("alice", False), ("admin", True)])
def test_notebook_form_offers_a_hidden_class_only_to_admins(client, hidden, viewer, shown):
    from accounts.choices import MembershipRole
    from accounts.models import Membership

    if viewer == "admin":  # admins see every team's classes; make the admin a member so the form has a team
        Membership.objects.create(user=hidden["admin"], team=hidden["vision"], role=MembershipRole.MEMBER)
    client.force_login(hidden[viewer])
    form = client.get("/notebooks/").context["form"]
    offered = set(form.fields["resource_class"].queryset)
    assert (hidden["h100"] in offered) is shown
    assert hidden["l4"] in offered


@pytest.mark.parametrize(("viewer", "shown"), [("alice", False), ("admin", True)])
def test_quotas_api_leaves_out_hidden_classes_for_non_admins(api_client, hidden, viewer, shown):
    api_client.force_authenticate(hidden[viewer])
    classes = {q["resource_class"] for q in api_client.get("/api/v1/quotas/").json()["results"]}
    assert (hidden["h100"].pk in classes) is shown
    assert hidden["l4"].pk in classes
