"""Checkpoint-aware preemption on the simulated cluster (issue 34, item 3): a job that declared its checkpoint gets
its signal at the notice (its workload is deleted: Kubernetes runs the preStop hook that sends it, then SIGTERM and
SIGKILL at the end of terminationGracePeriodSeconds), keeps its GPUs for its grace, and is requeued; its next attempt
is told it resumes. The victim is the borrower that loses least since its last checkpoint."""

from __future__ import annotations

import pytest

from accounts.models import Team
from core.models import Notification
from gpus.models import ResourceClass
from jobs import actions, checkpoints
from jobs.choices import EventKind, JobState
from jobs.models import Job
from jobs.usage import teams_usage_rows
from tests.factories import cycle, run_until, submit_job
from tests.sim_objects import A10

CHECKPOINT = {"signal": "SIGUSR1", "grace_seconds": 60, "report": "api"}


def env_of(workload) -> dict[str, str]:
    container = workload["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_a_preempted_job_gets_its_signal_and_grace_and_resumes(cluster, clock, people):
    admin, bob = people["admin"], people["bob"]
    a10 = ResourceClass.objects.get(key=A10)
    actions.set_quota(admin, Team.objects.get(slug="nlp"), a10, 0, a10.allocatable)
    actions.set_quota(admin, Team.objects.get(slug="vision"), a10, 4, 8)
    borrowers = [
        submit_job(bob, "nlp", A10, count=4, preemptible=True, command=["sleep", "3600"], checkpoint=CHECKPOINT)
        for _ in range(a10.allocatable // 4)
    ]
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    oldest = Job.objects.get(pk=borrowers[0].pk)
    assert oldest.state == JobState.RUNNING
    (first,) = [w for w in cluster.list_workloads("team-nlp") if w["metadata"]["name"] == oldest.workload_name]
    pod = first["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 60
    hook = pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"]
    assert hook == ["/bin/sh", "-c", "kill -USR1 1; sleep 50"]
    assert env_of(first)["PORTAL_ATTEMPT"] == "1" and env_of(first)["PORTAL_RESUMING"] == "0"

    # The oldest borrower wrote a checkpoint just now; the others never did: it loses least, so it goes (not the
    # youngest, as before checkpoints counted).
    cycle(cluster, clock, 600)
    checkpoints.report_checkpoint(bob, oldest, now=clock.now)
    checkpointed_at = Job.objects.get(pk=oldest.pk).last_checkpoint_at
    wanted = submit_job(people["alice"], "vision", A10, count=4, command=["sleep", "3600"])
    cycle(cluster, clock, 1)
    victims = list(Job.objects.filter(state=JobState.PREEMPTING))
    assert [v.pk for v in victims] == [oldest.pk]
    notice = victims[0].events.filter(kind=EventKind.PREEMPT_NOTICE).first()
    assert notice.data["signal"] == "SIGUSR1" and notice.data["grace_seconds"] == 60
    assert Notification.objects.filter(user=bob, kind="job.preempted", title__contains=f"#{oldest.pk}").exists()

    # The next pass delivers the signal: the workload is deleted (Kubernetes' graceful termination begins) and the
    # job stays preempting, holding its GPUs, for its grace: it is neither lost nor ended.
    cycle(cluster, clock, 5)
    victim = Job.objects.get(pk=oldest.pk)
    assert victim.state == JobState.PREEMPTING
    assert oldest.workload_name not in {w["metadata"]["name"] for w in cluster.list_workloads("team-nlp")}
    stopped = [e["message"] for e in cluster.pod_events("team-nlp", oldest.pod_name) if e["reason"] == "Killing"]
    assert stopped == ["Stopping container main"]  # the kubelet stops it (the hook, then SIGTERM)
    sent = victim.events.filter(kind=EventKind.PREEMPT_NOTICE, data__signal="SIGUSR1", data__has_key="workload")
    assert sent.count() == 1
    cycle(cluster, clock, 30)
    assert Job.objects.get(pk=oldest.pk).state == JobState.PREEMPTING
    assert Job.objects.get(pk=wanted.pk).state == JobState.QUEUED

    # After the grace it is requeued; what it lost is the time since its checkpoint.
    cycle(cluster, clock, 30)
    victim = Job.objects.get(pk=oldest.pk)
    assert victim.state == JobState.QUEUED
    requeued = victim.events.filter(kind=EventKind.REQUEUED).last()
    lost_hours = 4 * a10.gpu_fraction * 66 / 3600  # 1 + 5 + 30 + 30 s since the checkpoint, 4 units
    assert requeued.data["lost_gpu_hours"] == pytest.approx(lost_hours, abs=1e-3)
    assert victim.preemption_lost_gpu_seconds == pytest.approx(lost_hours * 3600, rel=1e-3)
    nlp = Team.objects.get(slug="nlp")
    rows = teams_usage_rows([nlp], clock.now.date(), clock.now.date(), clock.now)
    assert rows[0]["lost"] == pytest.approx(lost_hours, abs=1e-3)

    # Once the wanted job ends, the victim runs again and is told it resumes from its checkpoint.
    wanted = run_until(cluster, clock, wanted, JobState.RUNNING)
    actions.cancel_job(people["alice"], wanted)
    victim = run_until(cluster, clock, victim, JobState.RUNNING)
    assert victim.attempts == 2
    (again,) = [w for w in cluster.list_workloads("team-nlp") if w["metadata"]["name"] == victim.workload_name]
    env = env_of(again)
    assert env["PORTAL_ATTEMPT"] == "2" and env["PORTAL_RESUMING"] == "1"
    assert env["PORTAL_LAST_CHECKPOINT"] == checkpointed_at.isoformat()
    spec, before = again["spec"]["template"]["spec"], first["spec"]["template"]["spec"]
    assert spec.get("volumes") == before.get("volumes")
    assert spec["containers"][0].get("volumeMounts") == before["containers"][0].get("volumeMounts")


def test_a_team_minimum_runtime_keeps_its_young_jobs_from_preemption(cluster, clock, people):
    admin, bob = people["admin"], people["bob"]
    a10 = ResourceClass.objects.get(key=A10)
    nlp = Team.objects.get(slug="nlp")
    actions.set_quota(admin, nlp, a10, 0, a10.allocatable)
    actions.set_quota(admin, Team.objects.get(slug="vision"), a10, 4, 8)
    checkpoints.set_min_runtime(admin, nlp, 1800)
    for _ in range(a10.allocatable // 4):
        submit_job(bob, "nlp", A10, count=4, preemptible=True, command=["sleep", "7200"])
    cycle(cluster, clock)
    cycle(cluster, clock, 6)
    wanted = submit_job(people["alice"], "vision", A10, count=4)
    cycle(cluster, clock, 600)
    assert not Job.objects.filter(state=JobState.PREEMPTING).exists()
    assert Job.objects.get(pk=wanted.pk).state == JobState.QUEUED
    cycle(cluster, clock, 1300)  # past the minimum runtime: now one goes
    assert Job.objects.filter(state=JobState.PREEMPTING).count() == 1
