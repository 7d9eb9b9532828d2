"""Inference services end to end through run_cycle on the simulated cluster: the quota rule (scale-up on the
afternoon traffic stops at the team's quota, back down at night; borrowed replicas reclaimed for a guaranteed job
with notice and grace; the minimum waits with a reason), rollout and rollback, pause and resume, stop, and the
dedicated pool."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from accounts.models import Team
from cluster.base import NotFound
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import EventKind, JobState, ServiceState
from jobs.models import Job, JobEvent
from jobs.service import ops as service_ops
from tests.factories import inference_service, simulated_cluster
from tests.sim_objects import H100
from tests.unit.jobs.service_kit import POOL, SMALL_CLUSTER, cycle, fresh, hpa_of, pods_of, scenario, until

DAY = 86_400.0

# The morning: the simulated traffic rises towards the afternoon peak. The cluster is the service tests' small one.
pytestmark = [pytest.mark.clock(hour=9), SMALL_CLUSTER]


def test_the_minimum_is_admitted_launched_and_runs(cluster, clock, people):
    clock.advance(18 * 3600)  # 03:00, the night's trough: the HPA wants no more than the minimum
    service = inference_service(people["alice"])
    job = service.job
    assert job.kind == "service" and job.state == JobState.QUEUED and job.workers == 1
    cycle(cluster, clock)
    service = fresh(service)
    assert service.job.state == JobState.ADMITTED
    deployment = cluster.get_deployment("team-vision", "llm")
    assert deployment["metadata"]["labels"]["gpu-portal.io/job-id"] == str(job.pk)
    hpa = hpa_of(cluster, service)
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (1, 1)
    cycle(cluster, clock, 30, times=2)
    service = fresh(service)
    assert service.job.state == JobState.RUNNING
    assert service.observed["ready"] == 1 and service.granted_replicas == 1
    assert [r["pod"] for r in service.job.ranks] == [p["metadata"]["name"] for p in pods_of(cluster, service)]
    # The timeline speaks of the service's objects, not of a batch workload.
    created = service.job.events.get(kind=EventKind.CREATED).message
    assert created == "Deployment llm (with its Service and autoscaler) created in namespace team-vision."


def test_scale_up_stops_at_the_quota_and_comes_back_down_at_night(cluster, clock, people):
    """A day in about 70 cycles: a cycle a minute while the grants come, then every 15 minutes to the afternoon
    peak and every 30 through the evening and night (the pure quota rule under it is
    test_admission.py::test_a_services_wanted_replicas_are_granted_up_to_the_limit_borrowed_above_the_guarantee)."""
    service = inference_service(people["alice"])
    # Morning to the afternoon peak: the HPA wants 8 (80 rps / 5 per replica) but the team's limit is 4 GPUs.
    seen = []
    for _ in range(15):
        cycle(cluster, clock, 60)
        seen.append(fresh(service).granted_replicas)
    seen += until(cluster, clock, service, hour=16, step=900)
    service = fresh(service)
    assert max(seen) == 4, seen  # never above what the quota allows
    assert service.granted_replicas == 4 and service.borrowed_replicas == 2  # 2 within the guarantee, 2 borrowed
    hpa = hpa_of(cluster, service)
    assert hpa["spec"]["maxReplicas"] == 4
    limited = next(c for c in hpa["status"]["conditions"] if c["type"] == "ScalingLimited")
    assert limited["status"] == "True" and limited["reason"] == "TooManyReplicas"
    assert len(pods_of(cluster, service)) == 4
    grants = JobEvent.objects.filter(job=service.job, kind=EventKind.SERVICE, data__action="grant")
    assert grants.count() == 3
    # Through the evening into the night: the grants go back down to the minimum.
    until(cluster, clock, service, hour=4, step=1800)
    service = fresh(service)
    assert service.granted_replicas == 1 and service.replica_slots == [] and service.borrowed_replicas == 0
    assert hpa_of(cluster, service)["spec"]["maxReplicas"] == 1
    cycle(cluster, clock, 60, times=3)
    assert len(pods_of(cluster, service)) == 1


def test_borrowed_replicas_are_reclaimed_for_a_guaranteed_job_with_notice_and_grace(cluster, clock, people):
    service = inference_service(people["alice"])
    cycle(cluster, clock, 60, times=12)  # 09:12: the morning's traffic already wants more than the limit of 4
    service = fresh(service)
    assert service.granted_replicas == 4 and service.borrowed_replicas == 2
    # The other team wants two whole nodes within its guarantee. The scheduler spread the service's 4 replicas over the
    # 4 nodes (its reservations follow them), so only reclaiming the 2 borrowed ones frees two nodes.
    nlp = Team.objects.get(slug="nlp")
    job = actions.submit_job(
        people["bob"], nlp, ResourceClass.objects.get(key=H100),
        {"name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "3600"], "count": 2,
         "cpu_millicores": 2000, "memory_mb": 8192, "preemptible": False, "workers": 2, "kind": "distributed"},
    ).job  # fmt: skip
    cycle(cluster, clock, 10)
    service = fresh(service)
    notices = JobEvent.objects.filter(job=service.job, kind=EventKind.PREEMPT_NOTICE)
    assert notices.count() >= 1 and f"job #{job.pk}" in notices.first().message
    assert AuditEvent.objects.filter(action="service.reclaim").exists()
    assert any(slot.get("reclaim_at") for slot in service.replica_slots)
    assert service.granted_replicas == 4  # still held during the grace period
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED
    cycle(cluster, clock, 40)  # past the grace period: the slots are dropped, the HPA's maximum lowered
    # The same cycle gives the reclaimed nodes to the waiting job: it is admitted on two whole nodes the service
    # no longer books. Capacity left over after that may be borrowed again (the HPA still wants more).
    job = Job.objects.get(pk=job.pk)
    service = fresh(service)
    assert job.state == JobState.ADMITTED and len(set(job.node_names)) == 2
    booked = [slot["node"] for slot in service.replica_slots] + list(service.job.node_names or [service.job.node_name])
    assert not set(job.node_names) & set(booked)
    for _ in range(3):
        cycle(cluster, clock, 30)
        service = fresh(service)
        # Never more GPUs than the 4 nodes × 2 hold: the job's 4 and the service's granted replicas.
        assert service.granted_replicas + 4 <= 8
        # The autoscaler never may go above the grant (a new grant reaches it in the next cycle's sync).
        assert hpa_of(cluster, service)["spec"]["maxReplicas"] <= service.granted_replicas
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING


def test_the_minimum_waits_with_a_reason_when_quota_is_short(cluster, clock, people):
    service = inference_service(people["alice"], min_replicas=3, max_replicas=3)
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 2, 2)
    cycle(cluster, clock)
    job = Job.objects.get(pk=service.job_id)
    assert job.state == JobState.QUEUED and job.wait_reason == "quota"
    assert "limit of 2" in job.wait_message
    with pytest.raises(NotFound):
        cluster.get_deployment("team-vision", "llm")


def test_service_errors_say_every_problem(cluster, people):
    rc = ResourceClass.objects.get(key=H100)
    errors = service_ops.service_errors(
        {"port": 0, "min_replicas": 3, "max_replicas": 2, "metric": "pods", "metric_target": -1,
         "readiness": {"type": "http", "path": "health"}},
        rc, people["vision"],
    )  # fmt: skip
    assert set(errors) == {"port", "readiness", "max_replicas", "metric_name", "metric_target"}
    errors = service_ops.service_errors({"min_replicas": 5, "max_replicas": 6, "count": 1}, rc, people["vision"])
    assert "limit of 4" in errors["min_replicas"][0]
    with pytest.raises(ValidationError) as raised:
        inference_service(people["alice"], name="Bad_Name", count=99, min_replicas=0)
    assert {"name", "count", "min_replicas"} <= set(raised.value.message_dict)


def test_rollout_and_rollback(cluster, clock, people):
    clock.advance(18 * 3600)  # the night: one replica
    service = inference_service(people["alice"])
    cycle(cluster, clock, 30, times=3)
    service = service_ops.update_service(people["alice"], fresh(service), {"image": "registry.example/llm:2"})
    assert service.revision == 2 and service.previous_spec["image"] == "registry.example/llm:1"
    cycle(cluster, clock, 30, times=4)
    deployment = cluster.get_deployment("team-vision", "llm")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/llm:2"
    assert deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    assert fresh(service).observed["updated"] == 1
    service = service_ops.rollback_service(people["alice"], fresh(service))
    assert service.revision == 3 and service.job.image == "registry.example/llm:1"
    cycle(cluster, clock, 30, times=4)
    deployment = cluster.get_deployment("team-vision", "llm")
    assert deployment["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/llm:1"
    actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {"service.create", "service.update", "service.rollback"} <= actions
    with pytest.raises(Exception, match="cannot change"):
        service_ops.update_service(people["alice"], fresh(service), {"count": 2})


def test_pause_holds_rollouts_and_resume_lets_them_go(cluster, clock, people):
    clock.advance(18 * 3600)  # the night: one replica
    service = inference_service(people["alice"])
    cycle(cluster, clock, 30, times=3)
    service_ops.pause_service(people["alice"], fresh(service))
    service_ops.update_service(people["alice"], fresh(service), {"image": "registry.example/llm:3"})
    cycle(cluster, clock, 30, times=3)
    deployment = cluster.get_deployment("team-vision", "llm")
    assert deployment["spec"]["paused"] is True
    assert [p["spec"]["containers"][0]["image"] for p in pods_of(cluster, service)] == ["registry.example/llm:1"]
    service_ops.resume_service(people["alice"], fresh(service))
    cycle(cluster, clock, 30, times=4)
    assert not cluster.get_deployment("team-vision", "llm")["spec"].get("paused")
    assert [p["spec"]["containers"][0]["image"] for p in pods_of(cluster, service)] == ["registry.example/llm:3"]


def test_stop_removes_every_object_and_frees_the_quota(cluster, clock, people):
    clock.advance(18 * 3600)  # the night: one replica
    service = inference_service(people["alice"])
    cycle(cluster, clock, 30, times=3)
    service_ops.stop_service(people["alice"], fresh(service))
    service = fresh(service)
    assert service.state == ServiceState.STOPPED and service.job.state == JobState.CANCELLED
    cycle(cluster, clock, 30, times=2)
    for get in (cluster.get_deployment, cluster.get_hpa):
        with pytest.raises(NotFound):
            get("team-vision", "llm")
    assert "llm" not in [s["metadata"]["name"] for s in cluster.list_services("team-vision")] if hasattr(
        cluster, "list_services") else True  # fmt: skip
    cycle(cluster, clock, 60, times=2)
    assert pods_of(cluster, service) == []


def test_only_the_owner_a_lead_or_an_admin_may_change_a_service(cluster, clock, people):
    from django.core.exceptions import PermissionDenied

    service = inference_service(people["alice"])
    with pytest.raises(PermissionDenied):
        service_ops.pause_service(people["bob"], service)
    with pytest.raises(PermissionDenied):
        service_ops.stop_service(people["outsider"], service)


def test_batch_jobs_avoid_the_dedicated_pool_and_services_use_it(db, tmp_path, clock, people, settings):
    settings.PORTAL_SERVICE_POOL_LABEL = f"{POOL}=inference"
    sim = simulated_cluster(
        tmp_path / "sim.json", clock, admin=people["admin"], scenario=scenario(pool_nodes=2),
        quotas={"vision": (8, 8), "nlp": (8, 8)},
    )  # fmt: skip
    service = inference_service(people["alice"])
    nlp = Team.objects.get(slug="nlp")
    rc = ResourceClass.objects.get(key=H100)
    batch = [
        actions.submit_job(people["bob"], nlp, rc, {"name": f"b{i}", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
                            "command": ["sleep", "3600"], "count": 2, "cpu_millicores": 1000, "memory_mb": 1024}).job
        for i in range(3)
    ]  # fmt: skip
    cycle(sim, clock)
    placed = {job.pk: Job.objects.get(pk=job.pk) for job in batch}
    on = [j.node_name for j in placed.values() if j.state == JobState.ADMITTED]
    assert sorted(on) == ["gpu-2", "gpu-3"]  # the two shared nodes; the third job waits
    assert fresh(service).job.node_name in ("gpu-0", "gpu-1")
    selector = sim.get_deployment("team-vision", "llm")["spec"]["template"]["spec"]["nodeSelector"]
    assert selector == {POOL: "inference"}


def test_scaling_a_queued_service_changes_the_minimum_admission_asks_for(cluster, clock, people):
    service = inference_service(people["alice"])
    service = service_ops.scale_service(people["alice"], service, 2, 3)
    assert Job.objects.get(pk=service.job_id).workers == 2
    assert AuditEvent.objects.filter(action="service.update").exists()
    with pytest.raises(ValidationError) as raised:
        service_ops.scale_service(people["alice"], fresh(service), 3, 2)
    assert "max_replicas" in raised.value.message_dict
    clock.advance(18 * 3600)
    cycle(cluster, clock)
    assert len(Job.objects.get(pk=service.job_id).node_names) == 2  # the minimum on two distinct nodes


def test_a_metric_the_cluster_has_no_adapter_for_is_refused_with_what_it_can_scale_on(
    cluster, people, tmp_path, monkeypatch
):
    only_cpu = SimulatedCluster(tmp_path / "bare.json", scenario={"nodes": [], "metrics_apis": ["metrics.k8s.io"]})
    assert only_cpu.metrics_apis() == frozenset({"metrics.k8s.io"})
    monkeypatch.setattr(service_ops, "get_backend", lambda: only_cpu)
    rc = ResourceClass.objects.get(key=H100)
    fields = {"min_replicas": 1, "max_replicas": 2, "count": 1, "metric": "pods", "metric_name": "rps"}
    (message,) = service_ops.service_errors(fields, rc, people["vision"])["metric"]
    assert message == (
        "This cluster has no custom metrics adapter (e.g. prometheus-adapter): nothing serves custom.metrics.k8s.io, "
        "so an autoscaler could not read this metric. Scale on: CPU utilisation (%)."
    )
    cpu = {**fields, "metric": "cpu", "metric_name": "", "metric_target": 70}
    assert "metric" not in service_ops.service_errors(cpu, rc, people["vision"])
    # The default simulated cluster has every adapter, as the demo needs.
    assert cluster.metrics_apis() == frozenset({"metrics.k8s.io", "custom.metrics.k8s.io", "external.metrics.k8s.io"})
    # A registered cluster is judged by what its last check found it serving.
    from gpus.models import Cluster

    Cluster.objects.create(name="lab", connection="simulated", capabilities={"metrics_apis": ["metrics.k8s.io"]})
    Cluster.objects.create(name="cloud", connection="simulated", capabilities={"metrics_apis": []})
    (message,) = service_ops.service_errors({**fields, "clusters": ["lab", "cloud"]}, rc, people["vision"])["metric"]
    assert message.startswith("Clusters cloud, lab have no custom metrics adapter (e.g. prometheus-adapter)")
    assert "metric" not in service_ops.service_errors({**cpu, "clusters": ["lab"]}, rc, people["vision"])


def test_a_rollout_surges_only_into_a_granted_replica_the_deployment_does_not_use(cluster, clock, people):
    from jobs.service.launch import render_objects

    clock.advance(18 * 3600)  # the night: the minimum only
    service = inference_service(people["alice"], min_replicas=1, max_replicas=4)
    cycle(cluster, clock, 30, times=3)
    service = fresh(service)
    assert service.granted_replicas == 1

    def strategy(replicas):
        _, deployment, _ = render_objects(service, service.job, max_replicas=service.granted_replicas,
                                          replicas=replicas)  # fmt: skip
        return deployment["spec"]["strategy"]["rollingUpdate"]

    # All granted replicas in use: one at a time, never a replica more than the grant.
    assert strategy(1) == {"maxSurge": 0, "maxUnavailable": 1}
    # A granted replica the autoscaler does not use now: the rollout may start the new one first.
    service.replica_slots = [{"node": "gpu-1", "borrowed": False, "at": clock.now.isoformat()}]
    assert strategy(1) == {"maxSurge": 1, "maxUnavailable": 0}
    assert strategy(2) == {"maxSurge": 0, "maxUnavailable": 1}
