"""An inference service in a real Chromium against the simulated cluster: alice fills in "New service" (image, port,
an HTTP readiness check, 1 H100 per replica, 2 to 4 replicas scaled on a per-replica requests_per_second of 20),
finds it in the list, opens it and watches (the page refreshes itself while the test runs the cycles) its two
replicas become ready with the in-cluster address and health shown; she changes the image with "Change image"
and follows the rollout to revision 2 (updated = ready = available = desired), then rolls back, which is
revision 3 running the old image again. Screenshots of the form, the running service and the finished rollout
go to test-artifacts/, the detail page also at a phone's width (nothing may stick out of the viewport).

Expected values come from the service's row and the simulated cluster's Deployment and pods, never constants
copied from the page. Without the service cycle (admission of the minimum, rendering, the simulated Deployment
controller and prober) no replica becomes ready and the test fails at that step."""

from __future__ import annotations

import pytest

from cluster.sim import SimulatedCluster
from gpus.reconcile import sync_inventory
from jobs.choices import ServiceMetric, ServiceState
from jobs.cycle.run import run_cycle
from jobs.models.service import InferenceService
from jobs.service.summary import dns_name, rollout
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO

from .conftest import login
from .flows import give_quotas

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

OLD_IMAGE = "vllm/vllm-openai:v0.4.0"
NEW_IMAGE = "vllm/vllm-openai:v0.4.2"
SERVICE_LABEL = "gpu-portal.io/service"


@pytest.fixture
def sim(tmp_path, settings):
    settings.PORTAL_LIVE_POLL_SECONDS = 1
    # 03:00 UTC, the night's trough of the simulated traffic: the HPA asks for no more than the minimum, whatever
    # hour the suite runs at (in the demo's afternoon it would ask for a third replica).
    clock = SimClock(hour=3)
    cluster = SimulatedCluster(tmp_path / "service.json", scenario=DEMO_SCENARIO, clock=clock)
    cluster.watch_poll_interval = 0.1
    sync_inventory(cluster)
    return cluster, clock


def _fresh(service: InferenceService) -> InferenceService:
    return InferenceService.objects.select_related("job", "team").get(pk=service.pk)


def _replica_pods(cluster, service) -> list[dict]:
    return [
        pod for pod in cluster.list_pods(service.team.namespace)
        if pod["metadata"]["labels"].get(SERVICE_LABEL) == service.name
        and pod["status"].get("phase") not in ("Succeeded", "Failed")
    ]  # fmt: skip


def _cycle_until(cluster, clock, service, done, times: int = 30) -> InferenceService:
    """Run cycles 10 simulated seconds apart until ``done(service)``; the service as the last cycle left it."""
    for _ in range(times):
        clock.advance(10)
        run_cycle(cluster, now=clock.now)
        service = _fresh(service)
        if done(service):
            return service
    return service


def _settled(revision: int):
    def done(service: InferenceService) -> bool:
        progress = rollout(service)
        return (
            service.revision == revision
            and progress.complete
            and progress.updated == progress.ready == progress.available == progress.desired
        )

    return done


def _deployment_image(cluster, service) -> str:
    deployment = cluster.get_deployment(service.team.namespace, service.name)
    return deployment["spec"]["template"]["spec"]["containers"][0]["image"]


def _assert_fits(page, width: int) -> None:
    """Nothing on the page is wider than the viewport (no sideways scrolling on a phone), and no table hides
    columns behind a scroll box of its own."""
    scroll_width = page.evaluate("document.documentElement.scrollWidth")
    assert scroll_width <= width, f"{page.url}: the page is {scroll_width} px wide in a {width} px viewport"
    hidden = page.evaluate(
        """[...document.querySelectorAll('.table-wrap')]
             .filter(wrap => wrap.scrollWidth > wrap.clientWidth + 1)
             .map(wrap => (wrap.querySelector('table') || wrap).dataset.testid)"""
    )
    assert hidden == [], f"{page.url}: these tables scroll sideways at {width} px: {hidden}"


def _assert_rollout(page, service: InferenceService) -> None:
    """The Health and rollout card shows the service's rollout numbers and revision."""
    progress = rollout(service)
    card = page.get_by_test_id("service-health")
    line = card.get_by_test_id("rollout")
    expect(line).to_have_attribute("data-revision", str(service.revision))
    expect(line).to_have_attribute("data-complete", "true")
    expect(line).to_contain_text(
        f"{progress.updated} updated · {progress.ready} ready · {progress.available} available of {progress.desired}"
    )
    expect(card.locator(".card-head .muted")).to_have_text(f"revision {service.revision}")
    expect(card.get_by_test_id("service-image")).to_have_text(service.job.image)


def test_alice_starts_a_service_watches_it_become_ready_rolls_out_a_new_image_and_rolls_back(
    new_page, live_server, people, sim, artifacts
):
    cluster, clock = sim
    h100 = give_quotas(people)["h100"].resource_class
    page = new_page()
    login(page, "alice")

    page.get_by_role("navigation", name="Main").get_by_role("link", name="Services").click()
    with page.expect_navigation():
        page.get_by_test_id("service-new").click()
    form = page.get_by_test_id("service-form")
    form.get_by_label("Name", exact=True).fill("chat")
    form.get_by_label("Image").fill(OLD_IMAGE)
    form.get_by_label("Command").fill("python -m vllm.entrypoints.openai.api_server --port 8000")
    form.get_by_label("Port", exact=True).first.fill("8000")
    readiness = page.get_by_test_id("readiness")
    readiness.get_by_label("Check").select_option("http")
    readiness.get_by_label("Path").fill("/health")
    readiness.get_by_label("Initial delay (seconds)").fill("5")
    form.get_by_label("Resource class").select_option(str(h100.pk))
    form.get_by_label("GPUs per replica").fill("1")
    scaling = form.get_by_test_id("autoscaling")
    scaling.get_by_label("Minimum replicas").fill("2")
    scaling.get_by_label("Maximum replicas").fill("4")
    scaling.get_by_label("Scale on").select_option(ServiceMetric.PODS.value)
    scaling.get_by_label("Metric name").fill("requests_per_second")
    scaling.get_by_label("Target").fill("20")
    page.screenshot(path=artifacts / "service-form.png", full_page=True)
    with page.expect_navigation():
        page.get_by_role("button", name="Start service").click()

    service = InferenceService.objects.select_related("job", "team").get(name="chat")
    job = service.job
    assert (service.owner, service.team, job.resource_class, job.count) == (people["alice"], people["vision"], h100, 1)
    assert (service.min_replicas, service.max_replicas, service.port) == (2, 4, 8000)
    assert (service.metric, service.metric_name) == (ServiceMetric.PODS, "requests_per_second")
    assert service.metric_target == 20
    assert service.readiness["type"] == "http" and service.readiness["path"] == "/health"
    assert job.image == OLD_IMAGE and service.revision == 1
    assert page.url == live_server.url + service.get_absolute_url()
    expect(page.locator(".messages")).to_contain_text("is queued")

    # The list shows it, queued, with its size and address.
    page.get_by_role("link", name="Services", exact=True).first.click()
    row = page.get_by_test_id("service-list").locator(f'tr[data-service="{service.name}"]')
    expect(row).to_contain_text(f"2–4 × 1 {h100.display_name}")
    expect(row.locator("code")).to_have_text(dns_name(service))
    with page.expect_navigation():
        row.get_by_role("link", name=service.name).click()
    assert page.url == live_server.url + service.get_absolute_url()

    # The cycles admit the minimum and the simulated kubelets and prober make both replicas ready; the page
    # follows by itself.
    service = _cycle_until(cluster, clock, service, _settled(1))
    pods = _replica_pods(cluster, service)
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    assert rollout(service).desired == 2 and service.observed.get("ready") == 2, service.observed
    ready = page.get_by_test_id("ready-count")
    expect(ready).to_have_text("2 of 2")
    expect(page.get_by_test_id("dns-name")).to_have_text(dns_name(service))
    expect(page.get_by_test_id("service-state")).to_have_text(ServiceState.ACTIVE.label)
    replicas = page.get_by_test_id("replica-table")
    for pod in pods:
        line = replicas.locator(f'tr[data-pod="{pod["metadata"]["name"]}"]')
        expect(line).to_have_attribute("data-ready", "true")
        expect(line).to_contain_text(pod["spec"]["nodeName"])
    _assert_rollout(page, service)
    readiness_text = f"HTTP GET /health on port {service.port}, after {service.readiness['initial_delay_seconds']} s"
    expect(page.get_by_test_id("service-health")).to_contain_text(readiness_text)
    page.screenshot(path=artifacts / "service-detail.png", full_page=True)

    # Change image: revision 2 rolls out replica by replica until every replica runs the new image.
    change = page.get_by_test_id("change-image")
    expect(change.get_by_label("Image")).to_have_value(OLD_IMAGE)
    change.get_by_label("Image").fill(NEW_IMAGE)
    with page.expect_navigation():
        change.get_by_role("button", name="Change image").click()
    expect(page.locator(".messages")).to_contain_text("revision 2")
    service = _fresh(service)
    assert service.revision == 2 and service.job.image == NEW_IMAGE
    # Until the cycle has rolled the Deployment the page says revision 2 is in progress, not revision 1's numbers.
    line = page.get_by_test_id("rollout")
    expect(line).to_have_attribute("data-revision", "2")
    expect(line).to_have_attribute("data-complete", "false")
    expect(line).to_contain_text("in progress")
    service = _cycle_until(cluster, clock, service, lambda s: _deployment_image(cluster, s) == NEW_IMAGE, times=1)
    expect(line).to_have_attribute("data-complete", "false")
    service = _cycle_until(cluster, clock, service, _settled(2))
    assert _deployment_image(cluster, service) == NEW_IMAGE
    images = [p["spec"]["containers"][0]["image"] for p in _replica_pods(cluster, service)]
    assert images == [NEW_IMAGE] * rollout(service).desired, images
    _assert_rollout(page, service)
    expect(page.get_by_test_id("ready-count")).to_have_text("2 of 2")
    page.screenshot(path=artifacts / "service-rollout.png", full_page=True)

    # Roll back (after the page's confirmation): revision 3 runs the old image again.
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_test_id("service-rollback").click()
    expect(page.locator(".messages")).to_contain_text("revision 3")
    service = _fresh(service)
    assert service.revision == 3 and service.job.image == OLD_IMAGE
    service = _cycle_until(cluster, clock, service, _settled(3))
    assert _deployment_image(cluster, service) == OLD_IMAGE
    images = [p["spec"]["containers"][0]["image"] for p in _replica_pods(cluster, service)]
    assert images == [OLD_IMAGE] * rollout(service).desired, images
    _assert_rollout(page, service)

    # At a phone's width the running service's page has nothing cut off or sticking out.
    phone = new_page(width=390, height=844)
    login(phone, "alice")
    for url in (service.get_absolute_url(), "/services/", "/services/new/"):
        phone.goto(url)
        _assert_fits(phone, 390)
    phone.goto(service.get_absolute_url())
    phone.screenshot(path=artifacts / "service-detail-phone.png", full_page=True)
