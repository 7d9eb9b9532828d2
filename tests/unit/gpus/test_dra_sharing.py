"""An admin shares a DRA class among users (issue 33, item 3): a whole-GPU class with time-slicing or MPS, a MIG class
with MPS, ``replicas`` users per device, from the class page or the API, audited; the class then counts units of
1/replicas of a device as a device plugin's time-sliced class does, and keeps its sharing through every sync. What
the driver refuses (MPS where it runs dynamic MIG, time-slicing of a MIG device), a device-plugin class, a number of
users out of range and a change under running work are refused, every problem at once."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from cluster.connect import discover
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.class_admin import update_class
from gpus.dra_requests import shared_count_problems
from gpus.models import Cluster, ResourceClass, settings_cluster_pk
from gpus.reconcile import sync_inventory
from tests.sim_objects import SMALL

H100 = "dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3"
A100_WHOLE = "dra:gpu.nvidia.com@NVIDIA-A100-SXM4-40GB"
A100_3G = "dra:mig.nvidia.com/3g.20gb@NVIDIA-A100-SXM4-40GB"


@pytest.fixture
def lab(db, tmp_path, clock):
    """The dra scenario (16 whole H100s; an A100 node with dynamic MIG) synced and checked."""
    sim = SimulatedCluster(tmp_path / "dra.json", scenario="dra", clock=clock)
    sync_inventory(sim)
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    cluster.capabilities = discover(sim).as_dict()
    cluster.save()
    return sim


def test_an_admin_shares_a_whole_gpu_class_and_it_counts_shares(lab, people):
    rc = ResourceClass.objects.get(key=H100)
    assert (rc.kind, rc.total, rc.gpu_fraction) == ("gpu", 16, 1.0)
    shared = update_class(people["admin"], rc, sharing_strategy="time-slicing", replicas=4)
    assert (shared.kind, shared.sharing_strategy, shared.replicas) == ("shared", "time-slicing", 4)
    assert (shared.total, shared.free, shared.gpu_fraction) == (64, 64, 0.25)
    assert shared.display_name == "H100 80GB HBM3 · 1/4 time-sliced · DRA"
    assert "take turns on one GPU" in shared.sharing_caveat
    event = AuditEvent.objects.get(action="resource_class.update")
    assert event.before == {"alias": "", "description": "", "hidden": rc.hidden, "sharing_strategy": "none",
                            "replicas": 1}  # fmt: skip
    assert event.after["sharing_strategy"] == "time-slicing" and event.after["replicas"] == 4
    # The slices know nothing of sharing: the next sync keeps the admin's and counts the devices again in shares.
    sync_inventory(lab)
    shared.refresh_from_db()
    assert (shared.kind, shared.replicas, shared.total) == ("shared", 4, 64)
    # Back to whole GPUs: one user per device.
    whole = update_class(people["admin"], shared, sharing_strategy="none")
    assert (whole.kind, whole.replicas, whole.total, whole.gpu_fraction) == ("gpu", 1, 16, 1.0)
    assert AuditEvent.objects.filter(action="resource_class.update").count() == 2


def test_mps_on_whole_h100s_and_on_a_mig_class(lab, people):
    h100 = update_class(people["admin"], ResourceClass.objects.get(key=H100), sharing_strategy="mps", replicas=2)
    assert (h100.kind, h100.total) == ("mps", 32)
    assert "MPS share: up to 2 jobs" in h100.sharing_caveat


def test_what_the_driver_refuses_and_bad_numbers_are_refused_together(lab, people):
    admin = people["admin"]
    mig = ResourceClass.objects.get(key=A100_3G)
    with pytest.raises(ValidationError) as refused:
        update_class(admin, mig, sharing_strategy="time-slicing", replicas=65)
    problems = refused.value.message_dict["sharing_strategy"]
    assert len(problems) == 2
    assert problems[0] == "With time-slicing pick 2 to 64 users per device (not 65): 1 is a whole device, so leave " \
        "the mode at none for that."  # fmt: skip
    assert "shared by time-slicing, which NVIDIA's DRA driver does not offer for MIG devices" in problems[1]
    # MPS where the driver runs dynamic MIG (its DynamicMIG and MPSSupport gates exclude each other).
    with pytest.raises(ValidationError) as refused:
        update_class(admin, ResourceClass.objects.get(key=A100_WHOLE), sharing_strategy="mps", replicas=4)
    (problem,) = refused.value.message_dict["sharing_strategy"]
    assert "the driver cannot run MPS with dynamic MIG" in problem
    # Replicas without a mode; a mode with one user.
    with pytest.raises(ValidationError) as refused:
        update_class(admin, ResourceClass.objects.get(key=H100), replicas=4)
    assert refused.value.message_dict["sharing_strategy"][0].startswith("Without a sharing mode each device is one")
    with pytest.raises(ValidationError) as refused:
        update_class(admin, ResourceClass.objects.get(key=H100), sharing_strategy="mps")
    assert "pick 2 to 64 users per device (not 1)" in refused.value.message_dict["sharing_strategy"][0]
    assert not AuditEvent.objects.filter(action="resource_class.update").exists()
    assert ResourceClass.objects.get(key=H100).replicas == 1


def test_a_change_under_running_work_and_a_device_plugin_class_are_refused(lab, people, tmp_path, clock):
    rc = ResourceClass.objects.get(key=H100)
    ResourceClass.objects.filter(pk=rc.pk).update(in_use=2)
    rc.refresh_from_db()
    with pytest.raises(ValidationError) as refused:
        update_class(people["admin"], rc, sharing_strategy="time-slicing", replicas=4)
    assert refused.value.message_dict["sharing_strategy"] == [
        f"2 units of {rc.display_name} are in use now, and changing its sharing changes what a unit is under that "
        "work. Let it finish (or hide the class until it has) and change the sharing then."
    ]
    sync_inventory(SimulatedCluster(tmp_path / "demo.json", scenario=SMALL, clock=clock))
    plugin = ResourceClass.objects.exclude(key__startswith="dra:").first()
    with pytest.raises(ValidationError) as refused:
        update_class(people["admin"], plugin, sharing_strategy="time-slicing", replicas=4)
    assert "is a device-plugin class: its sharing follows its nodes' time-slicing" in str(refused.value)
    # Its own sharing, posted back unchanged (the API's PUT), is no change.
    assert update_class(people["admin"], plugin, sharing_strategy=plugin.sharing_strategy).pk == plugin.pk


def test_a_pod_of_a_shared_class_asks_for_one_share(lab, people):
    rc = update_class(people["admin"], ResourceClass.objects.get(key=H100), sharing_strategy="time-slicing", replicas=4)
    assert shared_count_problems(rc, 1) == []
    assert shared_count_problems(rc, 2) == [
        "Each pod of H100 80GB HBM3 · 1/4 time-sliced · DRA takes one share (1/4 of a device, time-slicing): ask "
        "for 1, not 2. For more of a GPU pick a whole-GPU class."
    ]


def test_the_api_and_the_page_share_a_class_admins_only(lab, people, client):
    rc = ResourceClass.objects.get(key=H100)
    url = f"/api/v1/resource-classes/{rc.pk}/"
    client.force_login(people["alice"])
    assert client.patch(url, {"sharing_strategy": "mps", "replicas": 2}, content_type="application/json").status_code \
        == 403  # fmt: skip
    client.force_login(people["admin"])
    answer = client.patch(url, {"sharing_strategy": "mps", "replicas": 2}, content_type="application/json")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["sharing_strategy"], answer.json()["replicas"], answer.json()["kind"]) == ("mps", 2, "mps")
    bad = client.patch(url, {"sharing_strategy": "sometimes", "replicas": 0}, content_type="application/json")
    assert bad.status_code == 400 and set(bad.json()) >= {"sharing_strategy", "replicas"}
    refused = client.patch(
        f"/api/v1/resource-classes/{ResourceClass.objects.get(key=A100_3G).pk}/",
        {"sharing_strategy": "time-slicing", "replicas": 2},
        content_type="application/json",
    )
    assert refused.status_code == 400 and "does not offer for MIG devices" in str(refused.json()["sharing_strategy"])
    # The page: a DRA class's form offers the sharing; posting it shares the class.
    page = client.get(reverse("gpus:resourceclass-manage"))
    assert page.status_code == 200 and b'data-testid="rc-sharing"' in page.content
    prefix = f"rc-{rc.pk}"
    posted = client.post(
        reverse("gpus:resourceclass-update", args=[rc.pk]),
        {f"{prefix}-alias": "", f"{prefix}-description": "", f"{prefix}-{'sharing_strategy'}": "time-slicing",
         f"{prefix}-replicas": "8"},
    )  # fmt: skip
    assert posted.status_code == 302
    rc.refresh_from_db()
    assert (rc.sharing_strategy, rc.replicas, rc.total) == ("time-slicing", 8, 128)
