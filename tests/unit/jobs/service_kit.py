"""The service tests' small cluster and helpers: 4 nodes of 2 H100s (some in the dedicated pool), cycles on the
simulated clock, and what a service's objects look like there. The service itself is tests/factories.py's
inference_service (an autoscaler on requests per second)."""

from __future__ import annotations

import pytest

from jobs.cycle.run import run_cycle
from jobs.models.service import InferenceService
from tests.sim_objects import h100_node

POOL = "gpu-portal.io/pool"
#: The service tests' H100 quotas: vision 2 guaranteed and 4 at most (the autoscaler wants more by the afternoon),
#: nlp 8.
QUOTAS = {"vision": (2, 4), "nlp": (8, 8)}


def scenario(pool_nodes: int = 0) -> dict:
    """4 nodes of 2 H100s, the first ``pool_nodes`` in the dedicated pool, and the traffic's peak at 80 requests/s."""
    nodes = [h100_node(f"gpu-{i}", count=2) for i in range(4)]
    for node in nodes[:pool_nodes]:
        node["labels"] = {POOL: "inference"}
    return {
        "namespaces": ["team-vision", "team-nlp"],
        "nodes": nodes,
        "traffic": {"peak_requests_per_second": 80},
    }


#: Marks a module or test whose ``cluster`` (tests/conftest.py) is this small one, with QUOTAS.
SMALL_CLUSTER = pytest.mark.cluster(scenario=scenario(), quotas=QUOTAS)


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
