"""The demo's job array through the real job cycle on the simulated cluster: 4 tasks of a learning-rate sweep,
at most 2 admitted at once, each with its index; and the demo jobs carry their labels."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from gpus.reconcile import sync_inventory
from jobs.choices import ACTIVE_STATES
from jobs.cycle.run import run_cycle
from jobs.demo import seed_quotas_and_jobs
from jobs.models import Job, JobArray
from jobs.render import render_job
from tests.sim_objects import DEMO_SCENARIO


@pytest.mark.django_db
def test_the_demo_sweep_runs_two_tasks_at_a_time(tmp_path, people):
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    sync_inventory(sim)
    seed_quotas_and_jobs()
    array = JobArray.objects.get(name="lr-sweep")
    assert (array.size, array.parallelism, array.tasks.count()) == (4, 2, 4)
    for _ in range(3):
        run_cycle(sim)
        assert array.tasks.filter(state__in=ACTIVE_STATES).count() <= 2
    assert array.tasks.filter(state__in=ACTIVE_STATES).count() == 2
    assert set(array.tasks.filter(state="queued").values_list("wait_reason", flat=True)) == {"array"}
    running = array.tasks.filter(state__in=ACTIVE_STATES).first()
    env = {e["name"]: e["value"] for e in render_job(running)["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["PORTAL_ARRAY_INDEX"] == str(running.array_index)
    assert Job.objects.filter(labels__pipeline="demo").count() == Job.objects.filter(notebook__isnull=True).count()
