"""Every list of things that live in a cluster filters by cluster, on its page and in the API, through its one
FilterSet (gpus.filtersets.ClusterFilter): nodes, GPUs, MIG partitions, node reconfigurations and jobs. A name no
cluster has is an error that says so; the Cluster column shows once the fleet has more than one cluster; the API
lists keep their query counts as clusters are added (issue 32, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from cluster.sim import SimulatedCluster
from gpus.choices import ClusterHealth
from gpus.models import GPU, Cluster, MigPartition, Node, NodeConfigOperation
from gpus.reconcile import sync_inventory
from jobs.choices import JobState
from jobs.models import Job
from tests.factories import submit_job

pytestmark = pytest.mark.django_db

SCENARIOS = Path(__file__).resolve().parents[3] / "cluster" / "scenarios"
#: Every API list of things in a cluster, with the path from one of its rows to its cluster.
LISTS = {
    "/api/v1/nodes/": (Node, "cluster"),
    "/api/v1/gpus/": (GPU, "node__cluster"),
    "/api/v1/mig-partitions/": (MigPartition, "gpu__node__cluster"),
    "/api/v1/node-config-operations/": (NodeConfigOperation, "node__cluster"),
    "/api/v1/jobs/": (Job, "cluster"),
}


def add_cluster(name: str, scenario: str, clock, tmp_path, owner) -> Cluster:
    """A simulated cluster registered beside the demo one and synced, with a reconfiguration of one of its nodes
    and a job of ``owner`` placed on it."""
    row = Cluster.objects.create(name=name, connection="simulated", sim_scenario=scenario,
                                 health=ClusterHealth.REACHABLE)  # fmt: skip
    sync_inventory(SimulatedCluster(tmp_path / f"{name}.json", scenario=str(SCENARIOS / f"{scenario}.yaml"),
                                    clock=clock), row)  # fmt: skip
    _work_on(row, owner)
    return row


def _work_on(cluster: Cluster, owner) -> None:
    node = Node.objects.filter(cluster=cluster).order_by("name").first()
    NodeConfigOperation.objects.create(node=node, kind="time-slicing", state="done", state_changed_at=timezone.now())
    job = submit_job(owner, name=f"on-{cluster.name}")
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, cluster=cluster, node_name=node.name)


@pytest.fixture
def home(cluster, people):
    """The demo cluster (``default``) with a reconfiguration and a placed job of its own."""
    _work_on(Cluster.objects.get(name="default"), people["alice"])
    return cluster


@pytest.fixture
def fleet(home, clock, tmp_path, people):
    """The demo cluster plus ``east`` (the demo's nodes again, MIG included) and ``cloud`` (GKE H100s and L4s)."""
    alice = people["alice"]
    return [add_cluster("east", "demo", clock, tmp_path, alice), add_cluster("cloud", "cloud", clock, tmp_path, alice)]


@pytest.mark.parametrize("path", list(LISTS))
def test_each_api_list_filters_by_cluster_and_refuses_a_name_no_cluster_has(path, fleet, people, api_client):
    model, to_cluster = LISTS[path]
    api_client.force_authenticate(people["admin"])
    found = {}
    for name in ("default", "east", "cloud"):
        answer = api_client.get(path, {"cluster": name, "limit": 1000})
        assert answer.status_code == 200, answer.content
        rows = answer.json()["results"]
        found[name] = len(rows)
        assert len(rows) == answer.json()["count"] == model.objects.filter(**{f"{to_cluster}__name": name}).count()
        assert {row["cluster"] for row in rows} <= {name}
    # Every row is in one cluster's list, and the lists differ (the cloud cluster has no MIG GPUs).
    assert sum(found.values()) == api_client.get(path, {"limit": 1000}).json()["count"]
    assert sum(1 for count in found.values() if count) >= 2, found
    wrong = api_client.get(path, {"cluster": "nowhere"})
    assert wrong.status_code == 400
    assert wrong.json()["cluster"] == [
        "There is no cluster called nowhere; name one of the fleet's clusters (the clusters page or "
        "GET /api/v1/clusters/ lists them), or leave the filter out."
    ]


def test_the_cluster_filter_is_in_the_schema_of_each_list(openapi_schema):
    for path in LISTS:
        parameters = {p["name"]: p for p in openapi_schema["paths"][path]["get"]["parameters"]}
        assert parameters["cluster"]["schema"]["type"] == "string", path


def test_the_api_lists_keep_their_query_counts_as_clusters_are_added(home, people, api_client, clock, tmp_path):
    api_client.force_authenticate(people["admin"])

    def counts() -> dict[str, int]:
        found = {}
        for path in LISTS:
            for query in ({}, {"cluster": "default"}):
                with CaptureQueriesContext(connection) as queries:
                    assert api_client.get(path, {"limit": 1000, **query}).status_code == 200
                found[f"{path}?{query}"] = len(queries)
        return found

    one = counts()
    add_cluster("east", "demo", clock, tmp_path, people["alice"])
    add_cluster("cloud", "cloud", clock, tmp_path, people["alice"])
    assert Cluster.objects.count() == 3
    assert counts() == one


@pytest.mark.parametrize(
    ("page", "rows"),
    [("gpus:node-list", "node"), ("gpus:nodeconfig-list", "op"), ("jobs:job-list", "job")],
)
def test_list_pages_show_the_cluster_column_only_for_a_fleet_and_filter_by_cluster(page, rows, home, people, client,
                                                                                     clock, tmp_path):  # fmt: skip
    client.force_login(people["admin"])
    single = client.get(reverse(page))
    assert single.status_code == 200
    assert '<th scope="col"' in single.text and ">Cluster</th>" not in single.text
    assert 'name="cluster"' not in single.text
    add_cluster("cloud", "cloud", clock, tmp_path, people["alice"])
    both = client.get(reverse(page))
    assert ">Cluster</th>" in both.text and 'name="cluster"' in both.text
    only_cloud = client.get(reverse(page), {"cluster": "cloud"})
    assert only_cloud.status_code == 200
    shown = only_cloud.context["page"].object_list
    assert shown, "the cloud cluster has one of each"
    cluster_of = {"node": lambda r: r.cluster, "op": lambda r: r.node.cluster, "job": lambda r: r.cluster}[rows]
    assert {cluster_of(row).name for row in shown} == {"cloud"}
    wrong = client.get(reverse(page), {"cluster": "nowhere"})
    assert "There is no cluster called nowhere" in wrong.text


def test_job_arrays_filter_by_the_clusters_their_tasks_were_placed_on(home, people, api_client, clock, tmp_path):
    from jobs import actions
    from tests.factories import JOB_REQUEST

    cloud = add_cluster("cloud", "cloud", clock, tmp_path, people["alice"])
    rc = Job.objects.first().resource_class
    spread, home_only = (
        actions.submit_array(people["alice"], people["vision"], rc, JOB_REQUEST | {"name": name}, 3).array
        for name in ("spread", "home")
    )
    Job.objects.filter(array=spread, array_index=1).update(state=JobState.RUNNING, cluster=cloud)
    Job.objects.filter(array=home_only).update(state=JobState.RUNNING, cluster=Cluster.objects.get(name="default"))
    api_client.force_authenticate(people["alice"])

    def ids(**query) -> list[int]:
        answer = api_client.get("/api/v1/job-arrays/", query)
        assert answer.status_code == 200, answer.content
        return sorted(a["id"] for a in answer.json()["results"])

    assert ids() == sorted([spread.pk, home_only.pk])
    assert ids(cluster="cloud") == [spread.pk]
    assert ids(cluster="default") == [home_only.pk]
    wrong = api_client.get("/api/v1/job-arrays/", {"cluster": "nowhere"})
    assert wrong.status_code == 400 and "There is no cluster called nowhere" in wrong.json()["cluster"][0]


def test_volumes_and_notebooks_filter_by_the_cluster_that_holds_them(fleet, people, api_client):
    from jobs.models import Notebook, TeamVolume

    east, cloud = fleet
    vision = people["vision"]
    for where in (Cluster.objects.get(name="default"), east, cloud):
        TeamVolume.objects.create(team=vision, cluster=where, name="data", phase="Bound")
    notebook = Notebook.objects.create(
        team=vision, owner=people["alice"], name="explore", resource_class=Job.objects.first().resource_class,
        cluster=cloud, ttl_seconds=3600, idle_timeout_seconds=1800,
    )  # fmt: skip
    api_client.force_authenticate(people["alice"])
    volumes = api_client.get("/api/v1/volumes/", {"cluster": "east"}).json()["results"]
    assert [(v["name"], v["cluster"]) for v in volumes] == [("data", "east")]
    notebooks = api_client.get("/api/v1/notebooks/", {"cluster": "cloud"}).json()["results"]
    assert [n["id"] for n in notebooks] == [notebook.pk]
    assert api_client.get("/api/v1/notebooks/", {"cluster": "east"}).json()["results"] == []
    for path in ("/api/v1/volumes/", "/api/v1/notebooks/"):
        assert "There is no cluster called nowhere" in api_client.get(path, {"cluster": "nowhere"}).json()["cluster"][0]
