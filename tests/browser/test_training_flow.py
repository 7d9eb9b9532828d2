"""A real training run, end to end in Chromium, as a team lead would do it: store a team secret and a credential
for the team's private registry, submit a job that pulls its image from that registry, reads a published dataset
read-only, writes checkpoints to a team claim and gets the secret as a variable; follow its log live; resubmit it
with a change from the form filled from it; and read the first job's log after its pod is gone.

The simulated cluster (the demo scenario, whose registry.example.com is private and accepts only the credential
typed here) runs on a hand-moved clock; the test runs the job cycle as the Celery beat would. Expected values come
from the cluster's objects and the database rows the pages are about."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from gpus.reconcile import sync_inventory
from jobs.choices import JobState
from jobs.cycle.run import run_cycle
from jobs.models import Job, JobLog, RegistryCredential, TeamSecret
from jobs.storage import volumes
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login
from .flows import give_quotas, submit_job_form

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

SECRET_VALUE = "wandb-key-7f3a9c"
REGISTRY_TOKEN = "demo-registry-token"  # what the demo scenario's private registry accepts for ci-bot
IMAGE = "registry.example.com/vision/detector:2.1"


@pytest.fixture
def sim(tmp_path, monkeypatch, settings):
    settings.PORTAL_LIVE_POLL_SECONDS = 1
    settings.PORTAL_LOG_FOLLOW_SECONDS = 3
    clock = SimClock()
    cluster = SimulatedCluster(tmp_path / "training.json", scenario=DEMO_SCENARIO, clock=clock)
    cluster.watch_poll_interval = 0.1
    sync_inventory(cluster)
    for where in ("gpus.fleet.get_backend", "jobs.storage.secrets.get_backend"):
        monkeypatch.setattr(where, lambda: cluster)
    return cluster, clock


def _run_until(cluster, clock, job: Job, state: str, step: float = 2, tries: int = 15) -> None:
    for _ in range(tries):
        clock.advance(step)
        run_cycle(cluster, now=clock.now)
        job.refresh_from_db()
        if job.state == state:
            return
    raise AssertionError(f"job #{job.pk} is {job.state} ({job.wait_message}), not {state}")


def test_a_lead_runs_training_with_data_a_secret_and_a_private_image_follows_it_and_resubmits_it(
    new_page, live_server, people, sim, artifacts
):
    cluster, clock = sim
    vision = people["vision"]
    h100 = give_quotas(people)["h100"].resource_class
    # The admin's part: the dataset published to the team, and a claim for checkpoints in its namespace.
    dataset = volumes.save_dataset(
        people["admin"],
        {"name": "imagenet", "source": "nfs", "server": "nfs.datasets.internal", "path": "/exports/imagenet",
         "capacity_gib": 150},
        [vision],
    )  # fmt: skip
    cluster.ensure_namespace(vision.namespace)
    cluster.ensure_pvc(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": vision.namespace},
            "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "500Gi"}}},
        }
    )
    volumes.reconcile_volumes(cluster)

    page = new_page()
    login(page, "alice")

    # A team secret and a registry credential, from the team's secrets page; the values are never shown back.
    page.goto(f"/teams/{vision.slug}/secrets/")
    new_secret = page.get_by_test_id("new-secret")
    new_secret.get_by_label("Name").fill("wandb")
    new_secret.get_by_label("Values").fill(f"token={SECRET_VALUE}")
    with page.expect_navigation():
        new_secret.get_by_role("button", name="Store secret").click()
    expect(page.get_by_test_id("team-secrets")).to_contain_text("wandb")
    new_registry = page.get_by_test_id("new-registry")
    new_registry.get_by_label("Registry").fill("registry.example.com")
    new_registry.get_by_label("Username").fill("ci-bot")
    new_registry.get_by_label("Token").fill(REGISTRY_TOKEN)
    with page.expect_navigation():
        new_registry.get_by_role("button", name="Store credential").click()
    expect(page.get_by_test_id("registry-credentials")).to_contain_text("registry.example.com")
    assert SECRET_VALUE not in page.content() and REGISTRY_TOKEN not in page.content()
    assert TeamSecret.objects.get(team=vision).keys == ["token"]
    credential = RegistryCredential.objects.get(team=vision)
    page.screenshot(path=artifacts / "training-secrets.png", full_page=True)

    # The job: private image, dataset read-only, checkpoints read-write, the secret as WANDB_API_KEY.
    page.goto("/jobs/new/")
    page.get_by_label("Name", exact=True).fill("detector-train")
    page.get_by_label("Image").fill(IMAGE)
    page.get_by_label("Command").fill("python train.py --data /data/imagenet --checkpoints /checkpoints --epochs 90")
    page.get_by_label("Resource class").select_option(str(h100.pk))
    page.get_by_label("Environment from secrets").fill("WANDB_API_KEY=wandb/token")
    page.locator("#volume-claim-0").fill(dataset.claim_name)
    page.locator("#volume-path-0").fill("/data/imagenet")
    page.locator("#volume-ro-0").check()
    page.locator("#volume-claim-1").fill("checkpoints")
    page.locator("#volume-path-1").fill("/checkpoints")
    submit_job_form(page)
    job = Job.objects.get(name="detector-train")
    assert job.volumes == [
        {"claim": dataset.claim_name, "mount_path": "/data/imagenet", "read_only": True},
        {"claim": "checkpoints", "mount_path": "/checkpoints", "read_only": False},
    ]
    assert job.secret_env == [{"name": "WANDB_API_KEY", "secret": "wandb", "key": "token"}]
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.QUEUED.label)
    expect(page.locator('[data-role="secret-refs"]')).to_have_text("WANDB_API_KEY from wandb/token")
    expect(page.locator('[data-role="volumes"] li')).to_have_count(2)
    page.evaluate("window.__sameDocument = true")

    # It is admitted, its image is pulled with the team's credential and it runs; the page follows by itself.
    run_cycle(cluster, now=clock.now)
    _run_until(cluster, clock, job, JobState.RUNNING)
    [pod] = [p for p in cluster.list_pods(vision.namespace) if p["metadata"]["name"] == job.pod_name]
    spec = pod["spec"]
    assert spec["imagePullSecrets"] == [{"name": credential.secret_name}]
    claims = {v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v}
    assert claims == {dataset.claim_name, "checkpoints"}
    env = spec["containers"][0]["env"]
    assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "token"}}} in env
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.RUNNING.label)
    log = page.get_by_test_id("logs").locator('pre[data-role="log"]')
    expect(log).to_have_attribute("data-following", "open")
    for _ in range(3):
        clock.advance(20)
        run_cycle(cluster, now=clock.now)
        newest = cluster.pod_logs(vision.namespace, job.pod_name, tail_lines=5).splitlines()[-1]
        expect(log).to_contain_text(newest)
    assert page.evaluate("window.__sameDocument === true")  # followed live: never reloaded
    page.screenshot(path=artifacts / "training-following.png", full_page=True)

    # Resubmit with changes: the form comes filled from the job; the lead makes it preemptible with 2 GPUs.
    with page.expect_navigation():
        page.get_by_test_id("resubmit-with-changes").click()
    expect(page.get_by_label("Image")).to_have_value(IMAGE)
    expect(page.get_by_label("Environment from secrets")).to_have_value("WANDB_API_KEY=wandb/token")
    expect(page.locator("#volume-claim-0")).to_have_value(dataset.claim_name)
    expect(page.locator("#volume-ro-0")).to_be_checked()
    expect(page.locator("#volume-claim-1")).to_have_value("checkpoints")
    page.get_by_label("Name", exact=True).fill("detector-train-2")
    page.get_by_label("GPUs (per worker)").fill("2")
    page.get_by_label("Preemptible").check()
    submit_job_form(page)
    second = Job.objects.get(name="detector-train-2")
    assert (second.count, second.preemptible, second.image) == (2, True, IMAGE)
    assert second.volumes == job.volumes and second.secret_env == job.secret_env
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.QUEUED.label)

    # The first job is cancelled; the next cycle keeps its log and deletes the pod; its page shows the log.
    before_gone = cluster.pod_logs(vision.namespace, job.pod_name, tail_lines=10_000).splitlines()
    page.goto(f"/jobs/{job.pk}/")
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_role("button", name="Cancel job").click()
    clock.advance(1)
    run_cycle(cluster, now=clock.now)
    assert job.pod_name not in {p["metadata"]["name"] for p in cluster.list_pods(vision.namespace)}
    kept = JobLog.objects.get(job=job)
    assert kept.text.splitlines() == before_gone
    page.reload()
    section = page.get_by_test_id("logs")
    expect(section.locator('[data-role="log-source"]')).to_contain_text(f"Kept log of pod {job.pod_name}")
    assert section.locator('pre[data-role="log"]').inner_text().splitlines() == before_gone
    expect(section).not_to_contain_text("not found")
    page.screenshot(path=artifacts / "training-kept-log.png", full_page=True)
