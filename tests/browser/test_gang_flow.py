"""A distributed job in a real Chromium against the simulated cluster: a user picks Distributed training on the
job form (the workers' fields appear only then), submits 2 workers × 2 H100, sees "2 × 2 H100 …" in the job
list, opens the job once the cycle has admitted it whole, sees both ranks Running on two different nodes in the
Ranks table (which refreshes by itself), and opens rank 1's log, which shows that rank's own pod.

Expected values come from the Job row and the simulated cluster (its pods and their logs), never constants.
It needs gang admission (jobs.scheduling) and gang rendering in the simulated cluster: with those missing the
job never runs and the test fails at that step, as it should."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from gpus.reconcile import sync_inventory
from jobs.choices import JobKind, JobState, RankState
from jobs.cycle.run import run_cycle
from jobs.models import Job
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login
from .flows import give_quotas, submit_job_form

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture
def sim(tmp_path, monkeypatch, settings):
    settings.PORTAL_LIVE_POLL_SECONDS = 1
    settings.PORTAL_LOG_FOLLOW_SECONDS = 3
    clock = SimClock()
    cluster = SimulatedCluster(tmp_path / "gang.json", scenario=DEMO_SCENARIO, clock=clock)
    cluster.watch_poll_interval = 0.1
    sync_inventory(cluster)
    for where in ("gpus.fleet.get_backend",):
        monkeypatch.setattr(where, lambda: cluster)
    return cluster, clock


def test_a_user_submits_a_2_by_2_gang_and_follows_its_ranks(new_page, live_server, people, sim, artifacts):
    cluster, clock = sim
    quotas = give_quotas(people)
    h100, a10 = quotas["h100"].resource_class, quotas["a10"].resource_class
    page = new_page()
    login(page, "alice")

    page.goto("/jobs/new/")
    gang_fields = page.get_by_test_id("gang-fields")
    expect(gang_fields).to_be_hidden()  # a batch job by default: no workers to ask about
    page.get_by_label("Kind").select_option(JobKind.DISTRIBUTED.value)
    expect(gang_fields).to_be_visible()
    expect(gang_fields).to_contain_text("MASTER_ADDR")
    page.get_by_label("Name", exact=True).fill("ddp-smoke")
    page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.01-py3")
    page.get_by_label("Command").fill("torchrun train.py --epochs 3")
    page.get_by_label("Resource class").select_option(str(h100.pk))
    # The time-sliced A10's caveat is for the A10 only (ux-walk R9): hidden while H100 is picked.
    a10_caveat = page.locator('[data-testid="shared-caveat"]')
    expect(a10_caveat).to_be_hidden()
    page.get_by_label("Resource class").select_option(str(a10.pk))
    expect(a10_caveat).to_be_visible()
    page.get_by_label("Resource class").select_option(str(h100.pk))
    page.get_by_label("GPUs (per worker)").fill("2")
    page.get_by_label("Workers", exact=True).fill("2")
    page.screenshot(path=artifacts / "gang-submit-form.png", full_page=True)
    submit_job_form(page)

    job = Job.objects.get(name="ddp-smoke")
    assert (job.kind, job.workers, job.count, job.total_count) == (JobKind.DISTRIBUTED, 2, 2, 4)
    assert page.url == live_server.url + job.get_absolute_url()

    page.goto("/jobs/")
    row = page.locator(f'[data-testid="job-table"] tr[data-job="{job.pk}"]')
    expect(row.locator('[data-role="request-size"]')).to_have_text(f"2 × 2 {h100.display_name}")

    # The admission cycle places the whole gang; the simulated kubelets start both ranks.
    for _ in range(15):
        clock.advance(2)
        run_cycle(cluster, now=clock.now)
        job.refresh_from_db()
        if job.state == JobState.RUNNING and all(r.get("state") == RankState.RUNNING for r in job.ranks or []):
            break
    assert job.state == JobState.RUNNING, (job.state, job.wait_message)
    assert len(job.ranks) == 2 and all(r["state"] == RankState.RUNNING for r in job.ranks), job.ranks
    nodes = [r["node"] for r in job.ranks]
    assert len(set(nodes)) == 2, nodes  # one worker per node

    page.goto(job.get_absolute_url())
    ranks = page.get_by_test_id("ranks")
    for rank in job.ranks:
        line = ranks.locator(f'tr[data-rank="{rank["rank"]}"]')
        expect(line.locator('[data-role="rank-state"]')).to_have_text(RankState.RUNNING.label)
        expect(line.locator('[data-role="node"]')).to_have_text(rank["node"])
        expect(line).to_contain_text(rank["pod"])

    # Rank 1's log: the Log section shows that rank's pod, followed live.
    rank1 = job.ranks[1]
    clock.advance(20)
    run_cycle(cluster, now=clock.now)
    with page.expect_navigation():
        ranks.locator('tr[data-rank="1"] [data-role="rank-log"]').click()
    assert "rank=1" in page.url
    logs = page.get_by_test_id("logs")
    expect(logs.locator("h2")).to_have_text("Log of rank 1")
    expect(logs.locator('[data-role="log-source"]')).to_contain_text(rank1["pod"])
    lines = cluster.pod_logs(job.team.namespace, rank1["pod"], tail_lines=10_000).splitlines()
    assert lines, "the simulated rank wrote nothing"
    expect(logs.locator('pre[data-role="log"]')).to_contain_text(lines[-1])
    page.screenshot(path=artifacts / "gang-ranks-rank1-log.png", full_page=True)
