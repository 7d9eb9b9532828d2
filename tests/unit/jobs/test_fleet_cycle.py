"""The job cycle over a fleet of two simulated clusters (issue 32, items 2 and 4): a job names the clusters it may
run on and spills from the first to the next when the first is full; each cluster's jobs are followed on their own
backend; an unreachable cluster's jobs are neither advanced nor lost while the other keeps admitting; a gang stays
in one cluster. (Team presence: tests/unit/jobs/test_fleet_presence.py.)"""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from gpus import fleet
from gpus.choices import ClusterHealth
from gpus.class_admin import update_class
from gpus.models import Cluster, ResourceClass
from jobs import actions
from jobs.choices import JobState, WaitReason
from jobs.cycle.run import run_cycle
from jobs.models import Job, Quota
from tests.factories import submit_gang, submit_job
from tests.sim_objects import H100


def cycle_fleet(home, cloud, clock, seconds: float = 6):
    clock.advance(seconds)
    return run_cycle(home, now=clock.now, fleet=[cloud])


def test_a_job_spills_to_the_next_cluster_when_the_first_is_full_and_runs_there(cluster, cloud, clock, people):
    row, sim = cloud
    fill = [submit_job(people["alice"], count=8, clusters=["default", "cloud"], name=f"fill-{i}") for i in range(7)]
    cycle_fleet(cluster, cloud, clock)
    for job in fill:
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED and job.cluster.name == "default", (job.state, job.wait_message)
    spilled = submit_job(people["alice"], count=8, clusters=["default", "cloud"], name="spilled")
    cycle_fleet(cluster, cloud, clock)
    spilled.refresh_from_db()
    assert spilled.state == JobState.ADMITTED, spilled.wait_message
    assert spilled.cluster == row and spilled.node_name.startswith("gke-a3-h100-")
    admitted = spilled.events.get(kind="admitted")
    assert admitted.message == "Admitted and placed on gke-a3-h100-01 in cluster cloud."
    assert admitted.data["cluster"] == "cloud"
    # Its workload was made in the cloud cluster, and only there.
    assert [w["metadata"]["name"] for w in sim.list_workloads()] == [spilled.workload_name]
    assert spilled.workload_name not in {w["metadata"]["name"] for w in cluster.list_workloads()}
    for _ in range(10):
        cycle_fleet(cluster, cloud, clock)
        spilled.refresh_from_db()
        if spilled.state == JobState.RUNNING:
            break
    assert spilled.state == JobState.RUNNING
    pods = sim.list_pods()
    assert pods and pods[0]["spec"]["nodeName"] == spilled.node_name


def test_a_job_on_another_cluster_shows_the_log_of_its_pod_there(cluster, cloud, clock, people, monkeypatch):
    """The job page, the API and the download read a running job's log from the cluster it runs on."""
    row, sim = cloud
    monkeypatch.setattr(fleet, "backend_of", lambda c: sim if c.pk == row.pk else cluster)
    job = submit_job(people["alice"], count=8, clusters=["cloud"], command=["sleep", "300"])
    for _ in range(10):
        cycle_fleet(cluster, cloud, clock, seconds=15)
        job.refresh_from_db()
        if job.state == JobState.RUNNING:
            break
    assert job.state == JobState.RUNNING and job.cluster == row
    started = f"starting {job.pod_name} on {job.node_name}"
    client = Client()
    client.force_login(people["alice"])
    assert started in client.get(f"/api/v1/jobs/{job.pk}/logs/").json()["log"]
    assert started in client.get(job.get_absolute_url()).content.decode()
    assert started in b"".join(client.get(f"/jobs/{job.pk}/log.txt").streaming_content).decode()


def test_a_job_that_names_one_cluster_waits_for_it(cluster, cloud, clock, people):
    job = submit_job(people["alice"], count=8, clusters=["cloud"])
    cycle_fleet(cluster, cloud, clock)
    job.refresh_from_db()
    assert job.cluster.name == "cloud"
    again = [submit_job(people["alice"], count=8, clusters=["cloud"], name=f"more-{i}") for i in range(2)]
    cycle_fleet(cluster, cloud, clock)
    states = sorted(Job.objects.get(pk=j.pk).state for j in again)
    assert states == [JobState.ADMITTED, JobState.QUEUED]  # the cloud holds two 8-GPU jobs; the third waits


def test_an_unreachable_cluster_keeps_its_jobs_and_the_other_keeps_admitting(cluster, cloud, clock, people):
    row, sim = cloud
    there = submit_job(people["alice"], count=8, clusters=["cloud"], name="there")
    for _ in range(6):
        cycle_fleet(cluster, cloud, clock)
    there.refresh_from_db()
    assert there.state == JobState.RUNNING
    Cluster.objects.filter(pk=row.pk).update(health=ClusterHealth.UNREACHABLE)
    row.refresh_from_db()

    class Gone:
        def __getattr__(self, name):
            from cluster.base import ClusterError

            def refuse(*args, **kwargs):
                raise ClusterError("connection refused")

            return refuse

    here = submit_job(people["alice"], count=8, name="here")
    result = cycle_fleet(cluster, (row, Gone()), clock)
    assert any("reconcile cloud" in error for error in result.errors)
    here.refresh_from_db()
    there.refresh_from_db()
    assert here.state == JobState.ADMITTED and here.cluster.name == "default"
    assert there.state == JobState.RUNNING  # not declared lost
    # Nothing new goes to the unreachable cluster's nodes.
    waits = submit_job(people["alice"], count=8, clusters=["cloud"], name="waits")
    cycle_fleet(cluster, (row, Gone()), clock)
    waits.refresh_from_db()
    assert waits.state == JobState.QUEUED


def test_a_cluster_that_stops_answering_is_asked_once_and_left_out_from_the_next_cycle(cluster, cloud, clock, people):
    """Not yet marked by the inventory, a cluster whose calls fail (or time out) costs one call in one cycle: the
    cycle marks it unreachable and skips its other passes, and the next cycles leave it out (gpus.fleet.reachable)."""
    from cluster.base import ClusterError

    row, _ = cloud
    calls = []

    class Gone:
        def __getattr__(self, name):
            def refuse(*args, **kwargs):
                calls.append(name)
                raise ClusterError("timed out")

            return refuse

    here = submit_job(people["alice"], count=8, name="here")
    result = cycle_fleet(cluster, (row, Gone()), clock)
    assert len(calls) == 1 and any("reconcile cloud" in error for error in result.errors)
    row.refresh_from_db()
    assert row.health == ClusterHealth.UNREACHABLE and "could not read it: timed out" in row.last_error
    here.refresh_from_db()
    assert here.state == JobState.ADMITTED and here.cluster.name == "default"
    clock.advance(6)
    run_cycle(cluster, now=clock.now)  # the fleet as the cycle finds it: without the unreachable cluster
    assert len(calls) == 1


def test_a_gang_stays_in_one_cluster(cluster, cloud, clock, people):
    # Room for one 8-GPU worker in each cluster only: the gang of two waits rather than straddle them.
    fill = [submit_job(people["alice"], count=8, name=f"fill-{i}", clusters=["default"]) for i in range(6)]
    fill += [submit_job(people["alice"], count=8, name="fill-cloud", clusters=["cloud"])]
    cycle_fleet(cluster, cloud, clock)
    assert all(Job.objects.get(pk=j.pk).state == JobState.ADMITTED for j in fill)
    gang = submit_gang(people["alice"], count=8, workers=2, clusters=["default", "cloud"])
    cycle_fleet(cluster, cloud, clock)
    gang.refresh_from_db()
    assert gang.state == JobState.QUEUED
    Job.objects.filter(pk=fill[-1].pk).update(state=JobState.CANCELLED)
    cycle_fleet(cluster, cloud, clock)
    gang.refresh_from_db()
    assert gang.state == JobState.ADMITTED and gang.cluster.name == "cloud"
    assert all(name.startswith("gke-a3-h100-") for name in gang.node_names)


def test_a_bad_cluster_list_is_refused_with_every_problem(cluster, cloud, people):
    from django.core.exceptions import ValidationError

    from jobs.storage.secrets import create_secret

    create_secret(people["alice"], people["vision"], "wandb", {"key": "v"}, backend=cluster)
    with pytest.raises(ValidationError) as refused:
        submit_job(people["alice"], clusters=["cloud", "nowhere", "cloud"],
                   secret_env=[{"name": "WANDB_API_KEY", "secret": "wandb", "key": "key"}])  # fmt: skip
    problems = " ".join(refused.value.message_dict["clusters"])
    assert "No cluster 'nowhere'" in problems and "once" in problems
    # Secrets are copied to every cluster (jobs.storage.presence): a list without the settings cluster is fine.
    assert "include default" not in problems


def test_a_cap_on_a_cluster_sends_work_to_the_other_and_each_cluster_says_why_not(cluster, cloud, clock, people):
    """Vision may hold 80 H100s fleet-wide but 8 on cloud: the second cloud-first job spills on-premise though cloud
    has room; once on-premise is full too, the next one's wait says why per cluster."""
    quota = Quota.objects.get(team=people["vision"], resource_class__key=H100)
    actions.set_quota(people["admin"], people["vision"], quota.resource_class, 80, 80, cluster_caps={"cloud": 8})
    first = submit_job(people["alice"], count=8, clusters=["cloud", "default"], name="first")
    cycle_fleet(cluster, cloud, clock)
    second = submit_job(people["alice"], count=8, clusters=["cloud", "default"], name="second")
    capped = submit_job(people["alice"], count=8, clusters=["cloud"], name="capped")
    cycle_fleet(cluster, cloud, clock)
    first.refresh_from_db(), second.refresh_from_db(), capped.refresh_from_db()
    assert first.cluster.name == "cloud" and second.cluster.name == "default"
    assert capped.state == JobState.QUEUED and capped.wait_reason == WaitReason.QUOTA
    assert capped.wait_message.startswith(
        "Team Computer Vision's cap of 8 × H100 80GB HBM3 on cloud is reached (it holds 8 there; this job needs 8)."
    )
    fill = [submit_job(people["alice"], count=8, clusters=["default"], name=f"fill-{i}") for i in range(6)]
    cycle_fleet(cluster, cloud, clock)
    assert all(Job.objects.get(pk=j.pk).state == JobState.ADMITTED for j in fill)
    last = submit_job(people["alice"], count=8, clusters=["default", "cloud"], name="last")
    cycle_fleet(cluster, cloud, clock)
    last.refresh_from_db()
    assert last.state == JobState.QUEUED and last.wait_reason == WaitReason.CAPACITY
    rows = {row["cluster"]: row for row in last.wait_detail["clusters"]}
    assert (rows["default"]["reason"], rows["cloud"]["reason"]) == ("capacity", "quota")
    assert rows["default"]["message"].startswith("no node has 8 free × H100 80GB HBM3")
    assert "Why not on each cluster: default: no node has 8 free" in last.wait_message
    # The job page lists them, one line per cluster.
    client = Client()
    client.force_login(people["alice"])
    page = client.get(reverse("jobs:job-detail", args=[last.pk])).content.decode()
    assert 'data-testid="wait-clusters"' in page and '<li data-cluster="cloud"><strong>cloud</strong>' in page


def test_a_class_scoped_to_one_cluster_keeps_its_work_there(cluster, cloud, clock, people):
    h100 = ResourceClass.objects.get(key=H100)
    update_class(people["admin"], h100, cluster=Cluster.objects.get(name="default"))
    fill = [submit_job(people["alice"], "vision", h100, count=8, name=f"fill-{i}") for i in range(7)]
    cycle_fleet(cluster, cloud, clock)
    assert all(Job.objects.get(pk=j.pk).cluster.name == "default" for j in fill)
    more = submit_job(people["alice"], "vision", h100, count=8, name="more")
    cycle_fleet(cluster, cloud, clock)
    more.refresh_from_db()
    # The cloud's H100s are another class now: the job waits for on-premise capacity rather than go there.
    assert more.state == JobState.QUEUED and more.wait_reason == WaitReason.CAPACITY
    assert "clusters" not in more.wait_detail
    cloud_class = ResourceClass.objects.get(key=H100)
    assert cloud_class.pk != h100.pk and cloud_class.total == 16


def test_a_node_is_managed_or_not_in_its_own_cluster(cluster, cloud, people):
    """A job rendered on its own asks whether its node is a managed pool's by its cluster and name: the demo
    cluster's node of the same name as a GKE node of the cloud says nothing of it."""
    from gpus.models import Node
    from jobs.render import _managed_node

    row, _ = cloud
    gke = Node.objects.filter(cluster=row).exclude(provider="").first()
    home = Node.objects.filter(cluster__name="default", product_source="gfd").first()
    Node.objects.filter(pk=home.pk).update(name=gke.name)  # the same name in both clusters
    job = submit_job(people["alice"], count=1)
    job.node_name = gke.name
    job.cluster_id = row.pk
    assert _managed_node(job)
    job.cluster_id = home.cluster_id
    assert not _managed_node(job)


def test_the_workers_cycle_gives_each_registered_cluster_a_task_of_its_own(cluster, cloud, clock, people, monkeypatch):
    """jobs.tasks.run_cycle runs the cycle of the cluster configured in settings with the fleet-wide admission and
    queues one cycle_cluster task per reachable registered cluster, which follows that cluster's jobs and launches what
    admission placed there: a cluster that hangs holds up its own task only. An unreachable one gets no task."""
    from jobs import tasks

    row, sim = cloud
    queued = []
    monkeypatch.setattr(tasks.cycle_cluster, "apply_async", lambda args, **kw: queued.append((args[0], kw)))
    monkeypatch.setattr(tasks, "get_backend", lambda: cluster)
    monkeypatch.setattr(fleet, "backend_of", lambda c: sim if c.pk == row.pk else cluster)
    there = submit_job(people["alice"], count=8, clusters=["cloud"], name="there")
    here = submit_job(people["alice"], count=8, clusters=["default"], name="here")
    result = tasks.run_cycle()
    assert result["admitted"] == 2 and result["launched"] == 1  # the home cluster's job only
    assert [name for name, _ in queued] == ["cloud"] and queued[0][1]["expires"] > 0
    there.refresh_from_db()
    here.refresh_from_db()
    assert here.workload_created_at is not None
    assert there.state == JobState.ADMITTED and there.workload_created_at is None and not sim.list_workloads()
    assert tasks.cycle_cluster("cloud")["launched"] == 1
    there.refresh_from_db()
    assert there.workload_created_at is not None
    assert [w["metadata"]["name"] for w in sim.list_workloads()] == [there.workload_name]
    for _ in range(6):
        clock.advance(6)
        tasks.cycle_cluster("cloud")
    there.refresh_from_db()
    assert there.state in (JobState.RUNNING, JobState.SUCCEEDED)  # followed by its cluster's own task
    assert tasks.cycle_cluster("gone") == {"gone": 1}
    Cluster.objects.filter(pk=row.pk).update(health=ClusterHealth.UNREACHABLE)
    queued.clear()
    tasks.run_cycle()
    assert queued == []
