"""Registering a cluster in a real Chromium: the form shows only the fields of the way to reach the cluster that the
admin picks (API server URL, token and CA; a kubeconfig context; a simulated scenario), a wrong answer keeps its
field in view with what to fix, and a simulated cluster registered from the form is reached and shown with what was
found."""

import pytest

from gpus.models import Cluster

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


def test_the_form_shows_the_fields_of_the_way_picked_and_registers_a_simulated_cluster(
    page, cluster, settings, tmp_path, artifacts
):
    settings.DATA_DIR = tmp_path
    login(page, "admin")
    page.goto("/clusters/new/")
    form = page.get_by_test_id("cluster-form")
    shown = {"token": ["server", "token", "ca_certificate"], "kubeconfig": ["kubeconfig_path", "kube_context"],
             "simulated": ["sim_scenario"], "in_cluster": []}  # fmt: skip
    every = {name for names in shown.values() for name in names}
    for connection, names in shown.items():
        form.locator(f'input[name="connection"][value="{connection}"]').check()
        for name in every:
            field = form.locator(f'.field[data-field="{name}"]')
            (expect(field).to_be_visible if name in names else expect(field).to_be_hidden)()

    # An API server connection without its URL and token: both are named, and their fields are in view.
    form.get_by_label("Name", exact=True).fill("lab")
    form.locator('input[name="connection"][value="token"]').check()
    with page.expect_navigation():
        form.get_by_role("button", name="Register").click()
    form = page.get_by_test_id("cluster-form")
    expect(form.locator('.field.has-error[data-field="server"]')).to_contain_text("needs this")
    expect(form.locator('.field.has-error[data-field="token"]')).to_be_visible()
    expect(form.locator('.field[data-field="kube_context"]')).to_be_hidden()
    assert not Cluster.objects.filter(name="lab").exists()

    form.get_by_label("Name", exact=True).fill("cloud")
    form.get_by_label("Display name").fill("GKE europe-west4")
    form.locator('input[name="connection"][value="simulated"]').check()
    expect(form.locator('.field[data-field="server"]')).to_be_hidden()
    form.get_by_label("Simulated cluster's scenario").select_option("cloud")
    with page.expect_navigation():
        form.get_by_role("button", name="Register").click()
    expect(page.get_by_role("heading", name="GKE europe-west4")).to_be_visible()
    cloud = Cluster.objects.get(name="cloud")
    assert (cloud.health, cloud.server_version) == ("reachable", "v1.33.5-gke.1200000")
    expect(page.get_by_text(cloud.server_version).first).to_be_visible()
    page.screenshot(path=artifacts / "cluster-registered.png", full_page=True)
