"""Carving on a DRA cluster (issue 33, item 6): a dynamic-MIG node is not carved through MIG Manager (the page, the
API and the operation itself refuse, saying why and what to do); its carve page shows what can be claimed now under
its node pool's MIG policy, which admins choose (validated, audited) and the inventory enforces where it derives the
DRA classes; static MIG on a DRA node keeps the carve path."""

from __future__ import annotations

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.urls import reverse

from cluster.connect import discover
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.dra_carving import carve_refusal, claimable_now
from gpus.dra_inventory import derive_dra_classes, node_inventories
from gpus.models import Cluster, Node, NodeConfigOperation, NodePool, ResourceClass, settings_cluster_pk
from gpus.node_pools import choose_mig_profiles, pool_rows
from gpus.nodeconfig import request_operation
from gpus.nodeconfig_plan import ConfigRefused, Plan, plan_from_request
from gpus.reconcile import sync_inventory
from tests.dra_objects import DRA_SMALL

A100 = "NVIDIA-A100-SXM4-40GB"
A100_1G = f"dra:mig.nvidia.com/1g.5gb@{A100}"
A100_3G = f"dra:mig.nvidia.com/3g.20gb@{A100}"
DYNAMIC = "dra-a100-01"


@pytest.fixture
def dra(db, tmp_path, clock):
    """The dra scenario (whole-GPU H100 nodes, a dynamic-MIG A100 node, a CPU node; no pool labels), synced, with
    its cluster's capabilities as a check finds them."""
    sim = SimulatedCluster(tmp_path / "dra.json", scenario="dra", clock=clock)
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    cluster.capabilities = discover(sim).as_dict()
    cluster.save()
    sync_inventory(sim)
    return sim


@pytest.fixture
def home():
    return Cluster.objects.get(pk=settings_cluster_pk())


# -- the carve path refuses a dynamic-MIG node --------------------------------------------------------------------


def test_a_dynamic_mig_node_is_refused_with_why_and_what_to_do(dra, people):
    node = Node.objects.get(name=DYNAMIC)
    refusal = carve_refusal(node)
    assert refusal.startswith(f"{DYNAMIC} runs NVIDIA's DRA driver with dynamic MIG")
    assert "Node pools page" in refusal and "static MIG" in refusal
    with pytest.raises(ConfigRefused) as refused:
        plan_from_request(node, "mig", preset="all-1g.5gb")
    assert refused.value.errors == [refusal]
    with pytest.raises(ConfigRefused):
        plan_from_request(node, "time-slicing", replicas=2)
    # The operation itself refuses too (a revert or any caller that built a plan some other way).
    plan = Plan("mig", {"config": "all-1g.5gb", "gpus": [{"1g.5gb": 7}] * 8}, {}, A100)
    with pytest.raises(ConfigRefused):
        request_operation(people["admin"], node, plan)
    assert not NodeConfigOperation.objects.exists()
    # Whole-GPU DRA nodes have no counters: not refused here.
    assert carve_refusal(Node.objects.get(name="dra-h100-01")) == ""


def test_the_carve_page_shows_what_can_be_claimed_instead_of_the_form(dra, client, people):
    client.force_login(people["admin"])
    url = reverse("gpus:node-configure", args=[DYNAMIC])
    page = client.get(url).content.decode()
    assert 'data-testid="dra-refusal"' in page and 'data-testid="configure-form"' not in page
    assert page.count("<tr>") - 1 == 8  # a row per GPU under the header
    assert "3g.20gb × 2" in page and "7g.40gb × 1" in page and "(not offered)" not in page
    assert "teams may claim every MIG profile its GPUs support" in page
    response = client.post(url, {"kind": "mig", "preset": "all-1g.5gb", "apply": "1", "confirm": "1"})
    assert response.status_code == 400 and 'role="alert" data-testid="dra-refusal"' in response.content.decode()
    assert not NodeConfigOperation.objects.exists()


def test_the_api_refuses_a_dynamic_mig_node(dra, api_client, people):
    api_client.force_login(people["admin"])
    answer = api_client.post(
        "/api/v1/node-config-operations/", {"node": DYNAMIC, "kind": "mig", "preset": "all-1g.5gb"}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json()["layout"][0].startswith(f"{DYNAMIC} runs NVIDIA's DRA driver with dynamic MIG")
    assert not NodeConfigOperation.objects.exists()


def test_static_mig_on_a_dra_node_keeps_the_carve_path(db, tmp_path, clock, client, people):
    scenario = {
        **DRA_SMALL,
        "nodes": [
            {"name": "static", "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1},
             "mig": {"strategy": "mixed", "layout": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}},
             "dra": {"mig": "static"}},
        ],
    }  # fmt: skip
    sync_inventory(SimulatedCluster(tmp_path / "s.json", scenario=scenario, clock=clock))
    node = Node.objects.get(name="static")
    assert carve_refusal(node) == ""
    plan = plan_from_request(node, "mig", gpus=["3g.20gb@0, 3g.20gb@4"])
    assert plan.requested["gpus"] == [{"3g.20gb": 2}]
    client.force_login(people["admin"])
    url = reverse("gpus:node-configure", args=["static"])
    page = client.post(url, {"kind": "mig", "preset": "", "preview": "1", "replicas": "1", "gpu_0": "7g.40gb"})
    text = page.content.decode()
    assert page.status_code == 200 and 'data-testid="preview"' in text and 'data-testid="dra-refusal"' not in text
    op = request_operation(people["admin"], node, plan)
    assert op.kind == "mig" and NodeConfigOperation.objects.count() == 1


# -- the pool's MIG policy ----------------------------------------------------------------------------------------


def test_the_policy_is_validated_against_the_pools_gpus_with_every_problem_at_once(dra, home, people):
    admin = people["admin"]
    with pytest.raises(ValidationError) as refused:
        choose_mig_profiles(admin, home, "", ["1g.5gb", "9g.99gb", "1g.5gb", "5g.50gb"])
    assert refused.value.messages == [
        f"9g.99gb, 5g.50gb are not MIG profiles of the GPUs in node pool (nodes without a pool label) of default. "
        f"Choose among {A100}: 1g.5gb, 1g.5gb+me, 1g.10gb, 2g.10gb, 3g.20gb, 4g.20gb, 7g.40gb; "
        "NVIDIA-H100-80GB-HBM3: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb.",
        "Name each MIG profile once.",
    ]
    with pytest.raises(ValidationError) as refused:
        choose_mig_profiles(admin, home, "", "1g.5gb")
    assert refused.value.messages[0].startswith("Give the MIG profiles teams may claim as a list")
    with pytest.raises(PermissionDenied):
        choose_mig_profiles(people["alice"], home, "", ["1g.5gb"])
    assert not NodePool.objects.exists()
    assert not AuditEvent.objects.filter(action="node_pool.mig_profiles").exists()


def test_a_pool_without_mig_gpus_has_no_policy_to_choose(db, tmp_path, clock, people):
    scenario = {**DRA_SMALL, "nodes": [DRA_SMALL["nodes"][1]]}  # two L4s: no MIG
    sync_inventory(SimulatedCluster(tmp_path / "l4.json", scenario=scenario, clock=clock))
    with pytest.raises(ValidationError) as refused:
        choose_mig_profiles(people["admin"], Cluster.objects.get(pk=settings_cluster_pk()), "", ["1g.5gb"])
    assert refused.value.messages == [
        "Cluster default does not serve resource.k8s.io/v1, so no DRA driver carves MIG devices there: carve its "
        "nodes' GPUs on each node's Carve page instead (or check the cluster again once it serves DRA).",
        "No GPU in node pool (nodes without a pool label) of default can be partitioned with MIG, so there are no MIG "
        "profiles to allow or refuse.",
    ]


def test_a_profile_outside_the_policy_is_not_offered_and_the_change_is_audited(dra, home, people):
    assert ResourceClass.objects.get(key=A100_1G).present
    row = choose_mig_profiles(people["admin"], home, "", ["3g.20gb", "7g.40gb"])
    assert row.mig_profiles == ["3g.20gb", "7g.40gb"]
    event = AuditEvent.objects.get(action="node_pool.mig_profiles")
    assert (event.before, event.after) == ({"mig_profiles": None}, {"mig_profiles": ["3g.20gb", "7g.40gb"]})
    sync_inventory(dra)
    one = ResourceClass.objects.get(key=A100_1G)
    assert (one.present, one.total, one.free) == (False, 0, 0)
    three = ResourceClass.objects.get(key=A100_3G)
    assert (three.present, three.free) == (True, 16)
    # The same choice again changes nothing and records nothing; None is every profile again.
    choose_mig_profiles(people["admin"], home, "", ["7g.40gb", "3g.20gb"])
    assert AuditEvent.objects.filter(action="node_pool.mig_profiles").count() == 1
    choose_mig_profiles(people["admin"], home, "", None)
    sync_inventory(dra)
    assert ResourceClass.objects.get(key=A100_1G).present


def test_the_policy_applies_to_dynamic_placements_only(tmp_path, clock):
    """The pure derivation: a node's disallowed dynamic profile is left out; another node's is not."""
    node = {
        "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1},
        "mig": {"strategy": "mixed"},
        "dra": {"mig": "dynamic"},
    }
    scenario = {**DRA_SMALL, "nodes": [{"name": "a", **node}, {"name": "b", **node}]}
    inventories = node_inventories(
        SimulatedCluster(tmp_path / "ab.json", scenario=scenario, clock=clock).list_resource_slices()
    )
    both = derive_dra_classes(inventories, {"a": True, "b": True})
    limited = derive_dra_classes(inventories, {"a": True, "b": True}, {"a": frozenset({"7g.40gb"}), "b": None})
    assert both[A100_1G].free == 14 and limited[A100_1G].free == 7 and limited[A100_1G].nodes == {"b"}
    assert limited[f"dra:mig.nvidia.com/7g.40gb@{A100}"].free == 2
    nothing = derive_dra_classes(inventories, {"a": True, "b": True}, {"a": frozenset(), "b": frozenset()})
    assert not [k for k in nothing if "/" in k] and nothing[f"dra:gpu.nvidia.com@{A100}"].free == 2


def test_the_carve_page_marks_what_the_policy_does_not_offer(dra, home, client, people):
    choose_mig_profiles(people["admin"], home, "", ["3g.20gb"])
    claimable = claimable_now(Node.objects.get(name=DYNAMIC))
    assert claimable.policy == ["3g.20gb"] and len(claimable.gpus) == 8
    assert ("3g.20gb", 2, True) in claimable.gpus[0].profiles and ("1g.5gb", 7, False) in claimable.gpus[0].profiles
    client.force_login(people["admin"])
    page = client.get(reverse("gpus:node-configure", args=[DYNAMIC])).content.decode()
    assert page.count("(not offered)") == 8 * 6 and "teams may claim <code>3g.20gb</code>." in page


def test_the_pool_page_saves_the_policy_and_refuses_a_bad_one(dra, home, client, people):
    client.force_login(people["admin"])
    page = client.get(reverse("gpus:nodepool-list")).content.decode()
    assert 'data-testid="pool-mig-profiles"' in page and 'value="7g.40gb"' in page
    save = reverse("gpus:nodepool-mig-profiles")
    bad = client.post(save, {"cluster": "default", "pool": "", "profiles": ["1g.5gb", "5g.50gb"]})
    assert bad.status_code == 400
    assert "5g.50gb is not a MIG profile of the GPUs in node pool" in bad.content.decode()
    assert not NodePool.objects.exists()
    assert client.post(save, {"cluster": "default", "pool": "", "profiles": ["1g.5gb"]}).status_code == 302
    assert NodePool.objects.get(cluster=home, name="").mig_profiles == ["1g.5gb"]
    assert client.post(save, {"cluster": "default", "pool": "", "all": "1"}).status_code == 302
    assert NodePool.objects.get(cluster=home, name="").mig_profiles is None
    assert client.post(save, {"cluster": "default", "pool": "nope", "all": "1"}).status_code == 404
    client.force_login(people["alice"])
    assert client.post(save, {"cluster": "default", "pool": "", "all": "1"}).status_code == 404
    assert [r.mig_profiles for r in pool_rows()] == [None]


def test_the_api_reads_and_sets_the_policy_for_admins_only(dra, home, api_client, people):
    url = "/api/v1/clusters/default/mig-profiles/"
    api_client.force_login(people["alice"])
    assert api_client.get(url).status_code == 403
    assert api_client.post(url, {"pool": "", "profiles": None}, format="json").status_code == 403
    api_client.force_login(people["admin"])
    listed = api_client.get(url).json()
    assert listed[0]["pool"] == "" and listed[0]["mig_profiles"] is None
    assert listed[0]["supported"][A100][0] == "1g.5gb"
    bad = api_client.post(url, {"pool": "", "profiles": ["9g.1gb"], "extra": 1}, format="json")
    assert bad.status_code == 400 and set(bad.json()) == {"extra"}
    bad = api_client.post(url, {"pool": "", "profiles": ["9g.1gb"]}, format="json")
    assert bad.status_code == 400 and bad.json()["profiles"][0].startswith("9g.1gb is not a MIG profile")
    assert api_client.post(url, {"pool": "x", "profiles": None}, format="json").status_code == 400
    done = api_client.post(url, {"pool": "", "profiles": ["3g.20gb"]}, format="json")
    assert done.status_code == 200 and done.json()["mig_profiles"] == ["3g.20gb"]
    assert NodePool.objects.get(cluster=home, name="").mig_profiles == ["3g.20gb"]
    assert AuditEvent.objects.filter(action="node_pool.mig_profiles").count() == 1
