"""The job form's volume suggestions follow the cluster choice in a real Chromium, without a reload (issue 32, item
5): with two clusters, each holding one of team vision's claims, the form first suggests both; naming a cluster
leaves that cluster's claim; a claim chosen with no cluster named pins the work, and the form says where it will
run. Expected values come from the volume rows the portal keeps."""

from pathlib import Path

import pytest

from cluster.sim import SimulatedCluster
from gpus.choices import ClusterHealth
from gpus.models import Cluster
from gpus.reconcile import sync_inventory
from jobs.models import TeamVolume
from jobs.storage import volumes
from tests.sim_objects import DEMO_SCENARIO, claim

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

CLOUD_SCENARIO = Path(__file__).resolve().parents[2] / "cluster" / "scenarios" / "cloud.yaml"


def test_the_volume_suggestions_follow_the_clusters_picked(new_page, people, tmp_path, artifacts):
    home = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    sync_inventory(home)
    row = Cluster.objects.create(name="cloud", connection="simulated", sim_scenario="cloud",
                                 health=ClusterHealth.REACHABLE)  # fmt: skip
    cloud = SimulatedCluster(tmp_path / "cloud.json", scenario=str(CLOUD_SCENARIO))
    sync_inventory(cloud, row)
    for sim, name in ((home, "home-data"), (cloud, "cloud-data")):
        sim.ensure_namespace("team-vision")
        sim.ensure_pvc(claim(name))
    volumes.reconcile_volumes(home)
    volumes.reconcile_volumes(cloud, row)
    where = {v.name: v.cluster.name for v in TeamVolume.objects.filter(team=people["vision"])}
    assert where == {"home-data": Cluster.objects.exclude(pk=row.pk).get().name, "cloud-data": "cloud"}

    page = new_page()
    login(page, "alice")
    page.goto("/jobs/new/")
    suggestions = page.locator("#team-volumes option")
    shown = page.get_by_test_id("volume-rows").locator('[data-role="volume-clusters"]')

    def suggested() -> list[str]:
        return suggestions.evaluate_all("options => options.map(o => o.value)")

    assert sorted(suggested()) == sorted(where)
    clusters = page.get_by_label("Clusters, most preferred first")
    clusters.fill("cloud")
    clusters.press("Tab")  # a change: the script asks the server again
    expect(suggestions).to_have_count(1)
    assert suggested() == ["cloud-data"]
    expect(shown).to_contain_text("on cloud, where this may run")
    clusters.fill(where["home-data"])
    clusters.press("Tab")
    expect(shown).to_contain_text(f"on {where['home-data']}, where this may run")
    assert suggested() == ["home-data"]
    page.screenshot(path=str(artifacts / "job-form-volume-choices.png"), full_page=True)

    # No cluster named and the cloud's claim chosen: the work is pinned there, and the form says so.
    clusters.fill("")
    page.locator("#volume-claim-0").fill("cloud-data")
    page.locator("#volume-claim-0").press("Tab")
    note = page.get_by_test_id("volume-rows").locator('[data-role="volume-where"]')
    expect(note).to_have_text(f"Where it may run: its volumes are on cloud, so it cannot run on {where['home-data']}.")
    assert suggested() == ["cloud-data"]
    page.screenshot(path=str(artifacts / "job-form-volume-pinned.png"), full_page=True)
