"""A notebook in a real Chromium: launch from the form, the token shown once, the countdown ticking, Extend,
Stop (the volume kept, the quota freed) and Start again on the same volume with a new token."""

import time

import pytest

from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState, NotebookState
from jobs.cycle.run import run_cycle
from jobs.models import Notebook
from jobs.notebook.sessions import check_token, cull_notebooks
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
    assert notebook.session.state == JobState.RUNNING
    cull_notebooks(cluster)  # the culler starts the clocks of a running session


def test_launch_extend_stop_and_start_again(page, live_server, people, tmp_path, monkeypatch, settings, artifacts):
    settings.PORTAL_NOTEBOOK_TTL_SECONDS = 3600
    settings.PORTAL_NOTEBOOK_EXTEND_SECONDS = 1800
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
    page.reload()
    expect(page.get_by_test_id("notebook-token")).to_have_count(0)  # once only

    _until_running(cluster, notebook)
    page.reload()
    expect(page.get_by_test_id("notebook-status")).to_have_text("Running")
    countdown = page.get_by_test_id("ttl-left").locator(".countdown")
    first = countdown.inner_text()
    expect(countdown).not_to_have_text(first, timeout=3000)  # it ticks in the browser
    assert first.startswith("59 min") or first.startswith("1 h 0 min")
    page.screenshot(path=str(artifacts / "notebook-running.png"), full_page=True)

    with page.expect_navigation():
        page.get_by_test_id("notebook-extend").click()
    expect(page.get_by_text("now runs until")).to_be_visible()
    expect(page.get_by_test_id("ttl-left").locator(".countdown")).to_contain_text("1 h 29 min")

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
