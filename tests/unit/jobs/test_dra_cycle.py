"""The admission step of the job cycle on a simulated DRA cluster like the demo's ``lab`` (issue 33, item 3): the
snapshot reads each node's DRA devices from the inventory (whole GPUs, dynamic-MIG counters) in a constant number of
queries; a job for a DRA class is admitted to a node with free devices, and one that the counters left by the work
already admitted cannot hold waits, saying why in the device plugin's words."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from cluster.base import MANAGED_BY_LABEL
from cluster.sim import SimulatedCluster
from gpus.models import GPU, Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState, WaitReason
from jobs.cycle.admit import admit, build_snapshot
from jobs.cycle.result import CycleResult
from jobs.scheduling.dra import WHOLE_GPU, mig_resource
from tests.dra_objects import DRA_SMALL, claim_spec, claim_template, dra_job, exactly
from tests.factories import placed_job

H100 = "dra:gpu.nvidia.com@NVIDIA-H100-80GB-HBM3"
A100_3G = "dra:mig.nvidia.com/3g.20gb@NVIDIA-A100-SXM4-40GB"
A100_4G = "dra:mig.nvidia.com/4g.20gb@NVIDIA-A100-SXM4-40GB"
A100_WHOLE = "dra:gpu.nvidia.com@NVIDIA-A100-SXM4-40GB"


def lab(nodes: list[dict]) -> dict:
    return {**DRA_SMALL, "namespaces": ["team-vision", "team-nlp"], "nodes": nodes}


#: Two H100s with whole GPUs and one A100 with dynamic MIG, through NVIDIA's DRA driver (a small ``lab``).
LAB = lab(
    [
        {"name": "lab-h100", "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 2}, "dra": {}},
        {"name": "lab-a100", "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 1}, "mig": {"strategy": "mixed"},
         "dra": {"mig": "dynamic"}},
    ]
)  # fmt: skip

pytestmark = pytest.mark.cluster(scenario=LAB, quotas=None)


@pytest.fixture
def quotas(cluster, people):
    for key in (H100, A100_3G, A100_4G, A100_WHOLE):
        actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=key), 4, 4)


def queued(people, key: str, count: int, name: str):
    """A queued job of alice's for the DRA class ``key``, written directly (what admission reads of it)."""
    return placed_job(
        people["alice"], resource_class=key, count=count, name=name, node_name="", state=JobState.QUEUED,
        cpu_millicores=2000, memory_mb=8192,
    )  # fmt: skip


def test_dra_nodes_take_work_and_offer_their_devices_per_class(cluster, clock):
    snap, _ = build_snapshot(clock.now)
    h100, a100 = snap.nodes["lab-h100"], snap.nodes["lab-a100"]
    assert h100.schedulable and a100.schedulable and not h100.kept_off
    assert h100.free == {WHOLE_GPU: 2}
    assert a100.free[WHOLE_GPU] == 1 and a100.free[mig_resource("3g.20gb")] == 2
    classes = {c.name: c for c in snap.classes.values()}
    assert classes["A100 SXM4 40GB · MIG 3g.20gb · DRA"].resource_name == mig_resource("3g.20gb")
    assert not ResourceClass.objects.get(key=A100_3G).hidden


def test_a_dra_job_is_admitted_and_one_the_counters_cannot_hold_waits(cluster, clock, people, quotas):
    four = queued(people, A100_4G, 1, "four")
    whole = queued(people, H100, 2, "whole")
    result = CycleResult()
    admit(result, clock.now)
    for job in (four, whole):
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED, job.wait_message
    assert (four.node_name, whole.node_name) == ("lab-a100", "lab-h100")
    # The next cycle counts what they hold: the 4g.20gb will take memory slices 0-3 of the A100's counters, but its
    # claim is not allocated yet, and a 3g.20gb claim the allocator met first would take slices 0-3 itself: no
    # 3g.20gb is counted free beside it until the inventory sees it allocated. The H100s are both taken.
    two = queued(people, A100_3G, 2, "two")
    more = queued(people, H100, 1, "more")
    clock.advance(6)
    admit(CycleResult(), clock.now)
    two.refresh_from_db()
    assert (two.state, two.wait_reason) == (JobState.QUEUED, WaitReason.CAPACITY)
    assert two.wait_message == (
        "All A100 SXM4 40GB · MIG 3g.20gb · DRA capacity that fits is taken: it needs 2 on one node; the most free on "
        "any node is 0 (0 free in total). Position 1 in the queue for this class."
    )
    more.refresh_from_db()
    assert (more.state, more.wait_reason) == (JobState.QUEUED, WaitReason.CAPACITY)
    # Once the inventory saw the 4g.20gb allocated at slices 0-3, one 3g.20gb fits beside it.
    a100 = GPU.objects.get(node__name="lab-a100")
    GPU.objects.filter(pk=a100.pk).update(dra=a100.dra | {"placed": [["4g.20gb", 0]]})
    one = queued(people, A100_3G, 1, "one")
    clock.advance(6)
    admit(CycleResult(), clock.now)
    one.refresh_from_db()
    assert (one.state, one.node_name) == (JobState.ADMITTED, "lab-a100")


def test_the_snapshot_reads_dra_devices_in_the_same_queries_for_any_number_of_nodes(cluster, clock, tmp_path):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            snap, _ = build_snapshot(clock.now)
        return len(captured), snap

    few, snap = queries()
    assert {n for n, v in snap.nodes.items() if v.dra is not None} == {"lab-h100", "lab-a100"}
    bigger = lab(
        [
            *LAB["nodes"],
            *({"name": f"lab-h100-{i}", "gpu": {"product": "NVIDIA H100 80GB HBM3", "count": 8}, "dra": {}}
              for i in range(4)),
            {"name": "lab-mig", "gpu": {"product": "NVIDIA A100-SXM4-40GB", "count": 2},
             "mig": {"strategy": "mixed", "layout": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}},
             "dra": {"mig": "static"}},
        ]
    )  # fmt: skip
    sync_inventory(SimulatedCluster(tmp_path / "bigger.json", scenario=bigger, clock=clock))
    assert Node.objects.filter(gone_at__isnull=True).count() == 7
    many, snap = queries()
    assert many == few
    assert snap.nodes["lab-mig"].free == {mig_resource("3g.20gb"): 2, mig_resource("2g.10gb"): 2,
                                          mig_resource("1g.5gb"): 2}  # fmt: skip


def test_a_dra_class_is_submitted_as_any_and_refused_past_what_its_nodes_hold(
    cluster, clock, people, quotas, monkeypatch
):
    """Submission's checks count a DRA class's devices as admission does (jobs.validation.class_limits): two whole
    H100s fit on lab-h100, three on no node; two 3g.20gb fit on the empty dynamic-MIG A100, three do not."""
    from django.core.exceptions import ValidationError

    from gpus import fleet
    from gpus.models import Cluster
    from tests.factories import JOB_REQUEST

    monkeypatch.setattr(fleet, "get_backend", lambda: cluster)
    fleet.sync(Cluster.objects.get(name="default"))  # what the inventory task records: resource.k8s.io/v1 is served
    team = people["vision"]
    for key, fits in ((H100, 2), (A100_3G, 2)):
        rc = ResourceClass.objects.get(key=key)
        job = actions.submit_job(people["alice"], team, rc, JOB_REQUEST | {"count": fits, "name": f"fits-{fits}"}).job
        assert job.state == JobState.QUEUED
        with pytest.raises(ValidationError) as refused:
            actions.submit_job(people["alice"], team, rc, JOB_REQUEST | {"count": fits + 1})
        assert "count" in refused.value.message_dict, refused.value.message_dict
    result = CycleResult()
    admit(result, clock.now)
    assert result.admitted == 2


def test_a_dra_job_goes_from_submission_to_a_running_pod_holding_its_claim(cluster, clock, people, quotas, monkeypatch):
    """End to end on the simulated DRA cluster: submitted as any job, admitted by counting devices, rendered as a
    ResourceClaimTemplate, the claim allocated by the simulated scheduler's DRA allocator on the node admission chose,
    the pod running; a second 3g.20gb job fits beside the first on the A100's counters, and a third waits."""
    from gpus import fleet
    from gpus.models import Cluster
    from jobs.cycle.run import run_cycle
    from tests.factories import JOB_REQUEST

    monkeypatch.setattr(fleet, "get_backend", lambda: cluster)
    fleet.sync(Cluster.objects.get(name="default"))
    rc = ResourceClass.objects.get(key=A100_3G)
    spec = JOB_REQUEST | {"command": ["sleep", "3600"]}
    jobs = [actions.submit_job(people["alice"], people["vision"], rc, spec | {"name": f"mig-{i}"}).job
            for i in range(3)]  # fmt: skip
    for _ in range(8):
        clock.advance(6)
        run_cycle(cluster, now=clock.now, fleet=[])
    for job in jobs:
        job.refresh_from_db()
    assert [j.state for j in jobs[:2]] == [JobState.RUNNING, JobState.RUNNING], [j.wait_message for j in jobs]
    assert jobs[2].state == JobState.QUEUED and jobs[2].wait_reason == WaitReason.CAPACITY, jobs[2].wait_message
    claims = {c["metadata"]["name"]: c for c in cluster.list_resource_claims()}
    held = [c for c in claims.values() if (c.get("status") or {}).get("allocation")]
    assert len(held) == 2
    for claim in held:
        results = claim["status"]["allocation"]["devices"]["results"]
        assert len(results) == 1 and results[0]["pool"] == "lab-a100"
    pods = [p for p in cluster.list_pods() if p["spec"].get("resourceClaims")]
    assert {p["spec"]["nodeName"] for p in pods} == {"lab-a100"} and len(pods) == 2


def _not_the_portal_s(cluster, namespace: str) -> None:
    """The simulated cluster's pods in ``namespace`` as someone else's: without the portal's label (the simulator
    labels every workload it creates as the portal's)."""
    with cluster._store.transaction() as tx:
        for pod in tx.state["pods"].values():
            if pod["metadata"]["namespace"] == namespace:
                pod["metadata"]["labels"].pop(MANAGED_BY_LABEL, None)


def test_devices_other_pods_claim_are_not_free_to_admission(cluster, clock):
    # Someone else's pods in their own namespace claim a whole H100 and the A100's 4g.20gb (slices 0-3): the portal
    # must not count them free, or it admits work whose pods stay Pending.
    h100 = "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"
    four = "device.attributes['gpu.nvidia.com'].profile == '4g.20gb'"
    cluster.apply_resource_claim_template(
        claim_template("theirs-h100", claim_spec(("g", exactly("gpu.nvidia.com", 1, h100))), "team-nlp")
    )
    cluster.apply_resource_claim_template(
        claim_template("theirs-4g", claim_spec(("m", exactly("mig.nvidia.com", 1, four))), "team-nlp")
    )
    cluster.create_workload(dra_job("theirs-whole", {"g": "theirs-h100"}, "team-nlp"))
    cluster.create_workload(dra_job("theirs-mig", {"m": "theirs-4g"}, "team-nlp"))
    _not_the_portal_s(cluster, "team-nlp")
    sync_inventory(cluster)
    snap, _ = build_snapshot(clock.now)
    h100_node, a100 = snap.nodes["lab-h100"], snap.nodes["lab-a100"]
    assert h100_node.allocatable[WHOLE_GPU] == 2 and h100_node.free[WHOLE_GPU] == 1
    # The 4g.20gb is where the allocator put it: one 3g.20gb still fits beside it (slices 4-7), nothing else whole.
    assert (a100.free[mig_resource("3g.20gb")], a100.free[mig_resource("4g.20gb")], a100.free[WHOLE_GPU]) == (1, 0, 0)
    assert a100.allocatable[mig_resource("3g.20gb")] == 2


def test_the_portal_s_own_allocated_instances_are_counted_once_and_where_they_are(cluster, clock, people):
    # The portal's 4g.20gb job runs (its claim allocated at slices 0-3): held by the job row and seen allocated by the
    # inventory, it is counted once, and pinned where it is, so a 3g.20gb is admitted beside it.
    four = "device.attributes['gpu.nvidia.com'].profile == '4g.20gb'"
    spec = claim_spec(("m", exactly("mig.nvidia.com", 1, four)))
    template = claim_template("ours-4g", spec, "team-vision")
    template["spec"]["metadata"] = {"labels": {MANAGED_BY_LABEL: "gpu-portal"}}
    cluster.apply_resource_claim_template(template)
    cluster.create_workload(dra_job("ours", {"m": "ours-4g"}, "team-vision"))
    placed_job(people["alice"], resource_class=A100_4G, count=1, name="ours", node_name="lab-a100",
               state=JobState.RUNNING, cpu_millicores=2000, memory_mb=8192)  # fmt: skip
    sync_inventory(cluster)
    a100 = build_snapshot(clock.now)[0].nodes["lab-a100"]
    assert (a100.free[mig_resource("3g.20gb")], a100.free[mig_resource("4g.20gb")], a100.free[WHOLE_GPU]) == (1, 0, 0)
