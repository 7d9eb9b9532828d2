"""The job cycle against the simulated cluster: every outcome a workload can have maps onto the job's state
and timeline, preemption runs its course, and the cycle's query count does not grow with the queue."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from accounts.models import Team
from core.models import AuditEvent
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import EventKind, JobState
from jobs.cycle.admit import admit
from jobs.cycle.result import CycleResult
from jobs.cycle.run import launch
from jobs.models import Job
from jobs.render import render_job
from tests.factories import cycle, submit_job
from tests.sim_objects import A10, H100


def kinds(job: Job) -> list[str]:
    return list(job.events.values_list("kind", flat=True))


def test_a_job_runs_to_success_with_its_timeline(cluster, clock, people):
    job = submit_job(people["alice"], count=2)
    result = cycle(cluster, clock)
    assert (result.admitted, result.launched) == (1, 1)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.node_name.startswith("gpu-h100-")
    workload = cluster.list_workloads("team-vision")[0]
    assert workload["metadata"]["name"] == job.workload_name == f"gpj-{job.pk}-train"
    cycle(cluster, clock, 6)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.pod_name.startswith(job.workload_name)
    pod = cluster.list_pods("team-vision")[0]
    assert pod["spec"]["nodeName"] == job.node_name
    cycle(cluster, clock, 31)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.exit_code == 0
    assert kinds(job) == [
        EventKind.SUBMITTED, EventKind.ADMITTED, EventKind.CREATED, EventKind.STARTED, EventKind.SUCCEEDED,
    ]  # fmt: skip
    assert job.started_at < job.finished_at


@pytest.mark.parametrize(
    ("fields", "reason", "exit_code", "words"),
    [
        ({"env": [{"name": "SIM_EXIT_CODE", "value": "3"}]}, "Error", 3, "exit code 3"),
        ({"env": [{"name": "SIM_EXIT_CODE", "value": "137"}]}, "OOMKilled", 137, "out of memory"),
        ({"command": ["sleep", "1000"], "max_runtime_seconds": 60}, "DeadlineExceeded", None, "maximum runtime"),
    ],
)
def test_failures_say_what_happened(cluster, clock, people, fields, reason, exit_code, words):
    job = submit_job(people["alice"], **fields)
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    cycle(cluster, clock, 70)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    assert job.failure_reason == reason
    assert job.exit_code == exit_code
    assert words in job.events.last().message


def test_unpullable_image_fails_the_job_and_frees_the_gpus(cluster, clock, people):
    job = submit_job(people["alice"], image="registry.example.com/team/doesnotexist:1.0", count=8)
    cycle(cluster, clock)
    for _ in range(6):
        cycle(cluster, clock, 10)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.failure_reason == "ImagePullBackOff"
    # Said with the registry and what to check (vocab.pod_states), from the pod's Failed event.
    assert "registry.example.com has no image" in job.events.last().message
    assert "check the repository name and tag" in job.events.last().message
    assert cluster.list_workloads("team-vision") == []


def test_pending_in_the_cluster_reports_the_schedulers_reason(cluster, clock, people):
    job = submit_job(people["alice"])
    admit(CycleResult(), clock.now)
    job.refresh_from_db()
    # The node is cordoned between admission and the pod reaching the scheduler.
    cluster.set_node_unschedulable(job.node_name, True)
    launch(cluster, CycleResult(), clock.now)
    cycle(cluster, clock, 2)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.wait_reason == "cluster"
    assert "Unschedulable" in job.wait_message and "node(s)" in job.wait_message
    assert EventKind.PENDING in kinds(job)


def test_a_vanished_workload_marks_the_job_lost(cluster, clock, people):
    job = submit_job(people["alice"])
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    cluster.delete_workload("team-vision", f"gpj-{job.pk}-train")
    cycle(cluster, clock, 1)
    job.refresh_from_db()
    assert job.state == JobState.LOST
    assert "disappeared" in job.events.last().message


def test_a_workload_missing_only_from_a_stale_list_is_confirmed_and_the_job_is_not_lost(
    cluster, clock, people, monkeypatch
):
    # A watch cache a moment behind answers the list without a Job another worker just made: the cycle asks the
    # cluster itself (workload_exists) before it ends the job as lost.
    job = submit_job(people["alice"])
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    asked: list[tuple[str, str]] = []
    real_exists = cluster.workload_exists
    monkeypatch.setattr(cluster, "list_workloads", lambda namespace=None: [])
    monkeypatch.setattr(cluster, "workload_exists", lambda ns, name: asked.append((ns, name)) or real_exists(ns, name))
    cycle(cluster, clock, 1)
    assert asked == [("team-vision", f"gpj-{job.pk}-train")]
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    monkeypatch.undo()
    cycle(cluster, clock, 1)
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_cancel_deletes_the_workload_and_frees_quota(cluster, clock, people):
    job = submit_job(people["alice"], count=8)
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    actions.cancel_job(people["alice"], job)
    cycle(cluster, clock, 1)
    assert cluster.list_workloads("team-vision") == []
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    assert AuditEvent.objects.filter(action="job.cancel", object_id=str(job.pk)).count() == 1


def test_a_crash_between_create_and_save_never_makes_twins(cluster, clock, people):
    job = submit_job(people["alice"])
    admit(CycleResult(), clock.now)
    launch(cluster, CycleResult(), clock.now)
    # As if the worker died after the cluster accepted the Job but before the row was saved.
    Job.objects.filter(pk=job.pk).update(workload_created_at=None, workload_uid="")
    result = CycleResult()
    launch(cluster, result, clock.now)
    assert result.launched == 1
    assert [w["metadata"]["name"] for w in cluster.list_workloads("team-vision")] == [job.workload_name]


def test_guaranteed_work_reclaims_borrowed_capacity_after_a_grace_period(cluster, clock, people):
    admin = people["admin"]
    a10 = ResourceClass.objects.get(key=A10)
    actions.set_quota(admin, Team.objects.get(slug="nlp"), a10, 0, a10.allocatable)
    actions.set_quota(admin, Team.objects.get(slug="vision"), a10, 4, 8)
    borrowers = [
        submit_job(people["bob"], "nlp", A10, count=4, preemptible=True, command=["sleep", "3600"])
        for _ in range(a10.allocatable // 4)
    ]
    cycle(cluster, clock)
    assert all(Job.objects.get(pk=b.pk).borrowed for b in borrowers)
    cycle(cluster, clock, 6)
    wanted = submit_job(people["alice"], "vision", A10, count=4)
    cycle(cluster, clock, 1)
    wanted.refresh_from_db()
    assert wanted.state == JobState.QUEUED and wanted.wait_reason == "reclaiming"
    victims = Job.objects.filter(state=JobState.PREEMPTING)
    assert [v.pk for v in victims] == [borrowers[-1].pk]  # the youngest borrower
    assert "Preemption notice" in victims[0].events.last().message
    # During the grace period it keeps running and nothing else is preempted.
    cycle(cluster, clock, 10)
    assert Job.objects.filter(state=JobState.PREEMPTING).count() == 1
    cycle(cluster, clock, 25)
    victim = Job.objects.get(pk=borrowers[-1].pk)
    assert victim.state == JobState.QUEUED and victim.charged_gpu_seconds > 0
    assert EventKind.REQUEUED in kinds(victim)
    cycle(cluster, clock, 1)
    wanted.refresh_from_db()
    assert wanted.state in (JobState.ADMITTED, JobState.RUNNING) and not wanted.borrowed
    names = {w["metadata"]["name"] for w in cluster.list_workloads()}
    assert f"gpj-{victim.pk}-train" not in names


def test_a_second_teams_job_waits_with_quota_numbers(cluster, clock, people):
    submit_job(people["bob"], "nlp", count=8)
    submit_job(people["bob"], "nlp", count=8, preemptible=True)  # borrows above the guarantee of 8
    extra = submit_job(people["bob"], "nlp", count=1)
    cycle(cluster, clock)
    extra.refresh_from_db()
    assert extra.state == JobState.QUEUED and extra.wait_reason == "quota"
    assert extra.wait_detail == {"requested": 1, "in_use": 16, "guaranteed": 8, "limit": 16}
    assert "16 of its limit of 16" in extra.wait_message


def test_admission_queries_do_not_grow_with_the_queue(cluster, clock, people):
    def count_queries(n: int) -> int:
        Job.objects.all().delete()
        for _ in range(n):
            submit_job(people["alice"], count=8, preemptible=True)
        admit(CycleResult(), clock.now)  # admits what fits; the next cycle only explains the waiting
        with CaptureQueriesContext(connection) as queries:
            admit(CycleResult(), clock.now)
        return len(queries)

    assert count_queries(30) == count_queries(5)


def test_the_monthly_budget_counts_this_months_runs(cluster, clock, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], Team.objects.get(slug="vision"), rc, 8, 16, 10)  # 10 GPU-hours a month
    done = submit_job(people["alice"], count=4)
    # It ran 2 hours this month on 4 GPUs: 8 of the 10 GPU-hours are gone.
    Job.objects.filter(pk=done.pk).update(
        state=JobState.SUCCEEDED, started_at=clock.now - timedelta(hours=2), finished_at=clock.now
    )
    fits = submit_job(people["alice"], count=1, max_runtime_seconds=3600)  # may use 1 more
    too_long = submit_job(people["alice"], count=1, max_runtime_seconds=3 * 3600)  # may use 3: over budget
    cycle(cluster, clock)
    fits.refresh_from_db()
    too_long.refresh_from_db()
    assert fits.state == JobState.ADMITTED
    assert too_long.state == JobState.QUEUED and too_long.wait_reason == "budget"
    assert too_long.wait_detail["used_hours"] == pytest.approx(9.0, abs=0.01)  # 8 used + 1 committed this cycle


def test_an_earlier_attempts_workload_is_deleted_and_does_not_confuse_the_current_one(cluster, clock, people):
    job = submit_job(people["alice"], command=["sleep", "600"])
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    # As if a previous attempt of this job (preempted, requeued) were still in the cluster.
    leftover = render_job(job)
    leftover["metadata"]["name"] = f"{job.workload_name}-old"
    cluster.create_workload(leftover)
    result = cycle(cluster, clock, 1)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.pod_name.startswith(job.workload_name + "-")
    assert result.deleted == 1
    assert [w["metadata"]["name"] for w in cluster.list_workloads("team-vision")] == [job.workload_name]


def test_launching_jobs_on_a_managed_node_looks_the_node_up_once_per_cycle(cluster, clock, people):
    """How render pins a pod on a managed node (by name only: the node has no GFD product label) is decided from
    the query that fetches the jobs, not one node lookup per job: the queries that read gpus_node while launching
    stay the same for one job and for three."""
    l4 = ResourceClass.objects.get(key="nvidia.com/gpu@NVIDIA-L4")
    actions.set_quota(people["admin"], Team.objects.get(slug="vision"), l4, 3, 3)

    def node_queries(n: int) -> tuple[int, list[dict]]:
        Job.objects.all().delete()
        for _ in range(n):
            submit_job(people["alice"], resource_class=l4.key, count=1)
        admit(CycleResult(), clock.now)
        with CaptureQueriesContext(connection) as queries:
            result = CycleResult()
            launch(cluster, result, clock.now)
        assert result.launched == n, result.errors
        pods = [
            w["spec"]["template"]["spec"]
            for w in cluster.list_workloads("team-vision")
            if w["metadata"]["labels"].get("gpu-portal.io/job-id") in {str(j.pk) for j in Job.objects.all()}
        ]
        for w in cluster.list_workloads("team-vision"):
            cluster.delete_workload("team-vision", w["metadata"]["name"])
        return sum('"gpus_node"' in q["sql"] for q in queries.captured_queries), pods

    one, pods_one = node_queries(1)
    three, pods_three = node_queries(3)
    assert one == three
    assert len(pods_three) == 3
    for pod in pods_one + pods_three:
        (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        assert "matchExpressions" not in term  # no GFD product label on the EKS node
        assert term["matchFields"][0]["values"] == ["eks-g6-01"]


def _forged(job: Job, namespace: str, name: str) -> dict:
    """A Job another team made in its own namespace with the portal's labels, naming ``job`` by its id label."""
    forged = render_job(job)
    forged["metadata"]["namespace"] = namespace
    forged["metadata"]["name"] = name
    forged["spec"]["template"]["spec"]["nodeSelector"] = {}
    return forged


def test_a_workload_in_another_teams_namespace_never_causes_a_delete_or_is_followed(cluster, clock, people):
    """Audit finding 1: workloads and pods are matched by (namespace, name) in the job's own team namespace."""
    victim = submit_job(people["alice"], name="keep", command=["sleep", "600"])
    other = submit_job(people["alice"], name="other", command=["sleep", "600"])
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    victim.refresh_from_db()
    other.refresh_from_db()
    assert victim.state == other.state == JobState.RUNNING
    cluster.ensure_namespace("team-nlp")
    # Team nlp names a Job after the victim team's other running workload and labels it with the victim job's
    # id (a stale-looking "earlier attempt"), and another with the victim's own workload name, which finishes.
    cluster.create_workload(_forged(victim, "team-nlp", other.workload_name))
    twin = _forged(victim, "team-nlp", victim.workload_name)
    twin["spec"]["template"]["spec"]["containers"][0]["command"] = ["false"]
    cluster.create_workload(twin)
    for seconds in (1, 6, 6):
        result = cycle(cluster, clock, seconds)
        assert result.deleted == 0
    names = sorted(w["metadata"]["name"] for w in cluster.list_workloads("team-vision"))
    assert names == sorted([victim.workload_name, other.workload_name])
    victim.refresh_from_db()
    other.refresh_from_db()
    assert victim.state == other.state == JobState.RUNNING
    assert victim.pod_name.startswith(victim.workload_name + "-")
    pods = {p["metadata"]["name"]: p["metadata"]["namespace"] for p in cluster.list_pods()}
    assert pods[victim.pod_name] == "team-vision"


def test_nodes_whose_mig_config_failed_are_left_out_of_placement_and_the_wait_says_why(cluster, clock, people):
    """Issue 16, node trust: an 8-GPU job went to a node whose MIG configuration had failed while an untainted,
    healthy node had 8 free. Such a node (and any whose diagnosis says it cannot run GPU work) is no placement
    input, for every kind, and a job that cannot be placed because of it says so."""
    from vocab.names import MIG_CONFIG_FAILED, MIG_CONFIG_STATE_LABEL

    healthy = "gpu-h100-07"  # (gpu-h100-08 is cordoned in the demo)
    broken = [f"gpu-h100-0{i}" for i in range(1, 7)]
    for name in broken:
        cluster.patch_node_labels(name, {MIG_CONFIG_STATE_LABEL: MIG_CONFIG_FAILED})
    sync_inventory(cluster)
    job = submit_job(people["alice"], count=8)
    cycle(cluster, clock)
    job.refresh_from_db()
    assert job.node_name == healthy, (job.state, job.wait_message)
    second = submit_job(people["alice"], name="second", count=8, preemptible=True)
    cycle(cluster, clock, 1)
    second.refresh_from_db()
    assert second.state == JobState.QUEUED and not second.node_name
    assert "MIG configuration failed" in second.wait_message, second.wait_message
    assert "gpu-h100-01" in second.wait_message
