"""The client and the command line over a fleet (issue 32, item 6), against a live portal: `gpuportal nodes`, `gpus`
and `jobs list` filter by --cluster (a name no cluster has is refused with the portal's words) and show a CLUSTER
column when what they list is in several clusters; `submit --cluster A,B` names the clusters a job may run on, in
order; a job's summary says where it runs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from cluster.sim import SimulatedCluster
from gpuportal import Client
from gpus.choices import ClusterHealth
from gpus.models import GPU, Cluster, Node
from gpus.reconcile import sync_inventory
from jobs.choices import JobState
from jobs.models import Job

from .conftest import H100

CLOUD_SCENARIO = Path(__file__).resolve().parents[2] / "cluster" / "scenarios" / "cloud.yaml"
SPEC = {"team": "vision", "name": "train", "image": "nvcr.io/nvidia/pytorch:24.01-py3", "command": ["sleep", "30"],
        "resource_class": H100}  # fmt: skip


def rows_of(output: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in output.strip().splitlines()]


@pytest.fixture
def cloud(portal, tmp_path) -> Cluster:
    """The GKE cluster registered beside the demo one and synced (six nodes: two of 8 H100s, four of 4 L4s)."""
    row = Cluster.objects.create(name="cloud", connection="simulated", sim_scenario="cloud",
                                 health=ClusterHealth.REACHABLE)  # fmt: skip
    sync_inventory(SimulatedCluster(tmp_path / "cloud.json", scenario=str(CLOUD_SCENARIO), clock=portal.clock), row)
    return row


def test_nodes_and_gpus_filter_by_cluster_and_show_it_for_a_fleet(portal, cloud, gp):
    every = gp("nodes")
    assert every.exit_code == 0, every.output
    head, *rows = rows_of(every.output)
    assert head[:2] == ["NODE", "CLUSTER"]
    assert {row[1] for row in rows} == {"default", "cloud"}
    only = gp("nodes", "--cluster", "cloud")
    head, *rows = rows_of(only.output)
    assert head[0] == "NODE" and "CLUSTER" not in head, "one cluster listed: no column"
    assert sorted(row[0] for row in rows) == sorted(Node.objects.filter(cluster=cloud).values_list("name", flat=True))
    gpus = json.loads(gp("gpus", "--cluster", "cloud", "--output", "json").output)
    assert len(gpus) == GPU.objects.filter(node__cluster=cloud).count() == 32
    assert {g["cluster"] for g in gpus} == {"cloud"}
    table = gp("gpus", "--node", "gke-g2-l4-01")
    head, *rows = rows_of(table.output)
    assert head == ["NODE", "GPU", "PRODUCT", "MEMORY", "OFFERED AS"] and len(rows) == 4
    wrong = gp("nodes", "--cluster", "nowhere")
    assert wrong.exit_code == 4 and "There is no cluster called nowhere" in wrong.stderr
    assert Client(portal.url, portal.token).list_gpus(cluster="default", limit=1)[0]["cluster"] == "default"


def test_submit_names_the_clusters_and_jobs_list_filters_by_the_one_it_runs_on(portal, cloud, gp, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump(SPEC | {"clusters": ["default"]}))
    made = gp("submit", str(spec), "--cluster", "cloud,default", "--cluster", "cloud")
    assert made.exit_code == 0, made.output
    job = Job.objects.get()
    assert job.clusters == ["cloud", "default"], "the option replaces the spec's, in order, each once"
    assert "train (vision, 1 × H100 80GB HBM3, clusters cloud then default): Queued - Waiting" in made.output
    home = gp("submit", str(spec))
    assert home.exit_code == 0 and Job.objects.latest("pk").clusters == ["default"]
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, cluster=cloud, node_name="gke-a3-h100-01")
    Job.objects.exclude(pk=job.pk).update(state=JobState.RUNNING, cluster=Cluster.objects.get(name="default"),
                                          node_name="gpu-h100-01")  # fmt: skip
    head, *rows = rows_of(gp("jobs", "list").output)
    assert head[1] == "STATE" and head[-1] == "CLUSTER" and {row[-1] for row in rows} == {"cloud", "default"}
    assert {row[1] for row in rows} == {"Running"}, "the state in words, as the pages show it"
    on_cloud = json.loads(gp("jobs", "list", "--cluster", "cloud", "--output", "json").output)
    assert [j["id"] for j in on_cloud] == [job.pk]
    shown = gp("jobs", "get", str(job.pk), "--output", "text")
    assert "cluster cloud): Running" in shown.output
    wrong = gp("jobs", "list", "--cluster", "nowhere")
    assert wrong.exit_code == 4 and "There is no cluster called nowhere" in wrong.stderr
