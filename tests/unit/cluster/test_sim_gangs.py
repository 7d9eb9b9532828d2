"""The simulated cluster runs gangs as Kubernetes does: Indexed Jobs (one pod per completion index, hostname,
index annotation and JOB_COMPLETION_INDEX, backoffLimit 0 ends the Job at the first failed pod and deletes the
others), required pod anti-affinity on the hostname, a server version that decides whether completionMode
exists at all, and a rank failure injected with SIM_FAIL_RANK."""

from __future__ import annotations

import pytest

from cluster.base import INDEXED_JOBS_SINCE, forms_for, parse_server_version
from cluster.sim import SimulatedCluster
from tests.sim_objects import SMALL, h100_node, job

INDEX = "batch.kubernetes.io/job-completion-index"


def gang(name: str, workers: int = 2, nodes=("gpu-a", "gpu-b"), env=(), command=("python", "train.py")) -> dict:
    manifest = job(name, gpus=2)
    spec = manifest["spec"]
    spec.update(completionMode="Indexed", completions=workers, parallelism=workers, backoffLimit=0)
    pod = spec["template"]["spec"]
    pod["containers"][0]["command"] = list(command)
    pod["containers"][0]["env"] = [{"name": "WORLD_SIZE", "value": str(workers)}, *env]
    pod["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]} for node in nodes
        ]}},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"portal-job": name}}, "topologyKey": "kubernetes.io/hostname"}
        ]},
    }  # fmt: skip
    return manifest


def cluster_at(clock, version: str, scenario=SMALL) -> SimulatedCluster:
    return SimulatedCluster(scenario={**scenario, "server_version": version}, clock=clock)


def pods_of(cluster, name: str) -> list[dict]:
    return sorted(
        (p for p in cluster.list_pods("team-a") if p["metadata"]["labels"].get("job-name") == name),
        key=lambda p: int(p["metadata"].get("annotations", {}).get(INDEX, -1)),
    )


@pytest.mark.parametrize(
    ("version", "parsed", "indexed"),
    [("v1.20.2", (1, 20), False), ("v1.23.17", (1, 23), False), ("v1.24.0", (1, 24), True),
     ("v1.29.3-gke.1282000", (1, 29), True), ("v1.27+", (1, 27), True), ("nonsense", (0, 0), False)],
)  # fmt: skip
def test_the_server_version_decides_the_workload_forms(version, parsed, indexed):
    assert parse_server_version(version) == parsed
    assert forms_for(version).indexed_jobs is indexed
    assert INDEXED_JOBS_SINCE == (1, 24)


def test_the_simulated_server_is_modern_unless_the_scenario_says(clock):
    assert forms_for(SimulatedCluster(scenario=SMALL, clock=clock).server_version()).indexed_jobs
    assert cluster_at(clock, "v1.20.2").server_version() == "v1.20.2"


def test_an_indexed_job_runs_one_pod_per_index_one_per_node(clock):
    sim = cluster_at(clock, "v1.29.0")
    sim.create_workload(gang("ddp"))
    pods = pods_of(sim, "ddp")
    assert [p["metadata"]["annotations"][INDEX] for p in pods] == ["0", "1"]
    assert [p["spec"]["hostname"] for p in pods] == ["ddp-0", "ddp-1"]
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["gpu-a", "gpu-b"]
    env = pods[1]["spec"]["containers"][0]["env"]
    assert {
        "name": "JOB_COMPLETION_INDEX",
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX}']"}},
    } in env
    clock.advance(5)
    assert all(p["status"]["phase"] == "Running" for p in pods_of(sim, "ddp"))
    assert sim.list_workloads("team-a")[0]["status"]["active"] == 2


def test_anti_affinity_keeps_a_second_rank_off_a_taken_node(clock):
    sim = cluster_at(clock, "v1.29.0")
    sim.create_workload(gang("ddp", nodes=("gpu-a",)))
    bound, waiting = sorted(pods_of(sim, "ddp"), key=lambda p: bool(p["spec"].get("nodeName")), reverse=True)
    assert bound["spec"]["nodeName"] == "gpu-a" and not waiting["spec"].get("nodeName")
    message = next(c for c in waiting["status"]["conditions"] if c["type"] == "PodScheduled")["message"]
    assert "node(s) didn't match pod anti-affinity rules" in message
    # Pods of another Job are not repelled: a single job still fits beside the rank.
    sim.create_workload(job("other", gpus=1))
    assert [
        p["spec"].get("nodeName") for p in sim.list_pods("team-a") if p["metadata"]["labels"]["job-name"] == "other"
    ]


def test_backoff_limit_0_fails_the_indexed_job_at_the_first_failed_rank_and_stops_the_others(clock):
    sim = cluster_at(clock, "v1.29.0")
    env = [
        {"name": "SIM_FAIL_RANK", "value": "1"},
        {"name": "SIM_EXIT_CODE", "value": "3"},
        {"name": "SIM_FAIL_AFTER_SECONDS", "value": "20"},
        {"name": "SIM_DURATION_SECONDS", "value": "600"},
    ]
    sim.create_workload(gang("ddp", env=env))
    clock.advance(30)
    pods = pods_of(sim, "ddp")
    assert [p["metadata"]["annotations"][INDEX] for p in pods] == ["1"]  # rank 0's pod was deleted
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 3
    failed = next(c for c in sim.list_workloads("team-a")[0]["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    log = sim.pod_logs("team-a", pods[0]["metadata"]["name"])
    assert "rank 1/2: step 50 loss=" in log and "rank 1/2: RuntimeError" in log


def test_all_ranks_succeeding_complete_the_indexed_job(clock):
    sim = cluster_at(clock, "v1.29.0")
    sim.create_workload(gang("ddp", env=[{"name": "SIM_DURATION_SECONDS", "value": "30"}]))
    clock.advance(40)
    status = sim.list_workloads("team-a")[0]["status"]
    assert status["succeeded"] == 2 and status["completedIndexes"] == "0-1"
    assert any(c["type"] == "Complete" for c in status["conditions"])


def test_a_v1_20_server_drops_completion_mode_as_an_unknown_field(clock):
    sim = cluster_at(clock, "v1.20.2", {**SMALL, "nodes": [h100_node("gpu-a"), h100_node("gpu-b")]})
    created = sim.create_workload(gang("ddp"))
    assert "completionMode" not in created["spec"]
    # An ordinary Job now: its pods carry no index and no hostname (why the portal renders one Job per rank).
    assert all(INDEX not in (p["metadata"].get("annotations") or {}) for p in pods_of(sim, "ddp"))
    assert all("hostname" not in p["spec"] for p in pods_of(sim, "ddp"))


def test_one_job_per_rank_fails_alone(clock):
    sim = cluster_at(clock, "v1.20.2")
    for rank in (0, 1):
        manifest = job(f"ddp-{rank}", gpus=2, backoff_limit=0)
        manifest["spec"]["template"]["spec"]["containers"][0]["env"] = [
            {"name": "NODE_RANK", "value": str(rank)}, {"name": "SIM_FAIL_RANK", "value": "1"},
            {"name": "SIM_FAIL_AFTER_SECONDS", "value": "10"}, {"name": "SIM_DURATION_SECONDS", "value": "600"},
        ]  # fmt: skip
        sim.create_workload(manifest)
    clock.advance(20)
    states = {p["metadata"]["labels"]["job-name"]: p["status"]["phase"] for p in sim.list_pods("team-a")}
    assert states == {"ddp-0": "Running", "ddp-1": "Failed"}


def test_a_node_field_selector_with_two_names_is_refused_as_the_api_server_does(clock):
    from cluster.base import Invalid

    sim = cluster_at(clock, "v1.29.0")
    manifest = gang("ddp")
    terms = manifest["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]  # fmt: skip
    terms[:] = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a", "gpu-b"]}]}]
    with pytest.raises(Invalid, match=r"must be only one value when `operator` is 'In' or 'NotIn' for node field"):
        sim.create_workload(manifest)
    assert sim.list_workloads("team-a") == []
