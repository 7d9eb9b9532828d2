"""Datasets and volumes in a real Chromium: an admin publishes a dataset to a team from the Datasets page; a
member of that team sees it on the Volumes page, submits a job mounting it read-only and a team claim
read-write (a hostile path first, refused with the reason next to its row), and the job page lists the mounts.
Expected values come from the rows the pages are about."""

import pytest

from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.models import Dataset, Job, TeamVolume
from jobs.storage import volumes
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


def test_admin_publishes_a_dataset_and_a_member_mounts_it(new_page, live_server, people, tmp_path, artifacts):
    vision = people["vision"]
    cluster = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    sync_inventory(cluster)
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], vision, rc, 4, 8)
    cluster.ensure_namespace(vision.namespace)
    cluster.ensure_pvc(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": vision.namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "500Gi"}}},
        }
    )

    # The admin publishes imagenet to team vision from the Datasets page.
    admin = new_page()
    login(admin, "admin")
    admin.get_by_role("navigation", name="Main").get_by_role("link", name="Datasets").click()
    expect(admin.get_by_role("heading", name="Datasets", exact=True)).to_be_visible()
    form = admin.get_by_test_id("dataset-form")
    form.get_by_label("Name").fill("imagenet")
    form.get_by_label("Description").fill("ILSVRC 2012, train and val")
    form.get_by_label("Server or driver").fill("nfs.example.internal")
    form.get_by_label("Export path or volume handle").fill("/exports/datasets/imagenet")
    form.get_by_label("Size (GiB)").fill("150")
    form.get_by_label(vision.name).check()
    with admin.expect_navigation():
        form.get_by_role("button", name="Publish").click()
    expect(admin.locator(".message-success")).to_contain_text(f"Dataset imagenet is published to {vision.name}")
    dataset = Dataset.objects.get(name="imagenet")
    assert list(dataset.teams.all()) == [vision]
    volumes.reconcile_volumes(cluster)  # what the kicked reconcile does in a worker
    admin.reload()
    row = admin.locator('[data-testid="dataset-table"] tr[data-dataset="imagenet"]')
    claim = TeamVolume.objects.get(team=vision, name=dataset.claim_name)
    expect(row.locator(f'[data-team="{vision.slug}"]')).to_have_text(vision.name)
    expect(row.locator('[data-role="teams"] .badge')).to_have_text(claim.phase)
    admin.screenshot(path=str(artifacts / "datasets-admin.png"), full_page=True)

    # A member of vision sees it on the Volumes page, read-only, with the team's own claim.
    page = new_page()
    login(page, "alice")
    page.goto("/jobs/new/")
    with page.expect_navigation():
        page.get_by_test_id("volume-rows").get_by_role("link", name="Volumes").click()
    published = page.get_by_test_id("team-datasets").locator('tr[data-dataset="imagenet"]')
    expect(published).to_contain_text(dataset.claim_name)
    expect(published).to_contain_text("read-only")
    expect(page.locator('[data-testid="volume-table"] tr[data-volume="checkpoints"]')).to_contain_text("Team claim")
    expect(page.locator(f'[data-testid="volume-table"] tr[data-volume="{dataset.claim_name}"]')).to_contain_text(
        "Dataset imagenet"
    )
    page.screenshot(path=str(artifacts / "volumes-page.png"), full_page=True)

    # The job form: the dataset read-only at /data, the claim at a path over /etc first.
    page.goto("/jobs/new/")
    page.get_by_label("Name", exact=True).fill("resnet-train")
    page.get_by_label("Image").fill("nvcr.io/nvidia/pytorch:24.01-py3")
    page.get_by_label("Command").fill("python train.py --data /data --out /checkpoints")
    page.get_by_label("Resource class").select_option(str(rc.pk))
    page.locator("#volume-claim-0").fill(dataset.claim_name)
    page.locator("#volume-path-0").fill("/data")
    page.locator("#volume-ro-0").check()
    page.locator("#volume-claim-1").fill("checkpoints")
    page.locator("#volume-path-1").fill("/etc/checkpoints")
    page.get_by_role("button", name="Add a volume").click()
    expect(page.locator("[data-volume-row]")).to_have_count(3)
    expect(page.locator("#volume-claim-2")).to_have_value("")
    with page.expect_navigation():
        page.get_by_role("button", name="Submit job").click()
    assert not Job.objects.exists()
    expect(page.locator("#volume-errors-1")).to_contain_text("'/etc/checkpoints' is inside /etc")
    expect(page.locator("#volume-errors-0")).to_have_count(0)
    expect(page.get_by_test_id("volume-errors")).to_contain_text("Correct volume row 2")
    expect(page.locator("#volume-path-1")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#volume-ro-0")).to_be_checked()  # the rows come back as typed
    page.locator("#volume-errors-1").scroll_into_view_if_needed()
    page.screenshot(path=str(artifacts / "job-form-volume-error.png"), full_page=True)

    page.locator("#volume-path-1").fill("/checkpoints")
    with page.expect_navigation():
        page.get_by_role("button", name="Submit job").click()
    job = Job.objects.get(name="resnet-train")
    assert page.url == live_server.url + job.get_absolute_url()
    assert job.volumes == [
        {"claim": dataset.claim_name, "mount_path": "/data", "read_only": True},
        {"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False},
    ]
    mounts = page.get_by_test_id("job-request").locator('[data-role="volumes"]')
    expect(mounts.locator(f'[data-claim="{dataset.claim_name}"]')).to_have_text(
        f"{dataset.claim_name} at /data read-only"
    )
    expect(mounts.locator('[data-claim="checkpoints"]')).to_have_text("checkpoints at /checkpoints read-write")
    page.screenshot(path=str(artifacts / "job-page-mounts.png"), full_page=True)

    # The notebook launch form offers the same rows, with the team's claims as suggestions.
    page.goto("/notebooks/")
    rows = page.get_by_test_id("notebook-launch").get_by_test_id("volume-rows")
    expect(rows.locator("[data-volume-row]")).to_have_count(1)
    suggestions = rows.locator("#team-volumes option")
    assert sorted(suggestions.evaluate_all("os => os.map(o => o.value)")) == sorted(
        TeamVolume.objects.filter(team=vision).values_list("name", flat=True)
    )
    page.screenshot(path=str(artifacts / "notebook-form-volumes.png"), full_page=True)
