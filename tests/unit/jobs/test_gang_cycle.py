"""Gangs in the job cycle against the simulated cluster, in both shapes (an Indexed Job on a modern API server,
one Job per rank on v1.20): all ranks run → running; all succeed → succeeded; one rank fails → every rank is
deleted and the gang retried or failed with that rank; a node lost → requeued without counting a retry; cancel
→ every rank and the headless Service gone; a launch that crashed half-way never leaves a partial gang.

Admission is left out on purpose (these tests place the gang themselves, as admission records it: node_names
in rank order, node_name = rank 0's), so what is pinned here is the cycle's following of ranks."""

from __future__ import annotations

import pytest
import yaml
from django.db.models import F

from gpus.reconcile import sync_inventory
from jobs import lifecycle
from jobs.choices import EventKind, JobState, RankState
from jobs.cycle.result import CycleResult
from jobs.cycle.run import launch, reconcile_jobs
from jobs.distributed.render import gang_base
from jobs.models import Job, JobLog
from tests.factories import DEMO_QUOTAS, simulated_cluster, submit_gang
from tests.sim_objects import DEMO_SCENARIO

NODES = ["gpu-h100-02", "gpu-h100-04"]
JOB_ID = "gpu-portal.io/job-id"
SHAPES = {"indexed": "v1.29.0", "per-rank": "v1.20.2"}


@pytest.fixture(params=sorted(SHAPES))
def cluster(request, db, tmp_path, clock, people):
    """The demo cluster (the root fixture's, by tests/factories.py's simulated_cluster) behind an API server of each
    shape; parametrized, so it stays here."""
    scenario = yaml.safe_load(DEMO_SCENARIO.read_text())
    scenario["server_version"] = SHAPES[request.param]
    sim = simulated_cluster(tmp_path / "sim.json", clock, admin=people["admin"], scenario=scenario, quotas=DEMO_QUOTAS)
    sim.shape = request.param
    return sim


def submit(people, **fields) -> Job:
    """A queued 2 × 2 H100 gang of alice's (submit_gang), sleeping 30 s unless ``fields`` say otherwise."""
    return submit_gang(people["alice"], **({"count": 2, "command": ["sleep", "30"]} | fields))


def place(job: Job, clock, nodes=NODES) -> Job:
    """What admission writes for an admitted gang: its nodes in rank order, rank 0's as node_name."""
    assert Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(
        state=JobState.ADMITTED, node_name=nodes[0], node_names=list(nodes), attempts=F("attempts") + 1,
        admitted_at=clock.now,
    )  # fmt: skip
    job.refresh_from_db()
    return job


def step(sim, clock, seconds: float = 0) -> CycleResult:
    """A cycle without admission: follow the cluster, then create what is admitted."""
    clock.advance(seconds)
    result = CycleResult()
    reconcile_jobs(sim, result, clock.now)
    launch(sim, result, clock.now)
    return result


def workloads_of(sim, job: Job) -> list[dict]:
    return [
        w for w in sim.list_workloads("team-vision") if w["metadata"]["labels"]["gpu-portal.io/job-id"] == str(job.pk)
    ]


def live_pods(sim, job: Job) -> list[dict]:
    return [
        p for p in sim.list_pods("team-vision")
        if p["metadata"]["labels"].get("gpu-portal.io/job-id") == str(job.pk)
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]  # fmt: skip


def services(sim) -> list[str]:
    with sim._store.transaction() as tx:
        names = [s["metadata"]["name"] for s in tx.state.get("services", {}).values()]
    return names


def test_a_gang_runs_on_its_nodes_and_succeeds(cluster, clock, people):
    training = [{"name": "SIM_DURATION_SECONDS", "value": "30"}]
    job = place(submit(people, command=["torchrun", "train.py"], env=training), clock)
    result = step(cluster, clock)
    assert result.launched == 1
    made = workloads_of(cluster, job)
    assert len(made) == (1 if cluster.shape == "indexed" else 2)
    assert gang_base(job) in services(cluster)
    pods = live_pods(cluster, job)
    assert sorted(p["spec"]["nodeName"] for p in pods) == NODES
    base = gang_base(job)
    if cluster.shape == "per-rank":
        # Each rank on its own chosen node.
        assert {p["spec"]["hostname"]: p["spec"]["nodeName"] for p in pods} == {
            f"{base}-0": NODES[0],
            f"{base}-1": NODES[1],
        }
    assert sorted(p["spec"]["hostname"] for p in pods) == [f"{base}-0", f"{base}-1"]
    assert {p["spec"]["subdomain"] for p in pods} == {base}
    step(cluster, clock, 6)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    assert [r["state"] for r in job.ranks] == [RankState.RUNNING, RankState.RUNNING]
    assert sorted(r["node"] for r in job.ranks) == NODES and all(r["pod"] for r in job.ranks)
    step(cluster, clock, 31)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.exit_code == 0
    assert [r["state"] for r in job.ranks] == [RankState.SUCCEEDED, RankState.SUCCEEDED]
    assert gang_base(job) not in services(cluster)
    assert JobLog.objects.filter(job=job).count() == 2
    # Each rank's progress, in its own kept log.
    kept = {entry.pod_name: entry.text for entry in JobLog.objects.filter(job=job)}
    assert "rank 0/2: step 50 loss=" in kept[job.ranks[0]["pod"]]
    assert "rank 1/2: step 150 loss=" in kept[job.ranks[1]["pod"]]


def test_a_failed_rank_stops_every_rank_and_retries_the_whole_gang_then_fails(cluster, clock, people):
    env = [{"name": "SIM_FAIL_RANK", "value": "1"}, {"name": "SIM_EXIT_CODE", "value": "3"},
           {"name": "SIM_FAIL_AFTER_SECONDS", "value": "12"}]  # fmt: skip
    job = place(submit(people, env=env, command=["sleep", "600"], max_retries=1), clock)
    step(cluster, clock)
    step(cluster, clock, 6)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    first_pods = {r["rank"]: r["pod"] for r in job.ranks}
    step(cluster, clock, 15)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.ranks == [] and job.node_names == []
    assert workloads_of(cluster, job) == [] and live_pods(cluster, job) == []
    requeued = job.events.filter(kind=EventKind.REQUEUED).last()
    assert requeued.message == "Rank 1 failed with exit code 3; restarting the whole job (retry 1 of 1)."
    # The failed rank's log is kept, ending with its error; so is every other rank's that was still there (one
    # Job per rank: all of them; an Indexed Job with backoffLimit 0: Kubernetes deletes the other ranks' pods
    # itself the moment one fails).
    kept = {entry.pod_name: entry for entry in JobLog.objects.filter(job=job)}
    assert set(kept) == ({first_pods[1]} if cluster.shape == "indexed" else set(first_pods.values()))
    assert "exiting with code 3" in kept[first_pods[1]].text
    assert lifecycle.retries_used(job) == 1

    place(job, clock)
    step(cluster, clock)
    step(cluster, clock, 6)
    step(cluster, clock, 15)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert (job.failed_rank, job.exit_code, job.failure_reason) == (1, 3, "Error")
    failed = job.events.filter(kind=EventKind.FAILED).last()
    assert failed.message.startswith("Rank 1 failed with exit code 3 on ")
    assert "All 1 retries were used" in failed.message and job.ranks[1]["pod"] in failed.message
    assert workloads_of(cluster, job) == [] and live_pods(cluster, job) == []
    assert [r["state"] for r in job.ranks] == [RankState.FAILED, RankState.FAILED]
    assert job.ranks[0]["reason"] == "StoppedWithGang" and job.ranks[1]["exit_code"] == 3
    assert gang_base(job) not in services(cluster)


def test_without_retries_the_first_failure_fails_the_gang(cluster, clock, people):
    env = [{"name": "SIM_FAIL_RANK", "value": "0"}, {"name": "SIM_FAIL_AFTER_SECONDS", "value": "5"}]
    job = place(submit(people, env=env, command=["sleep", "600"]), clock)
    step(cluster, clock)
    step(cluster, clock, 6)
    step(cluster, clock, 10)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.failed_rank == 0 and job.exit_code == 1
    assert workloads_of(cluster, job) == [] and live_pods(cluster, job) == []


def test_a_rank_lost_with_its_node_requeues_the_gang_without_a_retry(cluster, clock, people):
    job = place(submit(people, command=["sleep", "600"], max_retries=2), clock)
    step(cluster, clock)
    step(cluster, clock, 6)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    cluster.set_node_ready(NODES[1], False)
    sync_inventory(cluster)
    step(cluster, clock, 1)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert workloads_of(cluster, job) == []
    message = job.events.filter(kind=EventKind.REQUEUED).last().message
    assert f"lost with node {NODES[1]}" in message and "does not count as a retry" in message
    assert lifecycle.retries_used(job) == 0


def test_cancel_removes_every_rank_and_the_service(cluster, clock, people):
    job = place(submit(people, command=["sleep", "600"]), clock)
    step(cluster, clock)
    step(cluster, clock, 6)
    job.refresh_from_db()
    assert lifecycle.cancel(job, clock.now, "Cancelled by alice.", actor=people["alice"])
    step(cluster, clock, 1)
    assert workloads_of(cluster, job) == [] and live_pods(cluster, job) == []
    assert gang_base(job) not in services(cluster)


def test_a_launch_that_crashed_half_way_creates_the_rest(cluster, clock, people):
    from cluster.base import forms_for
    from jobs import kinds

    job = place(submit(people, command=["sleep", "600"]), clock)
    rendered = kinds.for_job(job).render(job, forms_for(cluster.server_version()))
    cluster.ensure_namespace("team-vision")
    cluster.create_workload(rendered[1])  # the crash: the first workload only, and no record of it
    step(cluster, clock)
    job.refresh_from_db()
    assert job.workload_created_at is not None
    assert len(workloads_of(cluster, job)) == len(rendered) - 1
    step(cluster, clock, 6)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and len(live_pods(cluster, job)) == 2


def test_a_partial_gang_of_a_job_no_longer_admitted_is_deleted(cluster, clock, people):
    from cluster.base import forms_for
    from jobs import kinds

    job = place(submit(people, command=["sleep", "600"]), clock)
    rendered = kinds.for_job(job).render(job, forms_for(cluster.server_version()))
    cluster.ensure_namespace("team-vision")
    cluster.create_workload(rendered[1])
    assert lifecycle.cancel(job, clock.now, "Cancelled by alice.", actor=people["alice"])
    step(cluster, clock)
    assert workloads_of(cluster, job) == [] and live_pods(cluster, job) == []


def test_node_names_follow_the_ranks_an_indexed_job_put_on_its_nodes_in_another_order():
    from jobs.cycle.gang import align_nodes
    from jobs.models import Job

    job = Job(node_names=["gpu-a", "gpu-b"], node_name="gpu-a")
    job.ranks = [{"rank": 0, "node": "gpu-b"}, {"rank": 1, "node": "gpu-a"}]
    assert align_nodes(job) and job.node_names == ["gpu-b", "gpu-a"] and job.node_name == "gpu-b"
    assert not align_nodes(job)  # already in rank order
    job.ranks = [{"rank": 0, "node": ""}, {"rank": 1, "node": "gpu-b"}]  # rank 0 not placed yet
    assert not align_nodes(job) and job.node_names == ["gpu-b", "gpu-a"]
    job.ranks = [{"rank": 0, "node": "gpu-c"}, {"rank": 1, "node": "gpu-a"}]  # not one of its nodes
    assert not align_nodes(job) and job.node_name == "gpu-b"
