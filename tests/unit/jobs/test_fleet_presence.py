"""Team presence over a fleet of two simulated clusters (issue 32, items 4 and 5): the team's namespace, secrets and
registry credentials are copied to the registered cluster by its presence pass, and only then may work that uses
them go there; a volume pins work to its cluster; a notebook naming the cloud cluster runs there with its home volume
there; a service's replicas stay on one cluster; an unreachable cluster fails its own pass only; bad cluster lists
and volumes of two clusters are refused with every problem at once."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.test import Client

from cluster.base import ClusterError
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.choices import ClusterHealth
from gpus.models import Cluster, Node, ResourceClass
from gpus.reconcile import sync_inventory
from jobs.choices import JobState, NotebookState, PresenceState, StopReason
from jobs.cycle.admit import class_views
from jobs.cycle.run import run_cycle
from jobs.models import InferenceService, Job, Notebook, TeamPresence, TeamVolume
from jobs.notebook import sessions
from jobs.service import ops as service_ops
from jobs.service.follow import replica_views
from jobs.storage import presence, volumes
from jobs.storage.secrets import create_registry_credential, create_secret, delete_secret, rotate_secret
from tests.factories import notebook_session, submit_job
from tests.sim_objects import DEMO_SCENARIO, H100, claim

WANDB = [{"name": "WANDB_API_KEY", "secret": "wandb", "key": "key"}]


class Gone:
    """A cluster that refuses every call, as an unreachable API server does."""

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            raise ClusterError("connection refused")

        return refuse


def cycle_fleet(home, cloud, clock, seconds: float = 6):
    clock.advance(seconds)
    return run_cycle(home, now=clock.now, fleet=[cloud])


def present(cloud, team) -> TeamPresence:
    return TeamPresence.objects.get(team=team, cluster=cloud[0])


def test_secrets_and_credentials_appear_in_the_second_cluster_after_its_presence_pass(cluster, cloud, people):
    row, sim = cloud
    vision, alice = people["vision"], people["alice"]
    create_secret(alice, vision, "wandb", {"key": "one"}, backend=cluster)
    create_registry_credential(alice, vision, "nvcr.io", "$oauthtoken", "ngc-key", backend=cluster)
    assert "team-vision" not in {s["metadata"]["name"] for s in sim.list_secrets("team-vision")}  # not yet there
    result = presence.sync(row, sim, cluster)
    assert not result.errors, result.errors
    assert sim.secret_values("team-vision", "wandb") == ("Opaque", {"key": "one"})
    kind, data = sim.secret_values("team-vision", "portal-registry-nvcr.io")
    assert kind == "kubernetes.io/dockerconfigjson" and "ngc-key" in data[".dockerconfigjson"]
    assert present(cloud, vision).state == PresenceState.IN_STEP and present(cloud, vision).synced_at
    assert AuditEvent.objects.filter(action="presence.in_step", team=vision).count() == 1

    # A rotation marks the cluster pending until the next pass copies the new value; a deletion removes it there.
    rotate_secret(alice, vision.secrets.get(name="wandb"), {"key": "two"}, backend=cluster)
    assert present(cloud, vision).state == PresenceState.PENDING
    presence.sync(row, sim, cluster)
    assert sim.secret_values("team-vision", "wandb") == ("Opaque", {"key": "two"})
    assert present(cloud, vision).state == PresenceState.IN_STEP
    delete_secret(alice, vision.secrets.get(name="wandb"), backend=cluster)
    presence.sync(row, sim, cluster)
    assert {s["metadata"]["name"] for s in sim.list_secrets("team-vision")} == {"portal-registry-nvcr.io"}


def test_a_job_using_a_secret_spills_to_the_second_cluster_once_presence_is_in_step(
    cluster, cloud, clock, people, monkeypatch
):
    monkeypatch.setattr("jobs.storage.secrets.get_backend", lambda: cluster)  # submission asks the settings cluster
    row, sim = cloud
    alice, vision = people["alice"], people["vision"]
    create_secret(alice, vision, "wandb", {"key": "v"}, backend=cluster)
    fill = [submit_job(alice, count=8, clusters=["default"], name=f"fill-{i}") for i in range(7)]
    cycle_fleet(cluster, cloud, clock)
    assert all(Job.objects.get(pk=j.pk).state == JobState.ADMITTED for j in fill)
    job = submit_job(alice, count=8, clusters=["default", "cloud"], secret_env=WANDB, name="uses-secret")
    only_cloud = submit_job(alice, count=8, clusters=["cloud"], secret_env=WANDB, name="cloud-only")
    cycle_fleet(cluster, cloud, clock)
    job.refresh_from_db()
    only_cloud.refresh_from_db()
    assert job.state == JobState.QUEUED  # the default cluster is full and the secret is not on cloud yet
    assert "not in step on cloud yet" in job.wait_message, job.wait_message
    assert only_cloud.state == JobState.QUEUED and only_cloud.wait_reason == "cluster"
    assert only_cloud.wait_message.startswith("Where it may run: the team's secrets"), only_cloud.wait_message
    presence.sync(row, sim, cluster)
    cycle_fleet(cluster, cloud, clock)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.cluster == row, job.wait_message
    for _ in range(10):
        cycle_fleet(cluster, cloud, clock)
        job.refresh_from_db()
        if job.state == JobState.RUNNING:
            break
    assert job.state == JobState.RUNNING  # its pod found the Secret in the cloud namespace


def test_an_unreachable_cluster_does_not_stall_presence_on_the_other(cluster, cloud, people):
    row, sim = cloud
    vision, nlp = people["vision"], people["nlp"]
    far = Cluster.objects.create(name="far", connection="simulated", health=ClusterHealth.REACHABLE)
    create_secret(people["alice"], vision, "wandb", {"key": "v"}, backend=cluster)
    failed = presence.sync(far, Gone(), cluster)
    assert failed.errors and failed.in_step == 0
    # One refused call ends the pass: the first team's row (nlp) says why, the others wait for the next pass.
    assert TeamPresence.objects.get(team=nlp, cluster=far).state == PresenceState.ERROR
    assert "connection refused" in TeamPresence.objects.get(team=nlp, cluster=far).error
    assert TeamPresence.objects.get(team=vision, cluster=far).state == PresenceState.PENDING
    assert AuditEvent.objects.filter(action="presence.error", team=nlp).count() == 1
    done = presence.sync(row, sim, cluster)
    assert not done.errors and present(cloud, vision).state == PresenceState.IN_STEP
    # The team page says where the team's secrets are, and why not.
    client = Client()
    client.force_login(people["admin"])
    page = client.get(f"/teams/{nlp.slug}/").content.decode()
    far_row = page.split('data-cluster="far"', 1)[1].split("</tr>", 1)[0]
    assert ">Error</span>" in far_row and "connection refused" in far_row
    page = client.get(f"/teams/{vision.slug}/").content.decode()
    assert ">Pending</span>" in page.split('data-cluster="far"', 1)[1].split("</tr>", 1)[0]
    assert ">In step</span>" in page.split('data-cluster="cloud"', 1)[1].split("</tr>", 1)[0]


def test_a_job_mounting_a_volume_runs_on_the_volumes_cluster(cluster, cloud, clock, people):
    row, sim = cloud
    sim.ensure_namespace("team-vision")
    sim.ensure_pvc(claim("cloud-data"))
    volumes.reconcile_volumes(sim, row)
    assert TeamVolume.objects.get(name="cloud-data").cluster == row
    mount = [{"claim": "cloud-data", "mount_path": "/data", "read_only": False}]
    job = submit_job(people["alice"], count=1, volumes=mount)
    cycle_fleet(cluster, cloud, clock)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.cluster == row


def test_a_notebook_naming_cloud_runs_there_with_its_home_volume_there(cluster, cloud, clock, people):
    row, sim = cloud
    session = notebook_session(people["alice"], clusters=["cloud"])
    notebook = session.notebook
    assert notebook.clusters == ["cloud"] and notebook.session.clusters == ["cloud"]
    for _ in range(6):
        cycle_fleet(cluster, cloud, clock)
    notebook.refresh_from_db()
    job = notebook.session
    assert job.cluster == row and job.state == JobState.RUNNING, (job.state, job.wait_message)
    assert notebook.cluster == row
    assert notebook.volume_name in {c["metadata"]["name"] for c in sim.list_pvcs("team-vision")}
    assert notebook.volume_name not in {c["metadata"]["name"] for c in cluster.list_pvcs("team-vision")}
    # Stopped and started again, its next session goes where its home volume is.
    sessions.stop_notebook(people["alice"], notebook, StopReason.USER, cluster)
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.STOPPED
    again = sessions.start_notebook(people["alice"], notebook)
    assert again.notebook.session.clusters == ["cloud"]


# The afternoon: the simulated service's traffic follows the day (cluster/sim/traffic.py, its trough at 03:00), and at
# night its autoscaler wants no third replica, so the grant asked for below would not be asked for.
@pytest.mark.clock(hour=14)
def test_a_services_replicas_all_run_on_one_cluster(cluster, clock, tmp_path, people, settings):
    # A second on-premise cluster like the demo one (a service's Deployment selects nodes by GFD's product label,
    # which the cloud scenario's managed pools lack), and no dedicated pool: any H100 node may take a replica.
    settings.PORTAL_SERVICE_POOL_LABEL = ""
    row = Cluster.objects.create(name="second", connection="simulated", health=ClusterHealth.REACHABLE)
    sim = SimulatedCluster(tmp_path / "second.json", scenario=DEMO_SCENARIO, clock=clock)
    sync_inventory(sim, row)
    cloud = (row, sim)
    alice, vision = people["alice"], people["vision"]
    spec = dict(name="llm", image="registry.example/llm:1", command=["serve"], count=1, cpu_millicores=2000,
                memory_mb=8192, clusters=["second"])  # fmt: skip
    fields = dict(port=8080, readiness={"type": "http", "path": "/health"}, min_replicas=2, max_replicas=4,
                  metric="cpu", metric_target=70.0)  # fmt: skip
    service = service_ops.create_service(alice, vision, ResourceClass.objects.get(key=H100), spec, fields)
    for _ in range(20):
        cycle_fleet(cluster, cloud, clock, seconds=30)
        job = Job.objects.get(pk=service.job_id)
        if job.state == JobState.RUNNING:
            break
    assert job.cluster == row and job.state in (JobState.ADMITTED, JobState.RUNNING), job.wait_message
    assert all(Node.objects.filter(cluster=row, name=name).exists() for name in job.node_names or [job.node_name])
    assert sim.get_deployment("team-vision", "llm")["spec"]["replicas"] >= 2
    assert not [d for d in cluster.list_deployments() if d["metadata"]["name"] == "llm"]
    assert job.state == JobState.RUNNING, (job.state, job.wait_message, job.events.last().message)
    # Its autoscaler wants a third replica: it may only be granted on the service's cluster.
    InferenceService.objects.filter(pk=service.pk).update(observed={"scaling_limited": True, "desired": 3})
    found = replica_views(clock.now, class_views(), False)
    assert [view.clusters for view in found.queued] == [("second",)]
    cycle_fleet(cluster, cloud, clock)
    granted = InferenceService.objects.get(pk=service.pk).replica_slots
    assert granted and all(Node.objects.filter(cluster=row, name=slot["node"]).exists() for slot in granted), granted


def test_bad_cluster_lists_and_volumes_of_two_clusters_are_refused_at_once(cluster, cloud, people, api_client):
    row, sim = cloud
    alice = people["alice"]
    sim.ensure_namespace("team-vision")
    sim.ensure_pvc(claim("cloud-data"))
    volumes.reconcile_volumes(sim, row)
    cluster.ensure_namespace("team-vision")
    cluster.ensure_pvc(claim("home-data"))
    volumes.reconcile_volumes(cluster)
    both = [{"claim": "cloud-data", "mount_path": "/a", "read_only": False},
            {"claim": "home-data", "mount_path": "/b", "read_only": False}]  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        submit_job(alice, volumes=both)
    assert "different clusters" in " ".join(refused.value.message_dict["volumes"])
    there = [{"claim": "cloud-data", "mount_path": "/a", "read_only": False}]
    with pytest.raises(ValidationError) as refused:
        submit_job(alice, volumes=there, clusters=["default", "nowhere"])
    problems = " ".join(refused.value.message_dict["clusters"])
    assert "No cluster 'nowhere'" in problems and "on cluster cloud" in problems
    # The notebook API: every problem at once, nothing stored.
    api_client.force_authenticate(alice)
    answer = api_client.post("/api/v1/notebooks/", {
        "team": "vision", "name": "nb", "resource_class": H100, "count": 1, "cpu": 2, "memory_mb": 8192,
        "clusters": ["nowhere", "nowhere"], "volumes": both,
    }, format="json")  # fmt: skip
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert "clusters" in body and "volumes" in body, body
    assert not Notebook.objects.exists()
    # The service API likewise.
    answer = api_client.post("/api/v1/services/", {
        "team": "vision", "name": "llm", "image": "registry.example/llm:1", "resource_class": H100,
        "clusters": ["nowhere"],
    }, format="json")  # fmt: skip
    assert answer.status_code == 400 and "clusters" in answer.json(), answer.content
    # A dataset published on no cluster is refused.
    api_client.force_authenticate(people["admin"])
    answer = api_client.post("/api/v1/datasets/", {
        "name": "wiki", "server": "nfs.example.internal", "path": "/exports/wiki", "capacity_gib": 10,
        "clusters": [],
    }, format="json")  # fmt: skip
    assert answer.status_code == 400 and "clusters" in answer.json(), answer.content
    # A name holding a NUL byte names no cluster and no team (PostgreSQL would refuse the lookup itself: a 500).
    answer = api_client.post("/api/v1/datasets/", {
        "name": "wiki", "server": "nfs.example.internal", "path": "/exports/wiki", "capacity_gib": 10,
        "clusters": ["cloud\x00"], "teams": ["vision\x00"],
    }, format="json")  # fmt: skip
    assert answer.status_code == 400 and {"clusters", "teams"} <= set(answer.json()), answer.content


def test_the_notebook_form_takes_clusters_and_names_what_is_wrong(cluster, cloud, people):
    row, sim = cloud
    sim.ensure_namespace("team-vision")
    sim.ensure_pvc(claim("cloud-data"))
    volumes.reconcile_volumes(sim, row)
    client = Client()
    client.force_login(people["alice"])
    page = client.get("/notebooks/").content.decode()
    assert 'name="clusters"' in page and "cloud-data" in page and "vision · cloud" in page
    form = {
        "team": people["vision"].pk, "name": "explore", "image": "jupyter/base-notebook:latest",
        "resource_class": ResourceClass.objects.get(key=H100).pk, "count": 1, "cpu": 4, "memory_gib": 16,
        "volume_gib": 10, "volume_claim": ["cloud-data"], "volume_path": ["/data"],
    }  # fmt: skip
    bad = client.post("/notebooks/", form | {"clusters": "default, nowhere"})
    assert bad.status_code == 200 and not Notebook.objects.exists()
    html = bad.content.decode()
    assert "No cluster &#x27;nowhere&#x27;" in html and "on cluster cloud" in html
    good = client.post("/notebooks/", form | {"clusters": "cloud"})
    assert good.status_code == 302, good.content.decode()[:2000]
    assert Notebook.objects.get().clusters == ["cloud"]
