"""The service tests' small cluster and helpers: 4 nodes of 2 H100s (some in the dedicated pool), a service with
an autoscaler on requests per second, cycles on the simulated clock."""

from __future__ import annotations

from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.cycle.run import run_cycle
from jobs.models.service import InferenceService
from jobs.service import ops as service_ops
from tests.sim_objects import h100_node

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
POOL = "gpu-portal.io/pool"


def scenario(pool_nodes: int = 0) -> dict:
    nodes = [h100_node(f"gpu-{i}", count=2) for i in range(4)]
    for node in nodes[:pool_nodes]:
        node["labels"] = {POOL: "inference"}
    return {
        "namespaces": ["team-vision", "team-nlp"],
        "nodes": nodes,
        "traffic": {"peak_requests_per_second": 80},
    }


def make_cluster(tmp_path, clock, people, *, guaranteed=2, limit=4, pool_nodes=0) -> SimulatedCluster:
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=scenario(pool_nodes), clock=clock)
    sync_inventory(sim)
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, guaranteed, limit)
    actions.set_quota(people["admin"], people["nlp"], rc, 8, 8)
    return sim


REPLICA = dict(name="llm", image="registry.example/llm:1", command=["serve"], count=1, cpu_millicores=2000,
               memory_mb=8192, preemptible=True)  # fmt: skip
AUTOSCALE = dict(port=8080, readiness={"type": "http", "path": "/health", "period_seconds": 5}, min_replicas=1,
                 max_replicas=8, metric="pods", metric_name="requests_per_second", metric_target=5.0)  # fmt: skip


def create(people, **changes) -> InferenceService:
    spec = REPLICA | {k: v for k, v in changes.items() if k in REPLICA or k in ("priority", "labels")}
    fields = AUTOSCALE | {k: v for k, v in changes.items() if k in AUTOSCALE}
    return service_ops.create_service(
        people["alice"], people["vision"], ResourceClass.objects.get(key=H100), spec, fields
    )


def cycle(sim, clock, seconds: float = 30, times: int = 1):
    for _ in range(times):
        clock.advance(seconds)
        run_cycle(sim, clock.now)


def fresh(service: InferenceService) -> InferenceService:
    return InferenceService.objects.select_related("job").get(pk=service.pk)


def hpa_of(sim, service):
    return sim.get_hpa("team-vision", service.name)


def pods_of(sim, service) -> list[dict]:
    return [
        p for p in sim.list_pods("team-vision")
        if p["metadata"]["labels"].get("gpu-portal.io/service") == service.name
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]  # fmt: skip


def until(sim, clock, service, hour: float, step: float = 60) -> list[int]:
    """Cycles until the clock's hour of the day reaches ``hour``; the granted replicas seen at every cycle."""
    seen = []
    target = clock.t + ((hour - clock.hour) % 24) * 3600
    while clock.t < target:
        cycle(sim, clock, step)
        seen.append(fresh(service).granted_replicas)
    return seen
