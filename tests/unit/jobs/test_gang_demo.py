"""The demo's distributed jobs through the real job cycle on the simulated cluster: ddp-pretrain runs its two
ranks on two nodes; ddp-flaky's rank 1 fails after three minutes (SIM_FAIL_RANK), the portal stops every rank
and restarts the whole job once, and after the second failure marks it failed naming rank 1 and its exit code."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from gpus.reconcile import sync_inventory
from jobs.choices import EventKind, JobState
from jobs.cycle.run import run_cycle
from jobs.demo import seed_quotas_and_jobs
from jobs.models import Job
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO


@pytest.mark.django_db
def test_the_demo_gangs_run_and_the_flaky_one_is_restarted_whole_then_fails_on_rank_1(tmp_path, people):
    clock = SimClock()
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=clock)
    sync_inventory(sim)
    seed_quotas_and_jobs()
    pretrain, flaky = Job.objects.get(name="ddp-pretrain"), Job.objects.get(name="ddp-flaky")
    for _ in range(4):
        run_cycle(sim, now=clock.now)
        clock.advance(10)
    pretrain.refresh_from_db()
    assert pretrain.state == JobState.RUNNING and len(set(pretrain.node_names)) == 2
    assert [r["state"] for r in pretrain.ranks] == ["running", "running"]
    for _ in range(100):  # 100 cycles of 10 s: long enough for two failures after 180 s each
        run_cycle(sim, now=clock.now)
        clock.advance(10)
        flaky.refresh_from_db()
        if flaky.state == JobState.FAILED:
            break
    assert flaky.state == JobState.FAILED and flaky.failed_rank == 1 and flaky.exit_code == 3
    restarts = flaky.events.filter(kind=EventKind.REQUEUED, message__contains="restarting the whole job")
    assert restarts.count() == 1
    assert not [w for w in sim.list_workloads() if w["metadata"]["name"].startswith(flaky.workload_name)]
    pretrain.refresh_from_db()
    assert pretrain.state == JobState.RUNNING  # the other gang is untouched


@pytest.mark.django_db
def test_a_gangs_start_event_names_every_ranks_node(tmp_path, people):
    clock = SimClock()
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=clock)
    sync_inventory(sim)
    seed_quotas_and_jobs()
    for _ in range(3):
        run_cycle(sim, now=clock.now)
        clock.advance(10)
    pretrain = Job.objects.get(name="ddp-pretrain")
    started = pretrain.events.get(kind=EventKind.STARTED).message
    assert started.startswith("All 2 workers running on ") and "(first: pod " in started
    assert all(node in started for node in pretrain.node_names)
    single = Job.objects.get(name="resnet50-train")
    assert single.events.get(kind=EventKind.STARTED).message.startswith(f"Started on {single.node_name} (pod ")
