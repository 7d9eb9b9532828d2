"""The demo's inference service over a simulated day: the seeded demo (its quotas, jobs, gangs, notebooks and team
nlp's chat-llm) runs through the real job cycle on the demo cluster from 13:00 to 13:00 the next day. chat-llm's
minimum is admitted beside llama-finetune; in the afternoon its autoscaler wants more, and the portal grants
replicas up to what nlp's H100 limit leaves (4 while the fine-tune holds 8 of the limit of 12, then its maximum of 6
once the fine-tune is done); at night it comes back down to its minimum. At every step the service holds no more
than the quota allows."""

from __future__ import annotations

import math

import pytest

from cluster.sim import SimulatedCluster
from cluster.sim.scenario import load_scenario
from cluster.sim.traffic import request_rate
from gpus.reconcile import sync_inventory
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.demo import DEMO_QUOTAS, DEMO_SERVICE_SCALING, H100, seed_quotas_and_jobs
from jobs.models import Job, JobEvent
from jobs.models.service import InferenceService
from jobs.service import ops as service_ops
from tests.clock import SimClock
from tests.factories import inference_service
from tests.sim_objects import DEMO_SCENARIO
from tests.unit.jobs.service_kit import SMALL_CLUSTER, cycle, fresh, pods_of

DAY = 86_400.0
#: Twenty minutes a cycle: 72 cycles a day. The grants come one every other cycle (the autoscaler has to show it
#: wants more first), so the four the limit leaves beside the two-hour fine-tune are all granted before it ends.
STEP = 1200.0
TRAFFIC = load_scenario(DEMO_SCENARIO).get("traffic")

# The fixtures' clock (the simulated day below keeps one of its own); the ``cluster`` of the reservations' tests is the
# service tests' small one: 4 nodes of 2 H100s, vision's H100 quota 2 guaranteed, 4 limit.
pytestmark = [pytest.mark.clock(hour=9), SMALL_CLUSTER]


def nlp_h100_limit() -> int:
    return next(limit for key, _, limit, _ in DEMO_QUOTAS["nlp"] if key == H100)


def other_nlp_h100_held(service: InferenceService) -> int:
    """H100s nlp's other jobs hold now (admitted, running or being preempted)."""
    held = Job.objects.filter(
        team__slug="nlp", resource_class__key=H100,
        state__in=(JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTING),
    ).exclude(pk=service.job_id)  # fmt: skip
    return sum(job.total_count for job in held)


def demand(t: float) -> int:
    """Replicas the demo's traffic asks for at ``t`` within the service's bounds: the rate over the per-replica
    target, rounded up (what an unconstrained HPA would settle on)."""
    rate = request_rate(t, None, TRAFFIC)
    wanted = math.ceil(rate / DEMO_SERVICE_SCALING["metric_target"])
    return min(max(wanted, DEMO_SERVICE_SCALING["min_replicas"]), DEMO_SERVICE_SCALING["max_replicas"])


def run_day(tmp_path) -> list[tuple[float, int, int, int, int]]:
    """(hour, granted replicas, ready replicas, H100s nlp's other jobs hold, replicas the traffic asks for) after
    every cycle of a day."""
    day = SimClock(hour=13)
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=day)
    sync_inventory(sim)
    seed_quotas_and_jobs()
    service = InferenceService.objects.get(name="chat-llm")
    seen = []
    for _ in range(int(DAY // STEP)):
        run_cycle(sim, day.now)
        service = InferenceService.objects.select_related("job").get(pk=service.pk)
        seen.append((day.hour, service.granted_replicas, int(service.observed.get("ready") or 0),
                     other_nlp_h100_held(service), demand(day.t)))  # fmt: skip
        day.advance(STEP)
    return seen


@pytest.mark.django_db
def test_the_demo_service_scales_up_in_the_afternoon_within_quota_and_down_at_night(tmp_path, people):
    seen = run_day(tmp_path)
    limit, high = nlp_h100_limit(), DEMO_SERVICE_SCALING["max_replicas"]
    low = DEMO_SERVICE_SCALING["min_replicas"]
    # Never above what the quota allows (1 H100 a replica), nor above the service's maximum.
    for hour, granted, _, others, _ in seen:
        assert granted + others <= limit, (hour, granted, others)
        assert granted <= high
    # The minimum is admitted beside llama-finetune (which holds 8 H100s) and serves from the second cycle.
    assert seen[0][3] == 8 and all(granted >= low for _, granted, *_ in seen[1:])
    assert seen[1][2] >= low
    # While the fine-tune runs, growth stops at what the limit leaves: 12 - 8.
    with_finetune = [granted for _, granted, _, others, _ in seen if others == 8]
    assert max(with_finetune) == limit - 8
    assert any(wanted > limit - 8 for _, _, _, others, wanted in seen if others == 8)  # the traffic asked for more
    # The afternoon peak: the maximum, once the fine-tune is done.
    peak = [granted for hour, granted, *_ in seen if 15.5 <= hour < 18]
    assert peak and max(peak) == high
    # The night: back to the minimum, and replicas follow the grants down.
    night = [(granted, ready) for hour, granted, ready, *_ in seen if 2 <= hour < 6]
    assert night and all(granted == low for granted, _ in night)
    assert night[-1][1] == low
    # Rising again through the next morning.
    morning = [granted for hour, granted, *_ in seen if 11 <= hour < 13]
    assert max(morning) > low


# -- reservations follow the replicas (the simulated cluster of jobs.tests' service cycle) -------------------


def booked(service: InferenceService) -> list[str]:
    job = Job.objects.get(pk=service.job_id)
    minimum = list(job.node_names) or [job.node_name]
    return sorted([*minimum, *(slot["node"] for slot in service.replica_slots)])


def test_reservations_move_to_the_nodes_the_replicas_run_on(cluster, clock, people):
    service = inference_service(people["alice"])
    moved = False
    for _ in range(40):  # the morning's rise to the quota: 4 replicas of 1 H100 on 4 nodes of 2
        cycle(cluster, clock, 60)
        service = fresh(service)
        running = sorted(p["spec"]["nodeName"] for p in pods_of(cluster, service) if p["spec"].get("nodeName"))
        if len(running) == service.granted_replicas:
            assert booked(service) == running
        moved = moved or JobEvent.objects.filter(job=service.job, data__action="follow_pods").exists()
    assert service.granted_replicas == 4
    assert moved  # the scheduler did place a replica away from its reservation, and the reservation followed


def test_lowering_the_minimum_of_a_running_service_gives_its_replicas_back(cluster, clock, people):
    clock.advance(18 * 3600)  # 03:00, the night's trough: the autoscaler wants no more than the minimum
    service = inference_service(people["alice"], min_replicas=3, max_replicas=4)
    cycle(cluster, clock, 30, times=4)
    service = fresh(service)
    assert service.job.state == JobState.RUNNING and service.job.workers == 3 and service.granted_replicas == 3
    service_ops.scale_service(people["alice"], service, 1, 4)
    cycle(cluster, clock, 60)
    service = fresh(service)
    assert service.job.workers == 1 and len(service.replica_slots) == 2  # held until the scale-down window ends
    assert service.granted_replicas == 3
    cycle(cluster, clock, 60, times=12)  # the HPA's 5 min stabilisation, then the portal's 5 min window
    service = fresh(service)
    assert (service.granted_replicas, service.replica_slots, service.job.workers) == (1, [], 1)
    assert cluster.get_hpa("team-vision", service.name)["spec"]["maxReplicas"] == 1
    cycle(cluster, clock, 60, times=3)
    assert len(pods_of(cluster, service)) == 1
    assert JobEvent.objects.filter(job=service.job, data__action="lower_minimum").count() == 1
