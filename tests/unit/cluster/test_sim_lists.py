"""The simulated cluster's list calls hand out copies made once per (uid, resourceVersion), like an informer's
cache: a list after any change (a status the kubelet moved, a label, a delete) equals the list computed the slow
way from the stored objects; every change, status included, bumps the object's resourceVersion; and a read-only
call on a quiet cluster skips the clock's pass over every pod, but never past a moment something is due."""

from __future__ import annotations

import pytest

from cluster.base import MANAGED_SELECTOR
from cluster.label_selectors import parse_label_selector, requirements_match
from cluster.sim import DURATION_ANNOTATION, SimulatedCluster
from cluster.sim import clock as sim_clock
from cluster.sim.store import clone
from tests.sim_objects import h100_node, job

SCENARIO = {
    "namespaces": ["team-a", "team-b"],
    "nodes": [h100_node("gpu-a"), h100_node("gpu-b"), {"name": "cpu-a", "cpu": 16, "memory": "64Gi"}],
}


@pytest.fixture
def cluster(monkeypatch, tmp_path, clock):
    """The two-node cluster above, on the cluster tests' ``clock`` (also its ``clock`` attribute), checking every list's
    copies."""
    monkeypatch.setattr(SimulatedCluster, "verify_list_copies", True)
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=SCENARIO, clock=clock)
    sim.clock = clock
    return sim


def slow(cluster, kind: str, namespace: str | None = None, selector: str | None = None) -> list[dict]:
    """What a list returned before copies were cached: a fresh copy of every stored object that matches."""
    requirements = parse_label_selector(selector)
    with cluster._store.transaction() as tx:
        return [
            clone(obj)
            for _, obj in sorted(tx.state[kind].items())
            if (namespace is None or obj["metadata"].get("namespace") == namespace)
            and requirements_match(requirements, obj["metadata"].get("labels"))
        ]


def check(cluster) -> None:
    for namespace in (None, "team-a", "team-b"):
        for selector in (None, MANAGED_SELECTOR, "job-name=one", "job-name!=one"):
            assert cluster.list_pods(namespace, selector) == slow(cluster, "pods", namespace, selector)
        assert cluster.list_workloads(namespace) == slow(cluster, "jobs", namespace, MANAGED_SELECTOR)
    for selector in (None, "nvidia.com/gpu.present=true", "team=x"):
        assert cluster.list_nodes(selector)[0] == slow(cluster, "nodes", None, selector)


def test_lists_after_changes_equal_the_lists_computed_the_slow_way(cluster):
    check(cluster)
    cluster.create_workload(job("one", annotations={DURATION_ANNOTATION: "60"}))
    cluster.create_workload(job("two"))
    cluster.create_workload(job("three", namespace="team-b"))
    check(cluster)
    cluster.clock.advance(30)  # the kubelet starts the containers: pod status only
    check(cluster)
    cluster.patch_node_labels("gpu-a", {"team": "x"})
    check(cluster)
    cluster.clock.advance(60)  # "one" ends
    check(cluster)
    assert cluster.delete_workload("team-a", "two")
    check(cluster)
    assert [p["metadata"]["labels"]["job-name"] for p in cluster.list_pods("team-a")] == ["one"]
    cluster.remove_node("gpu-b")
    check(cluster)
    assert [n["metadata"]["name"] for n in cluster.list_nodes()[0]] == ["cpu-a", "gpu-a"]


def test_a_status_change_bumps_the_resource_version_and_the_list_shows_it(cluster):
    cluster.create_workload(job("one", annotations={DURATION_ANNOTATION: "60"}))
    (pending,) = cluster.list_pods("team-a")
    (workload,) = cluster.list_workloads("team-a")
    assert pending["status"]["phase"] == "Pending"
    cluster.clock.advance(30)
    (running,) = cluster.list_pods("team-a")
    assert running["status"]["phase"] == "Running"
    assert int(running["metadata"]["resourceVersion"]) > int(pending["metadata"]["resourceVersion"])
    cluster.clock.advance(60)
    (done,) = cluster.list_pods("team-a")
    (finished,) = cluster.list_workloads("team-a")
    assert done["status"]["phase"] == "Succeeded"
    assert int(done["metadata"]["resourceVersion"]) > int(running["metadata"]["resourceVersion"])
    assert int(finished["metadata"]["resourceVersion"]) > int(workload["metadata"]["resourceVersion"])
    assert pending["status"]["phase"] == "Pending", "a copy handed out earlier is never changed"


def test_an_unchanged_object_is_handed_out_as_the_same_copy(cluster):
    cluster.create_workload(job("one"))
    cluster.clock.advance(30)
    first = cluster.list_pods("team-a")[0]
    assert cluster.list_pods()[0] is first
    cluster.clock.advance(5)
    assert cluster.list_pods("team-a")[0] is first


def test_a_read_on_a_quiet_cluster_skips_the_clock_but_not_past_what_is_due(cluster, monkeypatch):
    cluster.create_workload(job("one", annotations={DURATION_ANNOTATION: "100"}))
    cluster.clock.advance(30)
    cluster.list_pods()  # the pod runs (a change), and it ends at t+130
    cluster.list_pods()  # the clock's pass over an unchanged cluster: it is quiet until then
    runs = []
    advance = cluster._store._advance
    monkeypatch.setattr(cluster._store, "_advance", lambda tx: (runs.append(tx.now), advance(tx)))
    for _ in range(3):
        cluster.list_pods()
        cluster.clock.advance(10)
    assert runs == [], "nothing changed and nothing was due: no pass over the cluster"
    cluster.clock.advance(100)  # past the container's end
    (pod,) = cluster.list_pods()
    assert pod["status"]["phase"] == "Succeeded" and len(runs) == 1
    cluster.apply_config_map("team-a", "settings", {"a": "1"})  # a write: the next read looks again
    runs.clear()
    cluster.list_pods()
    assert len(runs) == 1


def test_quiet_until_is_now_while_something_changes_with_time_unscheduled(cluster):
    cluster.create_workload(job("big", gpus=99))  # never fits: the scheduler repeats FailedScheduling
    with cluster._store.transaction() as tx:
        assert sim_clock.quiet_until(tx) == tx.now


def test_a_read_whose_clock_pass_changed_things_leaves_the_cluster_quiet(cluster, monkeypatch):
    cluster.create_workload(job("one", annotations={DURATION_ANNOTATION: "100"}))
    cluster.clock.advance(30)
    runs = []
    advance = cluster._store._advance
    monkeypatch.setattr(cluster._store, "_advance", lambda tx: (runs.append(tx.now), advance(tx)))
    (pod,) = cluster.list_pods()  # the clock's pass starts the pod (a change the read itself did not make)
    assert pod["status"]["phase"] == "Running" and len(runs) == 1
    cluster.list_workloads()
    cluster.list_pods()
    assert len(runs) == 1, "what the pass changed is settled: the next reads at that moment skip it"
    cluster.clock.advance(100)
    (pod,) = cluster.list_pods()
    assert pod["status"]["phase"] == "Succeeded" and len(runs) == 2
    # What the pass changed was stored: a store read back from the file shows it.
    again = SimulatedCluster(cluster._store._path, scenario=SCENARIO, clock=cluster.clock)
    assert again.list_pods()[0]["status"]["phase"] == "Succeeded"


def test_a_copy_shares_no_part_with_itself_or_the_original():
    shared = {"a": [1, 2]}
    original = {"x": shared, "y": shared, "t": (1, "s")}
    copied = clone(original)
    assert copied == original and copied["x"] is not shared
    copied["x"]["a"].append(3)
    assert copied["y"] == {"a": [1, 2]} and shared == {"a": [1, 2]}
