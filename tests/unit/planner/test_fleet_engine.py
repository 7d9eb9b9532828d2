"""The planner's engine over a fleet of clusters (issue 32, item 6): nodes keyed "<cluster>/<node>" as admission
keys them, a gang placed within one cluster, jobs' cluster preferences, proposals that name their cluster, and a
replay of one cluster next to the whole fleet's."""

from __future__ import annotations

import pytest

from jobs.scheduling.snapshot import ClassView, QuotaView
from planner import engine, model, proposals
from planner.engine_replay import Replay, Settings
from vocab.names import GPU_RESOURCE, mig_resource_name

from .engine_cases import H100, HOUR, T0, history, job, node

CLOUD = "cloud"


def fleet(home_nodes: int = 1, cloud_nodes: int = 2, quotas=None) -> model.Cluster:
    """The default cluster with ``home_nodes`` H100 nodes of 8 GPUs (h0, h1, ...) and ``cloud`` with ``cloud_nodes``
    more of the same names: the same node name in two clusters, told apart by their keys."""
    nodes, shapes = {}, {}
    for where, count in (("default", home_nodes), (CLOUD, cloud_nodes)):
        for i in range(count):
            key = f"h{i}" if where == "default" else f"{where}/h{i}"
            nodes[key] = node(key, H100, {GPU_RESOURCE: 8}, cluster=where)
            shapes[key] = model.NodeShape(key, H100, 8, True)
    return model.Cluster(
        nodes=nodes,
        shapes=shapes,
        classes={1: ClassView(1, GPU_RESOURCE, H100, 1.0, "H100 80GB HBM3")},
        quotas=quotas or {(1, 1): QuotaView(64, 64), (2, 1): QuotaView(64, 64)},
        team_names={1: "vision", 2: "nlp"},
        home="default",
        clusters=("default", CLOUD),
    )


def replayed(past: model.History, cluster: model.Cluster) -> Replay:
    run = Replay(cluster, past, Settings())
    run.run()
    return run


def clusters_of(run: Replay, job_id: int) -> set[str]:
    rec = run.records[job_id]
    assert rec.runs, f"job {job_id} never started: {rec.wait}"
    return {run.nodes[key].cluster for key in rec.runs[0][2]}


def test_a_gang_is_placed_within_one_cluster_even_when_two_together_would_hold_it():
    # One free node at home and two in the cloud: the gang of two 8-GPU ranks fits only in the cloud.
    past = history([job(1, T0, HOUR, count=8, workers=2)])
    run = replayed(past, fleet(home_nodes=1, cloud_nodes=2))
    assert clusters_of(run, 1) == {CLOUD}
    assert len(set(run.records[1].runs[0][2])) == 2
    # One node in each cluster: 16 GPUs in the fleet, but no cluster holds both ranks, so it never starts.
    split = replayed(past, fleet(home_nodes=1, cloud_nodes=1))
    assert split.records[1].first_start is None


def test_jobs_run_where_their_preferences_allow_and_spill_in_order():
    jobs = [
        job(1, T0, 2 * HOUR, count=8, clusters=(CLOUD,)),
        job(2, T0 + 1, 2 * HOUR, count=8, clusters=(CLOUD, "default")),
        job(3, T0 + 2, 2 * HOUR, count=8, clusters=(CLOUD, "default")),
    ]
    run = replayed(history(jobs), fleet(home_nodes=1, cloud_nodes=2))
    assert clusters_of(run, 1) == {CLOUD} and clusters_of(run, 2) == {CLOUD}
    assert clusters_of(run, 3) == {"default"}  # the cloud is full: it spills to its next choice


def test_quota_is_fleet_wide():
    # vision may hold 8 H100s in the whole fleet: two 8-GPU jobs, with a free node in each cluster, run one after
    # the other.
    cluster = fleet(home_nodes=1, cloud_nodes=1, quotas={(1, 1): QuotaView(8, 8)})
    run = replayed(history([job(1, T0, HOUR, count=8), job(2, T0 + 1, HOUR, count=8)]), cluster)
    assert run.records[2].first_start >= run.records[1].first_start + HOUR


def test_a_proposal_names_its_cluster_and_its_nodes_are_that_clusters():
    cluster = fleet(home_nodes=1, cloud_nodes=1)
    to_cloud = proposals.apply(cluster, model.Proposal("two more in the cloud", [model.AddNodes("h0", 2)], CLOUD))
    added = sorted(set(to_cloud.nodes) - set(cluster.nodes))
    assert added == ["cloud/h0-new-1", "cloud/h0-new-2"]
    assert {to_cloud.nodes[key].cluster for key in added} == {CLOUD}
    at_home = proposals.apply(cluster, model.Proposal("one more at home", [model.AddNodes("h0", 1)]))
    assert sorted(set(at_home.nodes) - set(cluster.nodes)) == ["h0-new-1"]
    assert at_home.nodes["h0-new-1"].cluster == "default"
    # Removing h0 of the cloud leaves the default cluster's h0.
    gone = proposals.apply(cluster, model.Proposal("less", [model.RemoveNodes(("h0",))], CLOUD))
    assert sorted(gone.nodes) == ["h0"]
    assert proposals.to_json(model.Proposal("x", [model.RemoveNodes(("h0",))], CLOUD))["cluster"] == CLOUD


def test_a_proposal_for_a_cluster_the_replay_does_not_hold_or_a_node_it_does_not_have_is_refused():
    cluster = fleet(home_nodes=1, cloud_nodes=1)
    assert proposals.validate(cluster, model.Proposal("p", [model.AddNodes("h0", 1)], "mars")) == [
        "there is no cluster 'mars' in this replay; name one of default, cloud."
    ]
    assert proposals.validate(cluster, model.Proposal("p", [model.RemoveNodes(("h1",))], CLOUD)) == [
        "Change 1 (remove_nodes): no node named h1 in cluster cloud."
    ]
    _, narrowed = engine.scope(history([]), cluster, CLOUD)
    with pytest.raises(proposals.Invalid) as refused:
        engine.run_plan(history([]), cluster, [model.Proposal("home", [model.AddNodes("h0", 1)], "default")],
                        where=CLOUD)  # fmt: skip
    assert "no cluster 'default' in this replay; name one of cloud" in refused.value.problems[0]
    assert narrowed.clusters == (CLOUD,)


def test_one_clusters_replay_holds_its_nodes_and_the_work_that_ran_there_and_the_fleets_holds_all():
    # Work that ran at home and in the cloud; the fleet's replay may place any of it anywhere.
    jobs = [job(i + 1, T0 + i * 60, 2 * HOUR, count=8, cluster="default" if i < 4 else CLOUD) for i in range(8)]
    past = history(jobs, hours=12)
    cluster = fleet(home_nodes=1, cloud_nodes=2)
    whole = engine.run_plan(past, cluster, [model.Proposal("cloud x2", [model.AddNodes("h0", 2)], CLOUD)])
    home = engine.run_plan(past, cluster, [], where="default")
    cloud = engine.run_plan(past, cluster, [], where=CLOUD)
    assert (whole["cluster"], home["cluster"], cloud["cluster"]) == ("", "default", CLOUD)
    assert (whole["clusters"], home["clusters"]) == (["default", CLOUD], ["default"])
    base = whole["scenarios"][0]
    assert base["totals"]["capacity_gpus"] == 24 and base["totals"]["jobs"] == 8
    assert [(c["cluster"], c["capacity_gpus"]) for c in base["clusters"]] == [("default", 8), (CLOUD, 16)]
    # Per-cluster figures add up to the fleet's.
    assert sum(c["gpu_hours"] for c in base["clusters"]) == pytest.approx(base["totals"]["gpu_hours"])
    assert sum(c["ran"] for c in base["clusters"]) == base["totals"]["ran"] == 8
    # One cluster alone: its capacity, its four jobs; at home one node runs them one after another, so the waits
    # are longer than over the fleet, where three nodes share the eight.
    assert (home["scenarios"][0]["totals"]["capacity_gpus"], home["scenarios"][0]["totals"]["jobs"]) == (8, 4)
    assert (cloud["scenarios"][0]["totals"]["capacity_gpus"], cloud["scenarios"][0]["totals"]["jobs"]) == (16, 4)
    assert home["scenarios"][0]["totals"]["wait_p95_s"] > base["totals"]["wait_p95_s"]
    assert [c["cluster"] for c in home["scenarios"][0]["clusters"]] == ["default"]
    # The proposal names the cloud, and its nodes join the cloud's capacity.
    more = whole["scenarios"][1]
    assert more["cluster"] == CLOUD
    assert [(c["cluster"], c["capacity_gpus"]) for c in more["clusters"]] == [("default", 8), (CLOUD, 32)]


def test_suggested_layouts_over_a_fleet_name_their_cluster():
    cluster = fleet(home_nodes=0, cloud_nodes=1)
    cluster.nodes = {**cluster.nodes}  # an A100 node at home, MIG-capable, next to the cloud's H100
    a100 = "NVIDIA-A100-SXM4-80GB"
    cluster.nodes["a0"] = node("a0", a100, {GPU_RESOURCE: 8}, cluster="default")
    cluster.shapes["a0"] = model.NodeShape("a0", a100, 8, True)
    # Work for 1g.10gb MIG devices, which no node offers today: a carving of a0 would let it run.
    cluster.classes[2] = ClassView(2, mig_resource_name("1g.10gb"), a100, 1 / 7, "A100 SXM4 80GB · MIG 1g.10gb")
    cluster.quotas[(1, 2)] = QuotaView(64, 64)
    jobs = [job(i + 1, T0 + i * 600, HOUR, count=1, class_id=2, cluster="default") for i in range(20)]
    result = engine.run_plan(history(jobs), cluster, [], engine.Options(suggest=1))
    suggested = [s for s in result["scenarios"] if s["origin"] == "suggested"]
    assert suggested and all(s["cluster"] == "default" for s in suggested), result["suggestions"]
    assert " in default: " in suggested[0]["name"]
