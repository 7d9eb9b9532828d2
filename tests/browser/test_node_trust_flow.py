"""A node an admin can trust, in a real Chromium: the node page says who holds which GPU, and a click runs the
smoke test (a pod pinned to the node runs nvidia-smi and a CUDA check) whose output and verdict show on the
page. The simulated cluster runs on a clock the test moves; the background steps are the functions beat runs."""

import time

import pytest

from accounts.models import Team
from cluster.sim import SimulatedCluster
from gpus.models import Node, NodeSmokeTest, ResourceClass
from gpus.reconcile import sync_inventory
from gpus.smoketest import advance_smoke_tests
from jobs import actions
from jobs.cycle.run import run_cycle
from jobs.models import Job
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

NODE = "gpu-h100-02"


@pytest.fixture
def clocked(tmp_path, people, monkeypatch):
    now = [time.time()]
    sim = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO, clock=lambda: now[0])
    sync_inventory(sim)
    monkeypatch.setattr("gpus.fleet.get_backend", lambda: sim)  # the pages reach a node's cluster through gpus.fleet

    def advance(seconds: float = 0):
        now[0] += seconds

    return sim, advance


def test_an_admin_runs_the_smoke_test_and_sees_who_holds_the_gpus(page, clocked, people, artifacts):
    sim, advance = clocked
    team = Team.objects.get(slug="nlp")
    rc = Node.objects.get(name=NODE).product_label
    klass = ResourceClass.objects.get(key=f"nvidia.com/gpu@{rc}")
    actions.set_quota(people["admin"], team, klass, 16, 16)
    job = actions.submit_job(
        people["bob"], team, klass,
        dict(name="pretrain", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["sleep", "3600"], args=[], env=[],
             count=8, cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=7200),
    ).job  # fmt: skip
    run_cycle(sim)
    advance(6)
    run_cycle(sim)
    job.refresh_from_db()
    holder_node = job.node_name
    assert Job.objects.get(pk=job.pk).state == "running"

    login(page, "admin")
    page.goto(f"/nodes/{holder_node}/")
    holders = page.get_by_test_id("holders-table")
    expect(holders).to_contain_text(f"#{job.pk} pretrain")
    expect(holders).to_contain_text("bob")
    expect(holders).to_contain_text("8 × nvidia.com/gpu")

    page.goto(f"/nodes/{NODE if holder_node != NODE else 'gpu-h100-03'}/")
    with page.expect_navigation():
        page.get_by_test_id("run-smoke-test").click()
    run = NodeSmokeTest.objects.get()
    expect(page.get_by_test_id("smoke-run").first).to_have_attribute("data-state", "pending")
    for _ in range(4):
        advance_smoke_tests(sim)
        advance(5)
    page.reload()
    expect(page.get_by_test_id("smoke-run").first).to_have_attribute("data-state", "passed")
    expect(page.get_by_test_id("smoke-output").first).to_contain_text("Test PASSED")
    run.refresh_from_db()
    assert "NVIDIA-SMI" in run.output
    page.screenshot(path=str(artifacts / "node-smoke-test.png"), full_page=True)
