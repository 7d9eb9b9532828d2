"""The forms offer only the volumes and datasets that exist where the work may go (issue 32, item 5): a job's,
a distributed job's, a service's and a notebook's volume rows suggest the team's claims on the clusters picked, or
with none picked on every cluster the team's work may run on (jobs.cycle.admit's Reach.clusters_of: where its
presence is in step, for work that uses its secrets or registry credentials); a volume chosen pins the work to its
cluster and the form says so; a volume on none of the clusters picked is refused, by the form and the API alike,
with a message naming where it is. Two clusters: the demo one (default, vision's claim home-data) and the cloud one
(cloud-data)."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from gpus.models import ResourceClass
from jobs.cycle.run import run_cycle
from jobs.models import InferenceService, Job, Notebook, TeamVolume
from jobs.storage import presence, volumes
from jobs.storage.secrets import create_registry_credential, create_secret
from tests.factories import api_job_body
from tests.sim_objects import H100, claim

CLOUD_MOUNT = {"volume_claim": ["cloud-data"], "volume_path": ["/data"]}
WRONG_CLUSTER = "cloud-data is on cluster cloud"


@pytest.fixture
def two_places(cluster, cloud, people):
    """vision's claim home-data on the default cluster, cloud-data on the cloud one; nlp's nlp-data on default."""
    row, sim = cloud
    sim.ensure_namespace("team-vision")
    sim.ensure_pvc(claim("cloud-data"))
    volumes.reconcile_volumes(sim, row)
    for namespace, name in (("team-vision", "home-data"), ("team-nlp", "nlp-data")):
        cluster.ensure_namespace(namespace)
        cluster.ensure_pvc(claim(name, namespace))
    volumes.reconcile_volumes(cluster)
    return cloud


@pytest.fixture
def alice(people) -> Client:
    client = Client()
    client.force_login(people["alice"])
    return client


def offered(html: str) -> list[str]:
    """The claims the volume rows suggest (the datalist of jobs/_volume_choices.html), in order."""
    datalist = re.search(r'<datalist id="team-volumes">(.*?)</datalist>', html, re.S)
    assert datalist, "no volume suggestions on the page"
    return re.findall(r'<option value="([^"]+)">', datalist.group(1))


def choices(client: Client, **query) -> str:
    answer = client.get("/jobs/volume-choices/", query)
    assert answer.status_code == 200
    return answer.content.decode()


def job_form(people, **overrides) -> dict:
    return {
        "team": people["vision"].pk, "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": "python train.py", "resource_class": ResourceClass.objects.get(key=H100).pk, "count": 1,
        "cpu": "2", "memory_mb": 16384, "priority": 50, "max_runtime_hours": "1", "idempotency_key": "k1",
    } | overrides  # fmt: skip


def test_the_job_form_offers_the_volumes_of_the_clusters_picked(two_places, people, alice):
    vision = people["vision"].pk
    # None picked: every cluster the team may run on (vision uses no secret and has no registry credential).
    page = alice.get("/jobs/new/").content.decode()
    assert offered(page) == ["cloud-data", "home-data"]  # by cluster (cloud, default), nlp's claim never
    assert "vision · cloud" in page and "vision · default" in page
    assert offered(choices(alice, team=vision, clusters="cloud")) == ["cloud-data"]
    assert offered(choices(alice, team=vision, clusters="default")) == ["home-data"]
    both = choices(alice, team=vision, clusters="default, cloud")
    assert offered(both) == ["home-data", "cloud-data"]  # the order picked
    assert "on default, cloud, where this may run" in both
    nowhere = choices(alice, team=vision, clusters="nowhere")
    assert offered(nowhere) == [] and "this may run on no cluster" in nowhere
    # The form sent back (a problem elsewhere) offers what its own choice allows.
    again = alice.post("/jobs/new/", job_form(people, name="Bad Name", clusters="default"))
    assert again.status_code == 200 and offered(again.content.decode()) == ["home-data"]
    # A resubmission offers for the clusters of the job it copies.
    source = Job.objects.create(team=people["vision"], owner=people["alice"], name="old", image="busybox",
                                resource_class=ResourceClass.objects.get(key=H100), clusters=["cloud"])  # fmt: skip
    assert offered(alice.get(f"/jobs/new/?from={source.pk}").content.decode()) == ["cloud-data"]


def test_a_team_the_user_is_not_in_counts_as_no_team(two_places, people, alice):
    page = choices(alice, team=people["nlp"].pk)
    assert "nlp-data" not in page and offered(page) == ["cloud-data", "home-data"]
    assert Client().get("/jobs/volume-choices/").status_code == 302  # to the login page


def test_where_the_teams_presence_is_not_in_step_its_volumes_are_not_offered(two_places, cluster, people, alice):
    row, sim = two_places
    vision = people["vision"]
    create_secret(people["alice"], vision, "wandb", {"key": "v"}, backend=cluster)
    # Work that names a secret may go only where the team's secrets are: not the cloud yet.
    assert offered(choices(alice, team=vision.pk)) == ["cloud-data", "home-data"]
    held = choices(alice, team=vision.pk, secrets="1")
    assert offered(held) == ["home-data"]
    assert "not in step on cloud yet" in held
    form = job_form(people, name="Bad Name", secret_env="WANDB_API_KEY=wandb/key")
    assert offered(alice.post("/jobs/new/", form).content.decode()) == ["home-data"]
    # A registry credential is used by every pod of the team: the same, without a secret named.
    create_registry_credential(people["alice"], vision, "nvcr.io", "$oauthtoken", "ngc-key", backend=cluster)
    assert offered(alice.get("/jobs/new/").content.decode()) == ["home-data"]
    presence.sync(row, sim, cluster)
    assert offered(alice.get("/jobs/new/").content.decode()) == ["cloud-data", "home-data"]
    # Picked explicitly, a cluster not in step still offers its volumes: the work waits there, and says why.
    create_secret(people["alice"], vision, "hf", {"token": "t"}, backend=cluster)  # the cloud is behind again
    picked = choices(alice, team=vision.pk, clusters="cloud")
    assert offered(picked) == ["cloud-data"] and "not in step on cloud yet" in picked


def test_a_volume_chosen_pins_the_work_to_its_cluster(two_places, cluster, clock, people, alice):
    row, _ = two_places
    pinned = choices(alice, team=people["vision"].pk, volume_claim="cloud-data")
    assert offered(pinned) == ["cloud-data"]  # a second volume must be on the same cluster
    assert "Where it may run: its volumes are on cloud, so it cannot run on default." in pinned
    # The form says so on its own render too, and a submission without clusters runs there.
    page = alice.post("/jobs/new/", job_form(people, name="Bad Name", **CLOUD_MOUNT)).content.decode()
    assert "its volumes are on cloud, so it cannot run on default" in page
    answer = alice.post("/jobs/new/", job_form(people, **CLOUD_MOUNT))
    assert answer.status_code == 302, answer.content.decode()[:2000]
    job = Job.objects.get()
    assert job.clusters == [] and job.volumes[0]["claim"] == "cloud-data"
    clock.advance(6)
    run_cycle(cluster, now=clock.now, fleet=[two_places])
    job.refresh_from_db()
    assert job.cluster == row, (job.state, job.wait_message)


def test_the_job_and_distributed_forms_refuse_a_volume_on_another_cluster(two_places, people, alice):
    for extra in ({}, {"kind": "distributed", "workers": "2"}):
        answer = alice.post("/jobs/new/", job_form(people, clusters="default", **CLOUD_MOUNT, **extra))
        assert answer.status_code == 200
        errors = answer.context["form"].errors
        assert WRONG_CLUSTER in " ".join(errors["clusters"]), errors
        assert "add cloud to the list" in " ".join(errors["clusters"])
        assert not Job.objects.exists()


def test_the_api_refuses_it_with_the_same_message(two_places, people, api_client):
    api_client.force_authenticate(people["alice"])
    body = api_job_body(clusters=["default"], volumes=[{"claim": "cloud-data", "mount_path": "/data"}])
    answer = api_client.post("/api/v1/jobs/", body, format="json")
    assert answer.status_code == 400 and WRONG_CLUSTER in " ".join(answer.json()["clusters"]), answer.json()
    answer = api_client.post("/api/v1/jobs/", body | {"clusters": ["cloud"]}, format="json")
    assert answer.status_code == 201, answer.json()


def test_the_service_form_offers_and_refuses_likewise(two_places, people, alice):
    page = alice.get("/services/new/").content.decode()
    assert offered(page) == ["cloud-data", "home-data"]
    service = {
        "team": people["vision"].pk, "name": "chat", "image": "vllm/vllm-openai:v0.4.0", "command": "serve",
        "resource_class": ResourceClass.objects.get(key=H100).pk, "count": "1", "cpu": "4", "memory_mb": "16384",
        "priority": "50", "port": "8000", "readiness_type": "http", "readiness_path": "/health",
        "min_replicas": "1", "max_replicas": "2", "metric": "cpu", "metric_target": "70", "clusters": "default",
    } | CLOUD_MOUNT  # fmt: skip
    answer = alice.post("/services/new/", service)
    assert answer.status_code == 200 and not InferenceService.objects.exists()
    assert WRONG_CLUSTER in " ".join(answer.context["form"].errors["clusters"])
    assert offered(answer.content.decode()) == ["home-data"]


def test_the_notebook_form_offers_and_refuses_likewise(two_places, people, alice):
    assert offered(alice.get("/notebooks/").content.decode()) == ["cloud-data", "home-data"]
    notebook = {
        "team": people["vision"].pk, "name": "explore", "image": "jupyter/base-notebook:latest",
        "resource_class": ResourceClass.objects.get(key=H100).pk, "count": 1, "cpu": 4, "memory_gib": 16,
        "volume_gib": 10, "clusters": "default",
    } | CLOUD_MOUNT  # fmt: skip
    answer = alice.post("/notebooks/", notebook)
    assert answer.status_code == 200 and not Notebook.objects.exists()
    page = answer.content.decode()
    assert WRONG_CLUSTER in page and offered(page) == ["home-data"]


def test_with_one_cluster_the_form_says_nothing_about_where(cluster, people, alice):
    cluster.ensure_namespace("team-vision")
    cluster.ensure_pvc(claim("home-data"))
    volumes.reconcile_volumes(cluster)
    page = alice.get("/jobs/new/").content.decode()
    assert offered(page) == ["home-data"]
    assert 'data-role="volume-clusters"' not in page and 'data-role="volume-where"' not in page


def test_the_suggestions_cost_the_same_queries_however_many_volumes(two_places, people, alice):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            choices(alice, team=people["vision"].pk, volume_claim="cloud-data")
        return len(captured)

    before = queries()
    row, _ = two_places
    TeamVolume.objects.bulk_create(
        [TeamVolume(team=people["vision"], cluster=row, name=f"more-{n}", phase="Bound") for n in range(20)]
    )
    assert queries() == before
