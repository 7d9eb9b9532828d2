"""Carving and smoke tests on the nodes of a registered cluster (issue 32, item 6): each runs on its node's own cluster
(its ConfigMaps, labels and test pods go there and nowhere else), nodes being reconfigured or drained are known by
(cluster, node) so a node of the same name in another cluster is left alone, and an unreachable cluster's nodes are
refused with the reason. The second cluster ``twin`` runs the demo scenario, so every node name exists in both."""

from __future__ import annotations

import pytest
import yaml
from django.urls import reverse
from django.utils import timezone

from cluster.base import ClusterError
from cluster.sim import SimulatedCluster
from gpus import fleet, nodeops
from gpus.choices import ClusterHealth, NodeConfigState
from gpus.models import Cluster, Node, NodeConfigOperation, settings_cluster_pk
from gpus.nodeconfig import advance_operations, nodes_draining, reconfiguring_nodes, request_operation
from gpus.nodeconfig_plan import ConfigRefused, plan_time_slicing
from gpus.reconcile import sync_inventory
from gpus.smoketest import SmokeTestRefused, advance_smoke_tests, request_smoke_test
from jobs.choices import JobState
from jobs.cycle import draining
from jobs.models import Job
from tests.sim_objects import DEMO_SCENARIO
from tests.unit.gpus.nodeconfig_kit import submit

A10_NODE = "gpu-a10-01"  # 4x A10, time-sliced x4 in the demo
DEVICE_PLUGIN_LABEL = "nvidia.com/device-plugin.config"


@pytest.fixture
def twin(sim, clock, tmp_path):
    """A registered cluster with the demo's nodes (the same names as the cluster configured in settings), on the
    same clock: (its row, its simulated backend)."""
    row = Cluster.objects.create(name="twin", display_name="Twin", connection="simulated", sim_scenario="demo",
                                 health=ClusterHealth.REACHABLE)  # fmt: skip
    backend = SimulatedCluster(tmp_path / "twin.json", scenario=str(DEMO_SCENARIO), clock=clock)
    sync_inventory(backend, row)
    return row, backend


def _label(backend, node: str) -> str:
    return backend.get_node(node)["metadata"]["labels"].get(DEVICE_PLUGIN_LABEL, "")


def test_a_carve_on_a_node_of_a_registered_cluster_applies_on_that_cluster_only(sim, twin, clock, people):
    row, backend = twin
    node = Node.objects.get(cluster=row, name=A10_NODE)
    home = Node.objects.get(cluster_id=settings_cluster_pk(), name=A10_NODE)
    op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=8, rename=True))
    assert reconfiguring_nodes() == {(row.pk, A10_NODE)}  # the home node of that name still takes work

    # The pass of the cluster configured in settings leaves the twin's operation alone.
    assert advance_operations(sim, now=clock.now).advanced == 0
    op.refresh_from_db()
    assert op.state == NodeConfigState.PENDING
    for _ in range(3):
        clock.advance(1)
        advance_operations(backend, now=clock.now, cluster=row)
    op.refresh_from_db()
    assert op.state == NodeConfigState.DONE, op.log

    assert _label(backend, A10_NODE) == "portal-ts8-renamed-none"
    text = backend.get_config_map("gpu-operator", "time-slicing-config")["data"]["portal-ts8-renamed-none"]
    assert yaml.safe_load(text)["sharing"]["timeSlicing"]["resources"] == [{"name": "nvidia.com/gpu", "replicas": 8}]
    # Nothing changed at home: not the node's label, not the device plugin's ConfigMap, not its inventory row.
    assert _label(sim, A10_NODE) == "nvidia-a10"
    home_config = sim.get_config_map("gpu-operator", "time-slicing-config")["data"]
    assert "portal-ts8-renamed-none" not in home_config
    node.refresh_from_db()
    home.refresh_from_db()
    assert node.allocatable["nvidia.com/gpu.shared"] == "32"  # the refresh read the twin back
    assert home.allocatable.get("nvidia.com/gpu.shared", "0") == "0" and home.allocatable["nvidia.com/gpu"] == "16"


def test_a_smoke_test_on_a_node_of_a_registered_cluster_runs_its_pod_there(sim, twin, clock, people):
    row, backend = twin
    node = Node.objects.get(cluster=row, name=A10_NODE)
    run = request_smoke_test(people["admin"], node)
    assert advance_smoke_tests(sim) == {"started": 0, "finished": 0}
    assert nodeops.clusters_with_work() == ["twin"]
    result = nodeops.advance_cluster(row, backend)
    assert result["cluster"] == "twin" and result["smoke_tests"]["started"] == 1
    (job,) = backend.list_workloads(namespace=run.namespace)
    terms = job["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [A10_NODE]
    assert sim.list_workloads(namespace=run.namespace) == []
    for _ in range(4):
        clock.advance(5)
        nodeops.advance_cluster(row, backend)
    run.refresh_from_db()
    assert run.finished and run.state == "passed", run.reason
    assert nodeops.clusters_with_work() == []


def test_an_unreachable_cluster_refuses_node_operations_and_keeps_what_is_in_progress(sim, twin, clock, people):
    row, backend = twin
    node = Node.objects.get(cluster=row, name=A10_NODE)
    op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=2, rename=False))
    since = timezone.now()
    Cluster.objects.filter(pk=row.pk).update(health=ClusterHealth.UNREACHABLE, unreachable_since=since)
    node = Node.objects.select_related("cluster").get(pk=node.pk)
    with pytest.raises(SmokeTestRefused, match="cluster twin, which the portal cannot reach since"):
        request_smoke_test(people["admin"], node)
    with pytest.raises(ConfigRefused, match="cannot reach"):
        request_operation(people["admin"], node, plan_time_slicing(node, replicas=4, rename=False))

    class Gone:
        def __getattr__(self, name):
            def refuse(*args, **kwargs):
                raise ClusterError("connection refused")

            return refuse

    result = advance_operations(Gone(), now=clock.now, cluster=row)
    assert result.errors and "connection refused" in result.errors[0]
    op.refresh_from_db()
    assert op.state in (NodeConfigState.PENDING, NodeConfigState.DRAINING)  # kept, to go on when it answers
    # The home node of that name is not held up by the other cluster's trouble.
    home = Node.objects.get(cluster_id=settings_cluster_pk(), name=A10_NODE)
    assert request_smoke_test(people["admin"], home).node == home


def test_a_drain_in_one_cluster_stops_no_work_on_the_same_named_node_of_another(sim, twin, clock, people, mig_quota):
    row, _ = twin
    home_id = settings_cluster_pk()
    job = submit(people["bob"], "nlp", mig_quota, preemptible=True)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, node_name=A10_NODE, cluster_id=home_id,
                                         started_at=timezone.now())  # fmt: skip
    node = Node.objects.get(cluster=row, name=A10_NODE)
    op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=2, rename=False))
    past = timezone.now() - timezone.timedelta(seconds=1)
    NodeConfigOperation.objects.filter(pk=op.pk).update(state=NodeConfigState.DRAINING, drain_grace_until=past)
    assert nodes_draining(timezone.now()) == {(row.pk, A10_NODE): op.pk}
    assert draining.preempt_on_draining_nodes() == 0
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    # The same job on the drained node of the twin is stopped.
    Job.objects.filter(pk=job.pk).update(cluster_id=row.pk)
    assert draining.preempt_on_draining_nodes() == 1


def test_the_pages_and_the_api_carve_the_node_of_the_cluster_named(sim, twin, people, client, api_client, monkeypatch):
    row, backend = twin
    monkeypatch.setattr(fleet, "backend_for", lambda name, connection: backend)
    monkeypatch.setattr(fleet, "get_backend", lambda: sim)
    client.force_login(people["admin"])
    detail = client.get(reverse("gpus:node-detail", args=[A10_NODE]), {"cluster": "twin"}).content.decode()
    assert f'href="/nodes/{A10_NODE}/configure/?cluster=twin"' in detail
    assert f'action="/nodes/{A10_NODE}/smoke-test/?cluster=twin"' in detail
    url = reverse("gpus:node-configure", args=[A10_NODE]) + "?cluster=twin"
    page = client.post(url, {"kind": "time-slicing", "replicas": "2", "confirm": "1", "apply": "1"})
    op = NodeConfigOperation.objects.get()
    assert page.status_code == 302 and op.node.cluster == row
    NodeConfigOperation.objects.filter(pk=op.pk).update(state=NodeConfigState.ABORTED)

    api_client.force_authenticate(people["admin"])
    body = {"node": A10_NODE, "cluster": "twin", "kind": "time-slicing", "replicas": 2}
    answer = api_client.post("/api/v1/node-config-operations/", body, format="json")
    assert answer.status_code == 201, answer.content
    assert answer.json()["cluster"] == "twin" and answer.json()["node"] == A10_NODE
    smoke = api_client.post(f"/api/v1/nodes/{A10_NODE}/smoke-tests/?cluster=twin")
    assert smoke.status_code == 201 and smoke.json()["cluster"] == "twin"
    unknown = api_client.post("/api/v1/node-config-operations/", {**body, "cluster": "nowhere"}, format="json")
    assert unknown.status_code == 400 and "in cluster nowhere" in str(unknown.json()["node"])


def test_who_holds_what_lists_the_work_of_the_nodes_own_cluster(sim, twin, people, mig_quota):
    from jobs.node_holders import holders_on

    row, _ = twin
    job = submit(people["bob"], "nlp", mig_quota)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, node_name=A10_NODE, cluster_id=settings_cluster_pk(),
                                         started_at=timezone.now())  # fmt: skip
    home = Node.objects.get(cluster_id=settings_cluster_pk(), name=A10_NODE)
    there = Node.objects.get(cluster=row, name=A10_NODE)
    assert [r["job"].pk for r in holders_on(home)] == [job.pk]
    assert holders_on(there) == []


def test_beat_advances_the_default_cluster_and_queues_one_task_per_registered_cluster_with_work(
    sim, twin, clock, people, monkeypatch
):
    from gpus import tasks

    row, backend = twin
    queued = []
    monkeypatch.setattr(tasks.advance_cluster_operations, "apply_async", lambda args, **kw: queued.append(args[0]))
    monkeypatch.setattr(tasks, "get_backend", lambda: sim)
    monkeypatch.setattr(fleet, "backend_for", lambda name, connection: backend)
    node = Node.objects.get(cluster=row, name=A10_NODE)
    op = request_operation(people["admin"], node, plan_time_slicing(node, replicas=2, rename=False))
    assert tasks.advance_node_config_operations()["advanced"] == 0  # nothing of the default cluster's to do
    assert queued == ["twin"]
    result = tasks.advance_cluster_operations("twin")
    assert result["cluster"] == "twin" and result["advanced"] >= 1
    op.refresh_from_db()
    assert op.state != NodeConfigState.PENDING
    assert tasks.advance_cluster_operations("gone") == {"gone": 1}
