"""Telemetry over a fleet (issue 32, item 6): every sample keeps its cluster, since node names are unique per cluster
only. The second cluster ``twin`` runs the demo scenario, so each of its nodes has a namesake in the cluster
configured in settings: DCGM scrapes of each land on their own nodes, an unreachable cluster's scrape fails alone, a
job's readings and idle flag follow the job's cluster, an agent's token writes for its own cluster only, and the
utilisation API filters by cluster."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from cluster.base import ClusterError
from cluster.sim import SimulatedCluster
from gpus.choices import ClusterHealth
from gpus.models import Cluster, ResourceClass, settings_cluster_pk
from gpus.reconcile import sync_inventory
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.idle import detect_idle
from jobs.models import Job
from telemetry import samples, scrape, tasks
from telemetry.models import GpuSample, NodeAgentToken
from tests.factories import submit_job
from tests.sim_objects import DEMO_SCENARIO, H100

NODE = "gpu-h100-01"
T0 = datetime(2026, 11, 2, 10, 0, tzinfo=UTC)


@pytest.fixture
def twin(cluster, clock, tmp_path, people):
    """A registered cluster with the demo's nodes beside the demo cluster, on the same clock: (row, backend)."""
    row = Cluster.objects.create(name="twin", display_name="Twin", connection="simulated", sim_scenario="demo",
                                 health=ClusterHealth.REACHABLE)  # fmt: skip
    backend = SimulatedCluster(tmp_path / "twin.json", scenario=str(DEMO_SCENARIO), clock=clock)
    sync_inventory(backend, row)
    return row, backend


class Gone:
    """A cluster that cannot be reached: every call fails as a refused connection does."""

    def __getattr__(self, name):
        def refuse(*args, **kwargs):
            raise ClusterError("connection refused")

        return refuse


def _peak(cluster_id: int, node: str) -> float:
    values = GpuSample.objects.filter(cluster_id=cluster_id, node_name=node).values_list("util_pct", flat=True)
    return max(v for v in values if v is not None)


def test_dcgm_samples_of_a_registered_cluster_land_on_its_own_nodes(cluster, twin, clock, people, api_client, client):
    row, backend = twin
    home = Cluster.objects.get(pk=settings_cluster_pk())
    job = submit_job(people["alice"], count=8, clusters=["twin"], command=["python", "train.py"], name="there")
    for _ in range(6):
        clock.advance(6)
        run_cycle(cluster, now=clock.now, fleet=[(row, backend)])
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.cluster == row, job.wait_message
    node = job.node_name

    there = scrape.scrape_cluster(row, backend)
    assert there.failed == 0 and there.stored > 0
    assert set(GpuSample.objects.values_list("cluster_id", flat=True)) == {row.pk}
    here = scrape.scrape_cluster(home, cluster)
    assert here.failed == 0 and here.stored > 0
    # The same node name in both clusters: the twin's node is busy with the job, the home one is not.
    assert _peak(row.pk, node) > 20 and _peak(home.pk, node) < 5
    assert set(GpuSample.objects.filter(cluster=row, node_name=node).values_list("job_id", flat=True)) == {job.pk}
    assert not GpuSample.objects.filter(cluster=home, job_id=job.pk).exists()
    sparks = samples.node_sparklines([(row.pk, node), (home.pk, node)], now=datetime.now(UTC) + timedelta(seconds=1))
    assert max(v for v in sparks[(row.pk, node)] if v is not None) > 20
    assert max(v for v in sparks[(home.pk, node)] if v is not None) < 5

    # Each cluster's page charts its own GPUs.
    client.force_login(people["admin"])
    twin_page = client.get(reverse("gpus:cluster-detail", args=["twin"]))
    home_page = client.get(reverse("gpus:cluster-detail", args=["default"]))
    assert 'data-testid="utilisation"' in twin_page.content.decode()
    twin_mean = max(p.util for p in twin_page.context["util_points"])
    home_mean = max(p.util for p in home_page.context["util_points"])
    # One busy 8-GPU node among the twin's GPUs lifts its mean; nothing runs at home.
    assert twin_mean > 2 and home_mean < 1

    api_client.force_authenticate(people["admin"])
    url = "/api/v1/utilisation/"
    twin_node = api_client.get(url, {"scope": "node", "node": node, "cluster": "twin", "range": "1h"}).json()
    home_node = api_client.get(url, {"scope": "node", "node": node, "range": "1h"}).json()  # the settings cluster's
    assert twin_node["cluster"] == "twin" and max(p["util"] for p in twin_node["points"]) > 20
    assert max(p["util"] for p in home_node["points"]) < 5
    only_home = api_client.get(url, {"scope": "job", "job": job.pk, "cluster": "default", "range": "1h"}).json()
    assert only_home["points"] == []
    unknown = api_client.get(url, {"scope": "cluster", "cluster": "nowhere"})
    assert unknown.status_code == 400 and "No cluster 'nowhere'" in unknown.json()["cluster"][0]


def test_an_unreachable_cluster_s_scrape_fails_alone(cluster, twin, monkeypatch):
    row, _ = twin
    Cluster.objects.create(name="gone", connection="simulated", sim_scenario="demo", health=ClusterHealth.REACHABLE)
    Cluster.objects.create(name="down", connection="simulated", sim_scenario="demo", health=ClusterHealth.UNREACHABLE)
    queued = []
    monkeypatch.setattr(tasks.scrape_cluster, "apply_async", lambda args, **kw: queued.append(args[0]))
    monkeypatch.setattr(tasks, "get_backend", lambda: cluster)
    result = tasks.scrape_dcgm()
    # The cluster configured in settings is read at once; each registered cluster the inventory can reach gets a
    # task of its own (the unreachable one is left to the inventory's passes).
    assert result["failed"] == 0 and result["stored"] > 0
    assert queued == ["gone", "twin"]

    monkeypatch.setattr(scrape, "backend_of", lambda c: Gone() if c.name == "gone" else twin[1])
    failed = tasks.scrape_cluster("gone")
    assert failed["failed"] == 1 and "connection refused" in failed["errors"][0] and failed["stored"] == 0
    worked = tasks.scrape_cluster("twin")
    assert worked["failed"] == 0 and worked["stored"] > 0
    assert GpuSample.objects.filter(cluster=row).count() == worked["stored"]
    assert not GpuSample.objects.filter(cluster__name="gone").exists()


def test_a_job_of_a_registered_cluster_is_flagged_idle_by_its_own_nodes_readings(cluster, twin, people, settings):
    settings.PORTAL_IDLE_THRESHOLD_PCT = 10.0
    settings.PORTAL_IDLE_WINDOW_SECONDS = 1800
    row, _ = twin
    job = Job.objects.create(
        team=people["vision"], owner=people["alice"], name="idle-there", image="x/y:1", cluster=row,
        resource_class=ResourceClass.objects.get(key=H100), state=JobState.RUNNING, node_name=NODE, started_at=T0,
    )  # fmt: skip

    def feed(cluster_id: int, util: float) -> None:
        readings = [
            samples.Reading(ts=T0 + timedelta(seconds=30 * i), node_name=NODE, gpu_uuid="GPU-00000001-aaaa",
                            util_pct=util)
            for i in range(81)
        ]  # fmt: skip
        samples.store(readings, "agent", cluster_id)

    feed(row.pk, 3.0)  # the job's node: one job there, so the agent's readings are its
    feed(settings_cluster_pk(), 95.0)  # the namesake at home is busy with work that is not the job's
    assert not GpuSample.objects.filter(cluster_id=settings_cluster_pk(), job_id__isnull=False).exists()
    assert detect_idle(now=T0 + timedelta(minutes=40))["flagged"] == 1
    job.refresh_from_db()
    assert job.idle_since == T0 and job.gpu_util_recent == pytest.approx(3.0)


def _batch(node: str, cluster: str = "") -> dict:
    now = datetime.now(UTC)
    body = {"node": node, "sent_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "agent": "gpu-portal-agent/test",
            "samples": [{"ts": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "gpu_uuid": "GPU-34319582-d595-d1c7-d1d2-1",
                         "gpu_index": 0, "util_pct": 40.0}]}  # fmt: skip
    return {**body, "cluster": cluster} if cluster else body


def test_an_agent_token_writes_for_its_own_cluster_only(cluster, twin, api_client):
    row, _ = twin
    _, raw = NodeAgentToken.issue(NODE, cluster_id=row.pk)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {raw}"}
    wrong = api_client.post("/api/v1/telemetry/samples/", _batch(NODE, "default"), format="json", **auth)
    assert wrong.status_code == 403, wrong.content
    assert "of cluster 'twin'" in wrong.json()["detail"] and "for cluster 'default'" in wrong.json()["detail"]
    assert not GpuSample.objects.exists()
    for body in (_batch(NODE, "twin"), _batch(NODE)):  # an agent that does not say its cluster gets its token's
        answer = api_client.post("/api/v1/telemetry/samples/", body, format="json", **auth)
        assert answer.status_code == 202, answer.content
    assert set(GpuSample.objects.values_list("cluster_id", "node_name")) == {(row.pk, NODE)}
    # The UUID it taught belongs to the twin's node, not to the home node of that name.
    assert list(row.nodes.get(name=NODE).gpus.filter(index=0).values_list("uuid", flat=True)) == [
        "GPU-34319582-d595-d1c7-d1d2-1"
    ]
    home_gpu = Cluster.objects.get(pk=settings_cluster_pk()).nodes.get(name=NODE).gpus.get(index=0)
    assert home_gpu.uuid != "GPU-34319582-d595-d1c7-d1d2-1"
    # A home token cannot post that GPU, now known on the twin's node.
    _, home_raw = NodeAgentToken.issue(NODE)
    stolen = api_client.post(
        "/api/v1/telemetry/samples/", _batch(NODE), format="json", HTTP_AUTHORIZATION=f"Bearer {home_raw}"
    )
    assert stolen.status_code == 400 and "of cluster twin" in str(stolen.json())
