"""A notebook in a real Chromium: launch from the form, the token shown once, the page left open while the session
starts (the live refresh brings Extend and the countdowns, in words, without a reload), Extend up to the maximum
(then disabled with the reason), Stop (the volume kept, the quota freed) and Start again on the same volume with
a new token."""

import re
import time

import pytest

from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState, NotebookState
from jobs.cycle.run import run_cycle
from jobs.models import Notebook
from jobs.notebook.sessions import check_token
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


def _until_running(cluster, notebook) -> None:
    for _ in range(100):
        run_cycle(cluster)
        notebook.refresh_from_db()
        if notebook.session.state == JobState.RUNNING:
            break
        time.sleep(0.1)
    assert notebook.session.state == JobState.RUNNING  # its start started its limits: no culler pass needed


def test_launch_extend_stop_and_start_again(page, live_server, people, tmp_path, monkeypatch, settings, artifacts):
    settings.PORTAL_NOTEBOOK_TTL_SECONDS = 3600
    settings.PORTAL_NOTEBOOK_MAX_TTL_SECONDS = 7200
    settings.PORTAL_NOTEBOOK_EXTEND_SECONDS = 1800
    settings.PORTAL_LIVE_POLL_SECONDS = 1
    cluster = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    sync_inventory(cluster)
    monkeypatch.setattr("jobs.notebook.views.get_backend", lambda: cluster)
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 1, 1)

    login(page, "alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Notebooks").click()
    page.get_by_label("Name").fill("scratch")
    page.get_by_label("GPU").select_option(str(rc.pk))
    with page.expect_navigation():
        page.get_by_role("button", name="Launch").click()
    notebook = Notebook.objects.get(name="scratch")
    token = page.get_by_test_id("notebook-token").locator("code").inner_text()
    assert check_token(notebook.token_hash, token)
    expect(page.get_by_test_id("notebook-url")).to_have_text(notebook.url)
    extend = page.get_by_test_id("notebook-extend")
    expect(extend).to_be_disabled()  # queued: nothing counts down yet, and the page says so beside the button
    expect(page.get_by_test_id("extend-why")).to_contain_text("its limits start counting when it runs")

    # The page stays open (a reload would hide the one-time token): the live refresh brings what running changes.
    _until_running(cluster, notebook)
    expect(page.get_by_test_id("notebook-status")).to_have_text("Running")
    expect(extend).to_be_enabled()
    expect(page.get_by_test_id("extend-why")).to_have_count(0)
    expect(page.get_by_test_id("notebook-token")).to_be_visible()
    countdown = page.get_by_test_id("ttl-left").locator(".countdown")
    expect(countdown).to_have_text(re.compile(r"^(59 min \d+ s|1 h)$"))  # words from vocab.durations
    first = countdown.inner_text()
    expect(countdown).not_to_have_text(first, timeout=5000)  # each refresh brings the time left
    expect(countdown).to_have_text(re.compile(r"^59 min \d+ s$"))  # ... still in words, never "3597"
    page.screenshot(path=str(artifacts / "notebook-running.png"), full_page=True)
    page.reload()
    expect(page.get_by_test_id("notebook-token")).to_have_count(0)  # once only

    with page.expect_navigation():
        extend.click()
    expect(page.get_by_text("now runs until")).to_be_visible()
    expect(page.get_by_test_id("ttl-left").locator(".countdown")).to_contain_text("1 h 29 min")
    with page.expect_navigation():
        extend.click()  # up to the team's maximum of 2 hours from the start
    expect(page.get_by_test_id("ttl-left").locator(".countdown")).to_contain_text("1 h 59 min")
    expect(extend).to_be_disabled()
    expect(page.get_by_test_id("extend-why")).to_contain_text("already runs until the team's maximum age of 2 hours")
    page.wait_for_timeout(2500)  # two live refreshes later it is still so
    expect(extend).to_be_disabled()
    page.screenshot(path=str(artifacts / "notebook-at-maximum.png"), full_page=True)

    page.on("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_test_id("notebook-stop").click()
    expect(page.get_by_test_id("stop-reason")).to_contain_text("Stopped by its owner")
    notebook.refresh_from_db()
    assert notebook.state == NotebookState.STOPPED and notebook.session.state == JobState.CANCELLED
    assert cluster.list_workloads("team-vision") == []
    assert cluster.get_pvc("team-vision", notebook.volume_name)["status"]["phase"] == "Bound"

    first_session = notebook.session_id
    with page.expect_navigation():
        page.get_by_test_id("notebook-start").click()
    new_token = page.get_by_test_id("notebook-token").locator("code").inner_text()
    notebook.refresh_from_db()
    assert new_token != token and check_token(notebook.token_hash, new_token)
    _until_running(cluster, notebook)
    assert notebook.session_id != first_session
    volumes = cluster.list_workloads("team-vision")[0]["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["persistentVolumeClaim"]["claimName"] == notebook.volume_name
    page.reload()
    expect(page.get_by_test_id("notebook-status")).to_have_text("Running")
