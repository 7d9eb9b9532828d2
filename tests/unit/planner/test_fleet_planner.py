"""The planner over a fleet (issue 32, item 6), from the database up: the fleet it reads (every registered
cluster's nodes by their fleet keys, tainted nodes kept off), where the history says each job ran and may run, the
API's cluster (validated, every problem at once, naming the clusters there are), the page's cluster selectors,
and a run of one cluster in the worker."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from cluster.sim import SimulatedCluster
from gpus.choices import ClusterHealth
from gpus.models import Cluster, Node
from gpus.reconcile import sync_inventory
from jobs.choices import JobState, PresenceState
from jobs.cycle.admit import NOWHERE
from jobs.models import Job, TeamPresence
from planner import tasks
from planner.choices import PlanState
from planner.history import current_cluster, window_history
from planner.models import PlanRun
from tests.factories import finished_job

CLOUD_SCENARIO = Path(__file__).resolve().parents[3] / "cluster" / "scenarios" / "cloud.yaml"
LIST = "/api/v1/planner/runs/"


@pytest.fixture
def cloud(inventory, tmp_path):
    """The cloud cluster (two 8 × H100 GKE nodes and four 4 × L4) registered beside the demo cluster."""
    row = Cluster.objects.create(name="cloud", connection="simulated", sim_scenario="cloud",
                                 health=ClusterHealth.REACHABLE)  # fmt: skip
    sync_inventory(SimulatedCluster(tmp_path / "cloud.json", scenario=str(CLOUD_SCENARIO)), row)
    return row


def test_the_fleet_holds_every_clusters_nodes_by_their_keys_with_their_shapes(cloud):
    fleet = current_cluster()
    assert (fleet.home, fleet.clusters) == ("default", ("default", "cloud"))
    assert fleet.nodes["cloud/gke-a3-h100-01"].cluster == "cloud"
    assert fleet.nodes["gpu-h100-01"].cluster == "default"
    assert "gke-a3-h100-01" not in fleet.nodes
    assert set(fleet.shapes) <= set(fleet.nodes)
    assert fleet.shapes["cloud/gke-a3-h100-01"].gpu_count == 8


def test_a_node_with_a_taint_its_pods_do_not_tolerate_takes_no_replayed_work(cloud):
    Node.objects.filter(name="gke-a3-h100-02").update(
        taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]
    )
    fleet = current_cluster()
    assert not fleet.nodes["cloud/gke-a3-h100-02"].schedulable
    assert "dedicated" in fleet.nodes["cloud/gke-a3-h100-02"].kept_off
    assert fleet.nodes["cloud/gke-a3-h100-01"].schedulable


def test_the_history_says_where_each_job_ran_and_where_it_may_run(cloud, people):
    from gpus.models import ResourceClass
    from tests.sim_objects import H100

    rc = ResourceClass.objects.get(key=H100)
    now = timezone.now().replace(microsecond=0)
    start = now - timedelta(hours=6)
    there = finished_job(people["vision"], people["alice"], rc, start, timedelta(minutes=5), timedelta(hours=1))
    old = finished_job(people["vision"], people["alice"], rc, start, timedelta(minutes=5), timedelta(hours=1))
    Job.objects.filter(pk=there.pk).update(cluster=cloud, clusters=["cloud", "default"])
    Job.objects.filter(pk=old.pk).update(cluster=None)
    waiting = finished_job(people["vision"], people["alice"], rc, start, timedelta(minutes=5), timedelta(hours=1))
    Job.objects.filter(pk=waiting.pk).update(
        state=JobState.QUEUED, started_at=None, finished_at=None, cluster=None, clusters=["cloud"]
    )
    secret = finished_job(people["vision"], people["alice"], rc, start, timedelta(minutes=5), timedelta(hours=1))
    Job.objects.filter(pk=secret.pk).update(cluster=None, clusters=["cloud"], secret_env=[{"name": "K", "secret": "s"}])
    past = {job.id: job for job in window_history(start, now).jobs}
    assert (past[there.pk].cluster, past[there.pk].clusters) == ("cloud", ("cloud", "default"))
    assert past[old.pk].cluster == "default"  # placed before the fleet: the default cluster
    assert (past[waiting.pk].cluster, past[waiting.pk].clusters) == ("cloud", ("cloud",))
    # The team's secrets are not in step on cloud yet: admission's rule says nowhere, and so does the history.
    assert past[secret.pk].clusters == NOWHERE
    TeamPresence.objects.create(team=people["vision"], cluster=cloud, state=PresenceState.IN_STEP)
    past = {job.id: job for job in window_history(start, now).jobs}
    assert past[secret.pk].clusters == ("cloud",)


def test_the_api_names_the_clusters_there_are_for_every_unknown_one_at_once(api_client, people, cloud):
    api_client.force_authenticate(people["admin"])
    add = [{"type": "add_nodes", "like": "gpu-h100-01", "count": 1}]
    response = api_client.post(
        LIST,
        {
            "days": 7,
            "cluster": "mars",
            "proposals": [
                {"name": "a", "cluster": "venus", "changes": add},
                {"name": "b", "cluster": 3, "changes": add},
            ],
        },
        format="json",
    )
    assert response.status_code == 400
    errors = response.json()
    assert errors["cluster"] == ["No cluster named 'mars': name one of default, cloud."]
    assert errors["proposals[0].cluster"] == ["No cluster named 'venus': name one of default, cloud."]
    assert errors["proposals[1].cluster"] == ["No cluster named 3: name one of default, cloud."]
    assert not PlanRun.objects.exists()


def test_a_proposal_must_be_for_the_cluster_a_run_replays_and_its_nodes_that_clusters(api_client, people, cloud):
    api_client.force_authenticate(people["admin"])
    add = {"type": "add_nodes", "like": "gke-a3-h100-01", "count": 2}
    errors = api_client.post(
        LIST,
        {"days": 7, "cluster": "cloud", "proposals": [
            {"name": "home", "cluster": "default", "changes": [add]},
            {"name": "wrong node", "changes": [{"type": "remove_nodes", "nodes": ["gpu-h100-01"]}]},
        ]},
        format="json",
    ).json()  # fmt: skip
    assert "This run replays cluster cloud only" in errors["proposals[0].cluster"][0]
    assert errors["proposals[1]"] == ["Change 1 (remove_nodes): no node named gpu-h100-01 in cluster cloud."]
    made = api_client.post(
        LIST, {"days": 7, "cluster": "cloud", "proposals": [{"name": "two more", "changes": [add]}]}, format="json"
    )
    assert made.status_code == 202, made.json()
    run = PlanRun.objects.get()
    assert run.cluster == "cloud" and made.json()["cluster"] == "cloud"
    assert run.proposals == [{"name": "two more", "cluster": "cloud", "changes": [add]}]
    # A fleet run's proposal without a cluster is for the default cluster, and says so.
    fleet = api_client.post(
        LIST,
        {"days": 7, "proposals": [{"name": "h100", "changes": [{"type": "add_nodes", "like": "gpu-h100-01",
                                                                "count": 1}]}]},
        format="json",
    ).json()  # fmt: skip
    assert fleet["cluster"] == "" and fleet["proposals"][0]["cluster"] == "default"


def test_the_page_offers_the_fleet_or_a_cluster_and_a_proposal_takes_its_nodes_cluster(client, people, cloud):
    client.force_login(people["admin"])
    page = client.get("/planner/new/").content.decode()
    assert 'name="w-cluster"' in page and ">The whole fleet<" in page and 'value="cloud"' in page
    assert 'value="cloud/gke-a3-h100-01"' in page  # nodes of other clusters by their keys
    response = client.post(
        "/planner/new/",
        {"w-range": "7", "o-preemption": "on", "o-borrowing": "on", "o-suggest": "0", "p0-name": "GKE x2",
         "p0-c0-type": "add_nodes", "p0-c0-like": "cloud/gke-a3-h100-01", "p0-c0-count": "2"},
    )  # fmt: skip
    assert response.status_code == 302
    run = PlanRun.objects.get()
    assert run.cluster == ""  # the whole fleet
    assert run.proposals[0]["cluster"] == "cloud"
    assert run.proposals[0]["changes"] == [{"type": "add_nodes", "like": "gke-a3-h100-01", "count": 2}]


def test_a_run_of_one_cluster_replays_its_nodes_and_its_work(cloud, people):
    now = timezone.now()
    run = PlanRun.objects.create(created_by=people["admin"], window_start=now - timedelta(hours=6), window_end=now,
                                 cluster="cloud", options={"suggest": 0})  # fmt: skip
    assert run.scope == "cluster cloud"
    assert tasks.run_plan(run.pk) == PlanState.SUCCEEDED
    run.refresh_from_db()
    assert run.results["cluster"] == "cloud" and run.results["clusters"] == ["cloud"]
    base = run.results["scenarios"][0]
    assert [row["cluster"] for row in base["clusters"]] == ["cloud"]
    assert base["totals"]["capacity_gpus"] == base["clusters"][0]["capacity_gpus"] > 0
    fleet = current_cluster()
    cloud_gpus = sum(n.allocatable.get("nvidia.com/gpu", 0) for n in fleet.nodes.values() if n.cluster == "cloud")
    assert 0 < base["totals"]["capacity_gpus"] <= cloud_gpus


def test_the_run_page_says_what_was_replayed_and_shows_each_clusters_figures(client, people):
    from planner import engine, model

    from .engine_cases import HOUR, T0, history, job
    from .test_fleet_engine import fleet

    jobs = [job(i + 1, T0 + i * 60, HOUR, count=8, cluster="cloud" if i % 2 else "default") for i in range(6)]
    results = engine.run_plan(
        history(jobs, hours=6), fleet(), [model.Proposal("x", [model.AddNodes("h0", 1)], "cloud")]
    )
    now = timezone.now()
    run = PlanRun.objects.create(created_by=people["admin"], window_start=now - timedelta(hours=6), window_end=now,
                                 state=PlanState.SUCCEEDED, results=results, options={})  # fmt: skip
    client.force_login(people["admin"])
    page = client.get(run.get_absolute_url()).content.decode()
    assert '<span data-testid="run-scope">the whole fleet</span>' in page
    assert 'data-testid="cluster-table"' in page and 'data-cluster="default"' in page and 'data-cluster="cloud"' in page
    assert "(proposal, in cloud)" in page
    exported = client.get(f"/api/v1/planner/runs/{run.pk}/results.csv").content.decode().splitlines()
    assert any(line.startswith("baseline,baseline,cluster,cloud,cloud,") for line in exported), exported
    one = PlanRun.objects.create(created_by=people["admin"], window_start=now - timedelta(hours=6), window_end=now,
                                 cluster="cloud", state=PlanState.SUCCEEDED,
                                 results=engine.run_plan(history(jobs, hours=6), fleet(), [], where="cloud"),
                                 options={})  # fmt: skip
    page = client.get(one.get_absolute_url()).content.decode()
    assert '<span data-testid="run-scope">cluster cloud</span>' in page
    assert 'data-testid="cluster-table"' not in page  # one cluster: its figures are the totals
