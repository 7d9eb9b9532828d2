"""Job arrays, labels and "Resubmit with changes" in a real Chromium: submitting an array from the form, the
grouped summary on the job list and the array page, cancelling the group, then resubmitting a task with a
change from the form filled from it. Expected values come from the database rows the pages are about."""

import pytest

from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState, Priority
from jobs.models import Job, JobArray

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


@pytest.fixture
def h100(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    return rc


def test_an_array_is_submitted_grouped_cancelled_and_a_task_resubmitted_with_a_change(
    page, live_server, h100, artifacts, people, settings
):
    settings.PORTAL_LIVE_POLL_SECONDS = 1
    login(page, "alice")
    page.goto("/jobs/new/")
    page.get_by_label("Name", exact=True).fill("lr-sweep")
    page.get_by_label("Image").fill("nvidia/cuda:12.2.2-runtime-ubuntu22.04")
    page.get_by_label("Command").fill("python sweep.py")
    page.get_by_label("Resource class").select_option(str(h100.pk))
    page.get_by_label("Labels").fill("git-sha=1a2b3c4\nsweep=lr")
    page.get_by_label("Working directory").fill("/workspace")
    page.get_by_label("Tasks (job array)").fill("4")
    page.get_by_label("At most at once").fill("2")
    with page.expect_navigation():
        page.get_by_role("button", name="Submit job").click()
    array = JobArray.objects.get()
    assert page.url.endswith(array.get_absolute_url())
    expect(page.get_by_test_id("array-summary")).to_have_text("4 queued")
    expect(page.get_by_test_id("array-tasks").locator("tbody tr")).to_have_count(4)

    page.goto("/jobs/?label=sweep=lr")
    group = page.get_by_test_id("array-group")
    expect(group).to_have_count(1)
    expect(group.locator('[data-role="array-summary"]')).to_have_text(array.summary)
    expect(page.locator(f'[data-array-task="{array.pk}"]')).to_have_count(4)
    page.screenshot(path=str(artifacts / "array-grouped-list.png"), full_page=True)

    group.get_by_role("link", name="Array lr-sweep").click()
    page.once("dialog", lambda dialog: dialog.accept())
    with page.expect_navigation():
        page.get_by_test_id("array-cancel").click()
    expect(page.get_by_test_id("array-summary")).to_have_text("4 cancelled")
    assert set(array.tasks.values_list("state", flat=True)) == {JobState.CANCELLED}

    task = array.tasks.get(array_index=1)
    page.goto(task.get_absolute_url())
    page.get_by_test_id("resubmit-with-changes").click()
    expect(page.get_by_role("heading", name=f"Resubmit job #{task.pk} with changes")).to_be_visible()
    expect(page.get_by_label("Labels")).to_have_value("git-sha=1a2b3c4\nsweep=lr")
    expect(page.get_by_label("Working directory")).to_have_value("/workspace")
    expect(page.get_by_label("Command")).to_have_value("python sweep.py")
    page.get_by_label("Preemptible").check()
    page.get_by_label("Labels").fill("git-sha=5d6e7f8\nsweep=lr")
    with page.expect_navigation():
        page.get_by_role("button", name="Submit job").click()
    new = Job.objects.get(resubmitted_from=task)
    assert page.url.endswith(new.get_absolute_url())
    assert new.preemptible and new.labels == {"git-sha": "5d6e7f8", "sweep": "lr"} and new.working_dir == "/workspace"
    expect(page.get_by_test_id("job-state")).to_have_text("Queued")
    expect(page.locator('[data-role="labels"]')).to_contain_text("git-sha=5d6e7f8")
    page.screenshot(path=str(artifacts / "resubmitted-with-changes.png"), full_page=True)

    # The queued job's page polls; a priority being chosen is not taken away by a poll, while the rest of the
    # page follows what happened meanwhile (an admin raised the priority).
    select = page.locator("#priority-select")
    select.select_option(str(Priority.LOW))
    actions.change_priority(people["admin"], new, Priority.HIGH)
    expect(page.locator('[data-live="timeline"]')).to_contain_text("by admin", timeout=10_000)
    page.wait_for_timeout(2500)  # more polls: the region being used still is not swapped
    expect(select).to_have_value(str(Priority.LOW))
    with page.expect_navigation():
        page.get_by_test_id("priority-form").get_by_role("button", name="Change").click()
    assert Job.objects.get(pk=new.pk).priority == Priority.LOW
    expect(page.locator('[data-role="priority"]')).to_contain_text("Low")
