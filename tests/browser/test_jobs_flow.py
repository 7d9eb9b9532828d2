"""Jobs and team quotas in a real Chromium: submitting from the form (and being told what is wrong with a bad
request), a job's page through its life, cancelling, the quota editor, and who may see what. Expected values
come from the database rows the pages are about, so a wrong number on a bar or a lost error fails the test."""

import re

import pytest

from accounts.choices import MembershipRole
from accounts.models import Membership
from cluster.sim import SimulatedCluster
from core.models import AuditEvent
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job, Quota
from jobs.usage import held_units
from jobs.validation import check_request
from tests.clock import SimClock
from tests.sim_objects import DEMO_SCENARIO, H100

from .conftest import login
from .flows import give_quotas, submit_job_form

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


@pytest.fixture
def quotas(inventory, people):
    return give_quotas(people)


def _fill_job_form(page, *, name: str, command: str, count: int, resource_class: ResourceClass) -> None:
    page.goto("/jobs/new/")
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Image").fill("nvidia/cuda:12.2.2-runtime-ubuntu22.04")
    page.get_by_label("Command").fill(command)
    page.get_by_label("Environment", exact=True).fill("EPOCHS=10\n# a comment\nDATA_DIR=/data/imagenet")
    page.get_by_label("Resource class").select_option(str(resource_class.pk))
    page.get_by_label("GPUs (per worker)").fill(str(count))


def _assert_quota_bar(bar, quota: Quota) -> None:
    """The bar shows the quota's numbers and its segments are their share of the limit."""
    used = held_units([quota.team_id], [quota.resource_class_id]).get((quota.team_id, quota.resource_class_id), 0)
    expect(bar.locator('[data-role="used"]')).to_have_text(str(used))
    expect(bar.locator('[data-role="guaranteed"]')).to_have_text(str(quota.guaranteed))
    expect(bar.locator('[data-role="limit"]')).to_have_text(str(quota.limit))
    track = bar.locator('[data-role="bar"]').bounding_box()["width"]
    within = bar.locator('[data-role="bar-within"]').bounding_box()["width"]
    free = bar.locator('[data-role="bar-guaranteed-free"]').bounding_box()["width"]
    mark = bar.locator('[data-role="guarantee-mark"]').bounding_box()
    assert within / track == pytest.approx(min(used, quota.guaranteed) / quota.limit, abs=0.01)
    assert free / track == pytest.approx(max(0, quota.guaranteed - used) / quota.limit, abs=0.01)
    bar_x = bar.locator('[data-role="bar"]').bounding_box()["x"]
    assert (mark["x"] + mark["width"] / 2 - bar_x) / track == pytest.approx(quota.guaranteed / quota.limit, abs=0.01)


def test_member_sees_her_quota_and_submits_a_job_that_is_queued(page, live_server, quotas, people, artifacts):
    alice, vision = people["alice"], people["vision"]
    h100 = quotas["h100"].resource_class
    login(page, "alice")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs").click()
    with page.expect_navigation():
        page.get_by_role("link", name="Submit a job").click()

    panel = page.locator(f'[data-testid="team-quotas"][data-team="{vision.slug}"]')
    bars = panel.get_by_test_id("quota")
    assert set(bars.evaluate_all("els => els.map(e => e.dataset.classKey)")) == {
        q.resource_class.key for q in Quota.objects.filter(team=vision)
    }
    for quota in Quota.objects.filter(team=vision):
        _assert_quota_bar(panel.locator(f'[data-testid="quota"][data-class-key="{quota.resource_class.key}"]'), quota)
    budget = panel.locator(f'[data-testid="quota"][data-class-key="{H100}"]').get_by_test_id("budget")
    expect(budget.locator('[data-role="budget"]')).to_have_text(f"{quotas['h100'].monthly_gpu_hours:.1f}")
    expect(budget.locator('[data-role="used-hours"]')).to_have_text("0.0")
    # Only classes the team has quota for are offered, with what is free in the cluster.
    offered = page.get_by_label("Resource class").locator("option")
    assert set(offered.evaluate_all("os => os.map(o => +o.value)")) == set(
        Quota.objects.filter(team=vision).values_list("resource_class_id", flat=True)
    )
    expect(page.get_by_label("Resource class").locator(f'option[value="{h100.pk}"]')).to_have_text(
        f"{h100.display_name} · {h100.free} free now"
    )

    _fill_job_form(page, name="resnet-smoke", command="sleep 5", count=1, resource_class=h100)
    page.screenshot(path=artifacts / "job-submit-form.png", full_page=True)
    submit_job_form(page)

    job = Job.objects.get(owner=alice)
    assert page.url == live_server.url + job.get_absolute_url()
    assert (job.team, job.resource_class, job.count, job.state) == (vision, h100, 1, JobState.QUEUED)
    assert job.command == ["sleep", "5"]
    assert job.env == [{"name": "EPOCHS", "value": "10"}, {"name": "DATA_DIR", "value": "/data/imagenet"}]
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.QUEUED.label)
    expect(page.locator(".message-success")).to_contain_text(f"Job #{job.pk} {job.name} was queued")
    wait = page.get_by_test_id("wait-box")
    expect(wait).to_contain_text("Why is this waiting?")
    expect(wait.locator('[data-role="message"]')).to_have_text(job.wait_message)
    expect(page.get_by_test_id("job-request")).to_contain_text("sleep 5")
    expect(page.get_by_test_id("job-request")).to_contain_text("DATA_DIR=/data/imagenet")
    expect(page.get_by_test_id("timeline").locator("li")).to_have_count(job.events.count())
    expect(page.get_by_test_id("logs")).to_contain_text("No log yet: the job waits in the queue and has no pod.")
    page.screenshot(path=artifacts / "job-queued.png", full_page=True)

    # The list shows it too, filtered by team and state.
    page.goto(f"/jobs/?team={vision.slug}&state=queued")
    row = page.locator(f'[data-testid="job-table"] tr[data-job="{job.pk}"]')
    expect(row.locator('[data-role="state"]')).to_have_text(JobState.QUEUED.label)
    expect(row).to_contain_text(f"1 × {h100.display_name}")
    expect(row.locator('[data-role="wait"]')).to_have_text(job.wait_message)
    page.screenshot(path=artifacts / "job-list.png", full_page=True)
    page.goto(f"/jobs/?team={vision.slug}&state=running")
    expect(page.locator('[data-testid="job-table"] tbody tr')).to_have_count(0)


def test_member_of_two_teams_picks_the_team_and_is_offered_its_classes(page, live_server, quotas, people):
    nlp = people["nlp"]
    a10 = quotas["a10"].resource_class
    actions.set_quota(people["admin"], nlp, a10, 1, 2)
    Membership.objects.create(user=people["bob"], team=people["vision"], role=MembershipRole.MEMBER)
    login(page, "bob")
    page.goto("/jobs/new/")
    expect(page.get_by_test_id("team-quotas")).to_have_count(2)
    classes = page.get_by_label("Resource class")

    def offered() -> set[int]:
        return set(classes.locator("option:not([disabled])").evaluate_all("os => os.map(o => +o.value)"))

    page.get_by_label("Team").select_option(str(nlp.pk))
    assert offered() == set(Quota.objects.filter(team=nlp).values_list("resource_class_id", flat=True)) == {a10.pk}
    expect(classes).to_have_value(str(a10.pk))
    page.get_by_label("Team").select_option(str(people["vision"].pk))
    assert offered() == set(Quota.objects.filter(team=people["vision"]).values_list("resource_class_id", flat=True))

    page.get_by_label("Team").select_option(str(nlp.pk))
    page.get_by_label("Name", exact=True).fill("shared-gpu")
    page.get_by_label("Image").fill("nvidia/cuda:12.2.2-runtime-ubuntu22.04")
    page.get_by_label("Command").fill("sleep 5")
    submit_job_form(page)
    job = Job.objects.get(name="shared-gpu")
    assert (job.team, job.resource_class, job.owner) == (nlp, a10, people["bob"])


def test_double_submitting_the_same_form_makes_one_job(page, live_server, quotas, people):
    h100 = quotas["h100"].resource_class
    login(page, "alice")
    _fill_job_form(page, name="twice", command="sleep 5", count=1, resource_class=h100)
    sent = page.evaluate("Object.fromEntries(new FormData(document.querySelector('[data-testid=job-form]')))")
    page.get_by_role("button", name="Submit job").dblclick()
    page.wait_for_url(re.compile(r".*/jobs/\d+/$"))
    again = page.request.post("/jobs/new/", form=sent)  # the same form, token included, sent once more

    job = Job.objects.get(owner=people["alice"], name="twice")
    assert Job.objects.filter(owner=people["alice"]).count() == 1
    assert job.idempotency_key == sent["idempotency_key"]
    assert page.url == again.url == live_server.url + job.get_absolute_url()
    assert "no second job" in again.text()


def test_bad_request_shows_errors_next_to_the_fields_and_stores_nothing(page, live_server, quotas, people, artifacts):
    h100 = quotas["h100"].resource_class
    login(page, "alice")
    _fill_job_form(page, name="ResNet-Train", command="python train.py", count=9, resource_class=h100)
    submit_job_form(page)

    assert page.url == live_server.url + "/jobs/new/"
    assert not Job.objects.exists()
    expect(page.get_by_test_id("form-errors")).to_be_visible()
    name_field = page.locator('[data-field="name"]')
    expect(name_field.locator(".errorlist")).to_contain_text("lowercase letters")
    expect(page.get_by_label("Name", exact=True)).to_have_attribute("aria-invalid", "true")
    # The count is refused for the reasons the service gives: over the team's limit, more than any node holds.
    expected = check_request(
        team=people["vision"], resource_class=h100, count=9, cpu_millicores=2000, memory_mb=8192,
        image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", user=people["alice"],
    )  # fmt: skip
    assert set(expected) == {"count"} and len(expected["count"]) == 2
    count_errors = page.locator('[data-field="count"] .errorlist li')
    expect(count_errors).to_have_text(expected["count"])
    expect(page.locator('[data-field="image"] .errorlist')).to_have_count(0)
    # What was typed is kept.
    expect(page.get_by_label("Name", exact=True)).to_have_value("ResNet-Train")
    expect(page.get_by_label("Command")).to_have_value("python train.py")
    page.screenshot(path=artifacts / "job-submit-errors.png", full_page=True)

    # Fixing the two fields is enough to queue it.
    page.get_by_label("Name", exact=True).fill("resnet-train")
    page.get_by_label("GPUs (per worker)").fill("2")
    submit_job_form(page)
    job = Job.objects.get()
    assert (job.name, job.count) == ("resnet-train", 2)
    assert page.url == live_server.url + job.get_absolute_url()


def test_admin_changes_a_quota_and_a_limit_below_the_guarantee_is_refused(page, live_server, quotas, people, artifacts):
    quota = quotas["h100"]
    new_limit = quota.limit + 4
    login(page, "admin")
    page.goto(f"/teams/{quota.team.slug}/")
    row = page.locator(f'[data-testid="quota-row"][data-class-key="{quota.resource_class.key}"]')
    _assert_quota_bar(row.get_by_test_id("quota"), quota)

    row.get_by_label("Limit", exact=True).fill(str(new_limit))
    with page.expect_navigation():
        row.get_by_role("button", name="Save").click()

    quota.refresh_from_db()
    assert quota.limit == new_limit and quota.updated_by == people["admin"]
    event = AuditEvent.objects.filter(action="quota.set", object_id=str(quota.pk)).order_by("-when", "-id").first()
    assert event.actor == people["admin"]
    assert (event.before["limit"], event.after["limit"]) == (new_limit - 4, new_limit)
    expect(page.locator(".message-success")).to_contain_text("saved")
    row = page.locator(f'[data-testid="quota-row"][data-class-key="{quota.resource_class.key}"]')
    expect(row.get_by_test_id("quota")).to_have_attribute("data-limit", str(new_limit))
    _assert_quota_bar(row.get_by_test_id("quota"), quota)
    page.screenshot(path=artifacts / "team-page-admin.png", full_page=True)

    events_before = AuditEvent.objects.filter(action="quota.set").count()
    row.get_by_label("Limit", exact=True).fill(str(quota.guaranteed - 1))
    with page.expect_navigation():
        row.get_by_role("button", name="Save").click()

    row = page.locator(f'[data-testid="quota-row"][data-class-key="{quota.resource_class.key}"]')
    expect(row.locator('[data-field="limit"] .errorlist')).to_have_text(
        f"The limit ({quota.guaranteed - 1}) must be at least the guaranteed amount ({quota.guaranteed})."
    )
    expect(row.get_by_label("Limit", exact=True)).to_have_value(str(quota.guaranteed - 1))  # what was typed, to fix
    before = (quota.guaranteed, quota.limit, quota.monthly_gpu_hours)
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit, quota.monthly_gpu_hours) == before
    assert AuditEvent.objects.filter(action="quota.set").count() == events_before
    page.screenshot(path=artifacts / "team-page-quota-error.png", full_page=True)


def test_admin_adds_and_removes_quotas(page, live_server, quotas, people):
    vision = people["vision"]
    rc = ResourceClass.objects.filter(present=True).exclude(quotas__team=vision).order_by("pk").first()
    login(page, "admin")
    page.goto(f"/teams/{vision.slug}/")
    form = page.get_by_test_id("add-quota")
    form.get_by_label("Resource class").select_option(str(rc.pk))
    form.get_by_label("Guaranteed").fill("1")
    form.get_by_label("Limit", exact=True).fill("3")
    with page.expect_navigation():
        form.get_by_role("button", name="Add quota").click()

    quota = Quota.objects.get(team=vision, resource_class=rc)
    assert (quota.guaranteed, quota.limit, quota.monthly_gpu_hours) == (1, 3, None)
    row = page.locator(f'[data-testid="quota-row"][data-class-key="{rc.key}"]')
    _assert_quota_bar(row.get_by_test_id("quota"), quota)

    # Removing one asks first, then the row and the quota are gone, with an audit event.
    removed = quotas["a10"]
    page.once("dialog", lambda dialog: dialog.accept())
    row = page.locator(f'[data-testid="quota-row"][data-class-key="{removed.resource_class.key}"]')
    with page.expect_navigation():
        row.get_by_role("button", name="Remove quota").click()
    assert not Quota.objects.filter(pk=removed.pk).exists()
    assert AuditEvent.objects.filter(action="quota.delete", object_id=str(removed.pk)).exists()
    expect(page.locator(f'[data-testid="quota-row"][data-class-key="{removed.resource_class.key}"]')).to_have_count(0)


def test_member_cannot_see_another_teams_job_or_team(new_page, live_server, quotas, people):
    job = actions.submit_job(
        people["alice"], people["vision"], quotas["h100"].resource_class,
        dict(name="private", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["sleep", "5"], args=[], env=[],
             count=1, cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=600),
    ).job  # fmt: skip
    page = new_page()
    login(page, "bob")
    assert page.goto(job.get_absolute_url()).status == 404
    assert page.goto(f"/teams/{people['vision'].slug}/").status == 404
    page.goto("/jobs/")
    expect(page.locator(f'tr[data-job="{job.pk}"]')).to_have_count(0)
    # bob's own team page works, but he cannot change quotas there.
    page.goto(f"/teams/{people['nlp'].slug}/")
    expect(page.get_by_role("heading", level=1)).to_have_text(people["nlp"].name)
    expect(page.get_by_test_id("add-quota")).to_have_count(0)


def test_owner_cancels_a_queued_job_from_its_page(page, live_server, quotas, people):
    h100 = quotas["h100"].resource_class
    login(page, "alice")
    _fill_job_form(page, name="to-cancel", command="sleep 600", count=1, resource_class=h100)
    submit_job_form(page)
    job = Job.objects.get(name="to-cancel")
    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    with page.expect_navigation():
        page.get_by_role("button", name="Cancel job").click()

    assert asked and f"#{job.pk}" in asked[0]
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.CANCELLED.label)
    expect(page.get_by_test_id("timeline").locator("li").last).to_contain_text("Cancelled by alice")
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    expect(page.get_by_test_id("wait-box")).to_have_count(0)

    # A cancelled job can be resubmitted as a new one.
    with page.expect_navigation():
        page.get_by_role("button", name="Resubmit").click()
    new = Job.objects.get(resubmitted_from=job)
    assert page.url == live_server.url + new.get_absolute_url()
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.QUEUED.label)


def test_job_runs_to_completion(page, live_server, people, tmp_path, monkeypatch, artifacts):
    from jobs.cycle.run import run_cycle

    clock = SimClock()
    cluster = SimulatedCluster(tmp_path / "clocked.json", scenario=DEMO_SCENARIO, clock=clock)
    sync_inventory(cluster)
    monkeypatch.setattr("gpus.fleet.get_backend", lambda: cluster)  # the job page reads logs from this cluster
    quotas = give_quotas(people)
    login(page, "alice")
    _fill_job_form(page, name="runs-through", command="sleep 5", count=1, resource_class=quotas["h100"].resource_class)
    submit_job_form(page)
    job = Job.objects.get(name="runs-through")
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.QUEUED.label)

    run_cycle(cluster, now=clock.now)  # admitted, placed, workload created
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.node_name
    page.reload()
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.ADMITTED.label)
    expect(page.get_by_test_id("job-placement").get_by_role("link", name=job.node_name)).to_have_attribute(
        "href", f"/nodes/{job.node_name}/"
    )

    for _ in range(10):  # the pod pulls and starts within a few simulated seconds
        clock.advance(2)
        run_cycle(cluster, now=clock.now)
        job.refresh_from_db()
        if job.state != JobState.ADMITTED:
            break
    assert job.state == JobState.RUNNING and job.pod_name
    page.reload()
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.RUNNING.label)
    expect(page.get_by_test_id("wait-box")).to_have_count(0)
    expect(page.get_by_test_id("logs")).to_contain_text(job.pod_name)
    vision, h100 = people["vision"].pk, quotas["h100"].resource_class_id
    team_page_used = held_units([vision], [h100]).get((vision, h100), 0)
    assert team_page_used == 1

    clock.advance(10)  # past the 5 seconds the command sleeps
    run_cycle(cluster, now=clock.now)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.exit_code == 0
    page.reload()
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.SUCCEEDED.label)
    expect(page.get_by_test_id("job-times").locator('[data-role="exit-code"]')).to_have_text("0")
    timeline = page.get_by_test_id("timeline").locator("li")
    assert timeline.evaluate_all("lis => lis.map(li => li.dataset.kind)") == list(
        job.events.values_list("kind", flat=True)
    )
    expect(page.get_by_role("button", name="Cancel job")).to_have_count(0)
    expect(page.get_by_role("button", name="Resubmit")).to_be_visible()
    page.screenshot(path=artifacts / "job-succeeded.png", full_page=True)

    # A second team whose quota is full: its job waits, and its page says why with the numbers.
    nlp, bob = people["nlp"], people["bob"]
    h100 = quotas["h100"].resource_class
    actions.set_quota(people["admin"], nlp, h100, 1, 1)
    request = dict(
        image="nvidia/cuda:12.2.2-runtime-ubuntu22.04", command=["sleep", "600"], args=[], env=[], count=1,
        cpu_millicores=1000, memory_mb=4096, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    actions.submit_job(bob, nlp, h100, {**request, "name": "holds-the-quota"})
    run_cycle(cluster, now=clock.now)
    page.context.clear_cookies()
    login(page, "bob")
    _fill_job_form(page, name="must-wait", command="sleep 5", count=1, resource_class=h100)
    submit_job_form(page)
    waiting = Job.objects.get(name="must-wait")
    run_cycle(cluster, now=clock.now)
    waiting.refresh_from_db()
    assert waiting.state == JobState.QUEUED and waiting.wait_reason == "quota"
    page.reload()
    box = page.get_by_test_id("wait-box")
    expect(box).to_contain_text("holds 1 of its limit of 1")
    expect(box).to_contain_text("Team quota")
    page.screenshot(path=artifacts / "job-waiting-on-quota.png", full_page=True)
    page.context.clear_cookies()
    login(page, "alice")

    # The team page counts the finished run against the monthly budget.
    page.goto(f"/teams/{people['vision'].slug}/")
    budget = page.locator(f'[data-testid="quota"][data-class-key="{H100}"]').get_by_test_id("budget")
    used_hours = job.gpu_seconds() / 3600
    expect(budget.locator('[data-role="used-hours"]')).to_have_text(f"{used_hours:.1f}")


@pytest.mark.parametrize("path", ["/jobs/", "/jobs/new/", "job", "/teams/", "/teams/vision/"])
def test_job_pages_fit_a_375px_wide_phone(new_page, live_server, quotas, people, artifacts, path):
    job = actions.submit_job(
        people["alice"], people["vision"], quotas["h100"].resource_class,
        dict(name="phone-check", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[],
             env=[{"name": "EPOCHS", "value": "10"}], count=2, cpu_millicores=4000, memory_mb=16384, priority=50,
             preemptible=False, max_runtime_seconds=3600),
    ).job  # fmt: skip
    page = new_page(width=375, height=800)
    login(page, "admin")
    response = page.goto(job.get_absolute_url() if path == "job" else path)

    assert response.status == 200
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    if path in ("job", "/teams/vision/"):
        name = "job" if path == "job" else "team"
        page.screenshot(path=artifacts / f"{name}-375px.png", full_page=True)
