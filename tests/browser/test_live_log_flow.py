"""A job's life watched in a real Chromium without reloading: its page follows the log as the simulated process
writes it (across the bounded streams' reconnects, no line lost or doubled), its state badge and the job list
change by themselves, and once it is cancelled and its pod is gone the kept log is on the page and downloads
whole. Expected text comes from the simulated cluster's own log and the JobLog row, never from constants.

The simulated cluster runs on a hand-moved clock: the test moves it and runs the job cycle, as the Celery beat
would, while the pages poll (PORTAL_LIVE_POLL_SECONDS) and stream (PORTAL_LOG_FOLLOW_SECONDS) on their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.sim import SimulatedCluster
from gpus.reconcile import sync_inventory
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job, JobLog
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login
from .flows import give_quotas, submit_job_form

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

#: Set on the window once the page has loaded: a reload (a new document) would lose it.
MARK = "window.__sameDocument"


def _shot(page, artifacts: Path, name: str) -> None:
    """A screenshot in test-artifacts/ (git-ignored) for a person to look at."""
    page.screenshot(path=artifacts / name, full_page=True)


def _mark(page) -> None:
    page.evaluate(f"{MARK} = true")


def _still_same_document(page) -> bool:
    return page.evaluate(f"{MARK} === true")


@pytest.fixture
def sim(tmp_path, monkeypatch, settings):
    settings.PORTAL_LIVE_POLL_SECONDS = 1
    settings.PORTAL_LOG_FOLLOW_SECONDS = 3  # short streams: following on needs the page to reconnect
    clock = SimClock()
    cluster = SimulatedCluster(tmp_path / "live.json", scenario=DEMO_SCENARIO, clock=clock)
    cluster.watch_poll_interval = 0.1
    sync_inventory(cluster)
    for where in ("gpus.fleet.get_backend",):
        monkeypatch.setattr(where, lambda: cluster)
    return cluster, clock


def _cycle(cluster, clock, seconds: float) -> None:
    clock.advance(seconds)
    run_cycle(cluster, now=clock.now)


def test_a_jobs_log_grows_live_its_page_and_the_list_update_and_the_log_stays(
    new_page, live_server, people, sim, artifacts
):
    cluster, clock = sim
    h100 = give_quotas(people)["h100"].resource_class
    listing = new_page()
    login(listing, "alice")
    page = new_page()
    login(page, "alice")

    page.goto("/jobs/new/")
    page.get_by_label("Name", exact=True).fill("live-train")
    page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.01-py3")
    page.get_by_label("Command").fill("python train.py --epochs 90")
    page.get_by_label("Resource class").select_option(str(h100.pk))
    submit_job_form(page)
    job = Job.objects.get(name="live-train")
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.QUEUED.label)
    expect(page.get_by_test_id("logs")).to_contain_text("No log yet: the job waits in the queue")
    _mark(page)

    listing.goto("/jobs/")
    row = listing.locator(f'[data-testid="job-table"] tr[data-job="{job.pk}"]')
    expect(row.locator('[data-role="state"]')).to_have_text(JobState.QUEUED.label)
    _mark(listing)

    # The cycle admits it and the pod starts: the badge, the placement and the log section change by themselves.
    run_cycle(cluster, now=clock.now)
    for _ in range(10):
        _cycle(cluster, clock, 2)
        job.refresh_from_db()
        if job.state == JobState.RUNNING:
            break
    assert job.state == JobState.RUNNING and job.pod_name
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.RUNNING.label)
    expect(page.get_by_test_id("job-placement").locator('[data-role="node"]')).to_have_text(job.node_name)
    expect(page.get_by_test_id("wait-box")).to_have_count(0)
    log = page.get_by_test_id("logs").locator('pre[data-role="log"]')
    expect(log).to_have_attribute("data-following", "open")
    expect(page.get_by_test_id("logs").locator('[data-role="log-source"]')).to_have_text(
        f"Following pod {job.pod_name} live: new lines appear as it writes them."
    )
    expect(row.locator('[data-role="state"]')).to_have_text(JobState.RUNNING.label)

    def whole_log() -> list[str]:
        return cluster.pod_logs(job.team.namespace, job.pod_name, tail_lines=10_000).splitlines()

    # Each 10 simulated seconds the process writes a step line; the page shows each as it comes, across the
    # reconnects of the 3-second streams, in order, none twice.
    seen = []
    for _ in range(4):
        _cycle(cluster, clock, 20)
        lines = whole_log()
        expect(log).to_contain_text(lines[-1])
        shown = log.inner_text().splitlines()
        assert shown == lines
        seen.append(len(shown))
        page.wait_for_timeout(1500)  # let a stream run out and the page reconnect before the next lines
    assert seen == sorted(seen) and seen[-1] >= seen[0] + 6
    expect(page.get_by_test_id("logs").locator('[data-role="log-status"]')).to_have_text("")  # no "waiting"
    assert _still_same_document(page) and _still_same_document(listing)
    _shot(page, artifacts, "live-log-following.png")
    _shot(listing, artifacts, "live-job-list-running.png")

    # Cancelled from its page: the list, in another tab, shows it by itself.
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_role("button", name="Cancel job").click()
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.CANCELLED.label)
    expect(row.locator('[data-role="state"]')).to_have_text(JobState.CANCELLED.label)
    assert _still_same_document(listing)
    _shot(listing, artifacts, "live-job-list-cancelled.png")

    # The next cycle keeps the log and deletes the workload: the pod is gone, its log is not.
    before_gone = whole_log()
    _cycle(cluster, clock, 1)
    assert cluster.list_pods(job.team.namespace) == []
    kept = JobLog.objects.get(job=job)
    assert kept.pod_name == job.pod_name and kept.text.splitlines() == before_gone
    page.reload()
    section = page.get_by_test_id("logs")
    source = section.locator('[data-role="log-source"]')
    expect(source).to_contain_text(f"Kept log of pod {job.pod_name} (")
    expect(source).to_contain_text("kept by the portal so it stays after the pod is gone.")
    expect(source).not_to_contain_text("lines are shown")  # the whole log is on the page
    expect(section).not_to_contain_text("not found")
    assert section.locator('pre[data-role="log"]').inner_text().splitlines() == before_gone
    with page.expect_download() as download_info:
        section.get_by_test_id("log-download").click()
    download = download_info.value
    assert download.suggested_filename == f"job-{job.pk}-{job.pod_name}.log"
    assert Path(download.path()).read_text() == kept.text
    _shot(page, artifacts, "live-log-kept-after-pod-gone.png")
