"""A DRA class the work cannot claim where it may go is refused at submission, and when an admin offers or scopes it,
with what to do, every problem at once (issue 33, item 7): a cluster without resource.k8s.io/v1 or without the
class's DeviceClass, a selector that matches no device the cluster publishes, and MPS where the driver runs dynamic
MIG (its DynamicMIG and MPSSupport gates are mutually exclusive) or time-slicing of a MIG device."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from cluster.connect import discover
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.class_admin import update_class
from gpus.dra_requests import ClassNeed, ClusterView, dra_class_problems, problems_on
from gpus.models import Cluster, ResourceClass, settings_cluster_pk
from gpus.reconcile import sync_inventory
from jobs.validation import check_request

H100 = "dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3"
A100_3G = "dra:mig.nvidia.com/3g.20gb@NVIDIA-A100-SXM4-40GB"
A100_WHOLE = "dra:gpu.nvidia.com@NVIDIA-A100-SXM4-40GB"
V1 = ("resource.k8s.io/v1",)
CLASSES = ("gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com")


def need(key=A100_3G, device_class="mig.nvidia.com", profile="3g.20gb", sharing=""):
    return ClassNeed("A100 3g.20gb", key, device_class, "NVIDIA-A100-SXM4-40GB", profile, sharing)


def view(versions=V1, classes=CLASSES, keys=(A100_3G,), only_dynamic_mig=None):
    return ClusterView("lab", versions, classes, frozenset(keys), only_dynamic_mig)


# -- the rule, over plain data ----------------------------------------------------------------------------------


def test_a_cluster_that_serves_the_class_has_no_problem():
    assert problems_on(view(), need()) == []
    assert problems_on(view(only_dynamic_mig=False), need(sharing="mps")) == []


def test_a_cluster_without_resource_k8s_io_v1_is_named_with_what_to_do():
    assert problems_on(view(versions=("resource.k8s.io/v1beta1",), classes=()), need()) == [
        "Cluster lab does not serve resource.k8s.io/v1 (its last check found resource.k8s.io/v1beta1), and A100 "
        "3g.20gb is claimed through Dynamic Resource Allocation. Pick a device-plugin class (nvidia.com/gpu) there, "
        "or another cluster."
    ]


def test_a_missing_device_class_and_a_selector_that_matches_nothing():
    assert problems_on(view(classes=("gpu.nvidia.com",)), need()) == [
        "Cluster lab has no DeviceClass mig.nvidia.com, which A100 3g.20gb is claimed from: NVIDIA's DRA driver is "
        "not installed there (or not its MIG support). Pick another cluster, or ask an admin to install the driver "
        "and check the cluster again."
    ]
    assert problems_on(view(keys=()), need()) == [
        "No device on cluster lab matches A100 3g.20gb (a 3g.20gb MIG device of NVIDIA-A100-SXM4-40GB): its claim's "
        "selector would match nothing there, or the node pools there do not let teams claim that profile. Pick a "
        "class its nodes offer, or another cluster."
    ]


def test_mps_where_the_driver_runs_dynamic_mig_and_time_slicing_of_a_mig_device_are_refused_together():
    problems = problems_on(view(keys=(), only_dynamic_mig=True), need(sharing="mps"))
    assert len(problems) == 2 and problems[0].startswith("No device on cluster lab matches")
    assert (
        "the driver cannot run MPS with dynamic MIG (its feature gates DynamicMIG and MPSSupport are mutually "
        in (problems[1])
    )
    assert problems_on(view(), need(sharing="time-slicing")) == [
        "A100 3g.20gb is a MIG device shared by time-slicing, which NVIDIA's DRA driver does not offer for MIG "
        "devices (they take MPS only). Ask an admin to drop the sharing mode, or pick a whole-GPU class."
    ]
    whole = need(key=A100_WHOLE, device_class="gpu.nvidia.com", profile="", sharing="time-slicing")
    assert problems_on(view(keys=(A100_WHOLE,)), whole) == []


# -- read from the inventory -------------------------------------------------------------------------------------


@pytest.fixture
def lab(db, tmp_path, clock):
    """The dra scenario synced into the cluster configured in settings; its capabilities not yet checked."""
    sim = SimulatedCluster(tmp_path / "dra.json", scenario="dra", clock=clock)
    sync_inventory(sim)
    return sim


def checked(sim) -> Cluster:
    cluster = Cluster.objects.get(pk=settings_cluster_pk())
    cluster.capabilities = discover(sim).as_dict()
    cluster.save()
    return cluster


def submit(people, rc, clusters=None):
    return check_request(
        team=people["vision"], resource_class=rc, count=1, cpu_millicores=1000, memory_mb=1024,
        image="python:3.12", user=people["admin"], clusters=clusters,
    )  # fmt: skip


def test_a_submission_to_a_cluster_not_checked_for_dra_is_refused(lab, people):
    rc = ResourceClass.objects.get(key=H100)
    problems = submit(people, rc)["resource_class"]
    assert problems[0].startswith("Cluster default does not serve resource.k8s.io/v1 (its last check found no version)")
    checked(lab)
    problems = submit(people, rc)["resource_class"]
    assert not [p for p in problems if "resource.k8s.io" in p]  # only the quota is missing now
    assert problems == [f"Team {people['vision'].name} has no quota for {rc.display_name}; ask an admin for one or "
                        "pick a class your team has quota for."]  # fmt: skip


def test_naming_a_cluster_where_no_device_matches_is_refused(lab, people):
    checked(lab)
    Cluster.objects.create(
        name="cloud", connection="simulated", sim_scenario="demo",
        capabilities={"dra_versions": list(V1), "dra_device_classes": list(CLASSES), "dra_v1": True},
    )  # fmt: skip
    rc = ResourceClass.objects.get(key=A100_3G)
    assert dra_class_problems(rc) == []  # the fleet has a cluster that serves it
    assert dra_class_problems(rc, ["default"]) == []
    assert dra_class_problems(rc, ["cloud", "default"]) == [
        f"No device on cluster cloud matches {rc.display_name} (a 3g.20gb MIG device of NVIDIA-A100-SXM4-40GB): its "
        "claim's selector would match nothing there, or the node pools there do not let teams claim that profile. "
        "Pick a class its nodes offer, or another cluster."
    ]
    assert "No device on cluster cloud" in submit(people, rc, ["cloud"])["resource_class"][0]


def test_mps_on_a_class_whose_gpus_run_dynamic_mig_is_refused(lab, people):
    checked(lab)
    a100 = ResourceClass.objects.get(key=A100_WHOLE)
    h100 = ResourceClass.objects.get(key=H100)
    for rc in (a100, h100):
        rc.sharing_strategy = "mps"
        rc.save()
    assert dra_class_problems(h100) == []  # whole-GPU nodes: the driver there may run MPS
    problems = dra_class_problems(a100)
    assert len(problems) == 1 and "runs its NVIDIA-A100-SXM4-40GB GPUs with dynamic MIG" in problems[0]


def test_an_admin_cannot_offer_a_dra_class_no_cluster_can_serve(lab, people):
    rc = update_class(people["admin"], ResourceClass.objects.get(key=H100), hidden=True)  # hiding needs no check
    assert rc.hidden
    with pytest.raises(ValidationError) as refused:
        update_class(people["admin"], rc, hidden=False, alias="H100 (DRA)")
    assert list(refused.value.message_dict) == ["hidden"]
    assert refused.value.message_dict["hidden"][0].startswith("Cluster default does not serve resource.k8s.io/v1")
    rc.refresh_from_db()
    assert rc.hidden and rc.alias == "" and AuditEvent.objects.filter(action="resource_class.update").count() == 1
    # Renaming a hidden class is no offer; once the cluster is checked, offering it is fine.
    update_class(people["admin"], rc, alias="H100 (DRA)")
    checked(lab)
    assert not update_class(people["admin"], rc, hidden=False).hidden


def test_scoping_a_dra_class_keeps_its_key_and_is_checked_on_that_cluster(lab, people):
    checked(lab)
    cloud = Cluster.objects.create(name="cloud", connection="simulated", sim_scenario="demo")
    rc = ResourceClass.objects.get(key=A100_3G)
    update_class(people["admin"], rc, hidden=False)
    with pytest.raises(ValidationError) as refused:
        update_class(people["admin"], rc, cluster=cloud)
    assert refused.value.message_dict["cluster"][0].startswith("Cluster cloud does not serve resource.k8s.io/v1")
    scoped = update_class(people["admin"], rc, cluster=Cluster.objects.get(pk=settings_cluster_pk()))
    assert scoped.key == f"{A100_3G}@default" and scoped.fleet_key == A100_3G
    assert dra_class_problems(scoped) == []
