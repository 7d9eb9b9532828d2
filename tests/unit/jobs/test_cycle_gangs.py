"""Gangs through the cycle's admission step on the database: the snapshot carries workers, topology and
per-rank nodes (no query per job), the admitted gang stores its ranks' nodes in order with rank 0 as its node and
one timeline event naming them, each rank's node then counts one worker's demand, and the query count does not
grow with gangs in the queue. The gang's kind here is a test kind whose demand is ``workers`` pods: the cycle
asks the kind, never its name."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from jobs.choices import EventKind, JobState
from jobs.cycle.admit import admit, build_snapshot
from jobs.cycle.result import CycleResult
from jobs.models import Job
from tests.factories import submit_job
from tests.sim_objects import H100
from vocab.names import ZONE_LABEL

# The demo cluster (tests/conftest.py) with vision's H100 quota 56 guaranteed and at most.
pytestmark = pytest.mark.cluster(quotas={"vision": (56, 56), "nlp": (8, 16)})


def submit_gang(people, workers=3, count=8, **fields) -> Job:
    job = submit_job(people["alice"], "vision", H100, name="ddp", command=["torchrun", "train.py"], count=count)
    Job.objects.filter(pk=job.pk).update(kind="gang-test", workers=workers, **fields)
    job.refresh_from_db()
    return job


def test_a_gang_is_admitted_on_its_ranks_nodes_and_each_holds_one_worker(cluster, people, clock, gang_kind):
    job = submit_gang(people, topology_key=ZONE_LABEL, topology_mode="require")
    snap, _ = build_snapshot(clock.now)
    (view,) = snap.queued
    assert (view.workers, view.count, view.cpu_m, view.topology_key, view.topology_mode) == (
        3, 8, 2000, ZONE_LABEL, "require",
    )  # fmt: skip
    assert snap.nodes["gpu-h100-01"].topology == {ZONE_LABEL: "rack-a"}

    decisions = admit(CycleResult(), clock.now)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    assert len(job.node_names) == 3 and len(set(job.node_names)) == 3
    assert job.node_name == job.node_names[0] == decisions.admit[job.pk][0]
    assert list(decisions.ranks[job.pk]) == job.node_names
    event = job.events.get(kind=EventKind.ADMITTED)
    assert event.message == f"Admitted: 3 workers on {', '.join(job.node_names)}."
    assert event.data["nodes"] == job.node_names

    # The next snapshot holds one worker's 8 GPUs and CPU on each rank's node, not all 24 on rank 0's.
    snap, _ = build_snapshot(clock.now)
    (active,) = snap.active
    assert active.nodes == tuple(job.node_names) and active.workers == 3 and active.count == 8
    for name in job.node_names:
        assert snap.nodes[name].free[H100.split("@")[0]] == 0
        assert snap.nodes[name].cpu_free_m == snap.nodes[name].cpu_capacity_m - 2000
    others = [n for n in snap.nodes.values() if n.name.startswith("gpu-h100-") and n.name not in job.node_names]
    assert all(n.free[H100.split("@")[0]] == 8 for n in others)


def test_a_single_job_keeps_node_names_empty(cluster, people, clock, gang_kind):
    job = submit_gang(people, workers=1, count=2)
    admit(CycleResult(), clock.now)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.node_names == [] and job.node_name.startswith("gpu-h100-")
    assert job.events.get(kind=EventKind.ADMITTED).message == f"Admitted and placed on {job.node_name}."


def test_a_gang_that_does_not_fit_whole_stays_queued_with_the_reason_in_gang_terms(cluster, people, clock, gang_kind):
    job = submit_gang(people, workers=8, count=4)  # 7 schedulable H100 nodes; the 8th is cordoned
    admit(CycleResult(), clock.now)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.node_names == [] and job.node_name == ""
    assert job.wait_reason == "never_fits"
    assert job.wait_detail == {"nodes_needed": 8, "requested_per_node": 4, "nodes_able": 7}


def test_admission_queries_do_not_grow_with_gangs(cluster, people, clock, gang_kind):
    def count_queries(n: int) -> int:
        Job.objects.all().delete()
        for _ in range(n):
            submit_gang(people, workers=2, count=4, topology_key=ZONE_LABEL, topology_mode="prefer")
        admit(CycleResult(), clock.now)  # admits what fits (7 gangs); the next cycle explains the rest
        with CaptureQueriesContext(connection) as queries:
            admit(CycleResult(), clock.now)
        return len(queries)

    assert count_queries(20) == count_queries(8)


def test_a_drain_of_any_ranks_node_preempts_the_whole_preemptible_gang(cluster, people, clock, gang_kind, monkeypatch):
    from gpus.models import settings_cluster_pk
    from jobs.cycle import draining
    from jobs.cycle import run as cycle

    gang = submit_gang(people, workers=3, count=8, preemptible=True)
    admit(CycleResult(), clock.now)
    gang.refresh_from_db()
    last = gang.node_names[-1]
    # Only the last rank's node drains (rank 0's node is not draining): the whole gang gets the notice.
    home = settings_cluster_pk()
    monkeypatch.setattr(draining, "nodes_draining", lambda now: {(home, last): 41})
    result = CycleResult()
    cycle.preempt_draining(result, clock.now)
    gang.refresh_from_db()
    assert result.preempted == 1 and gang.state == JobState.PREEMPTING
    notice = gang.events.get(kind=EventKind.PREEMPT_NOTICE)
    assert notice.message.startswith(f"An admin is reconfiguring the GPUs of {last} (operation #41).")
    # A node no rank is on drains nothing.
    monkeypatch.setattr(draining, "nodes_draining", lambda now: {(home, "gpu-a100-mig-01"): 42})
    assert cycle.preempt_draining(CycleResult(), clock.now) is None
    assert Job.objects.filter(state=JobState.PREEMPTING).count() == 1
