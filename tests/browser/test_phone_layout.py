"""The portal on a 390×844 phone (issue 31, item 15): the header folds its navigation and account behind a Menu
button so a page's content starts near the top, and the jobs table shows each job's name and state without
sideways scrolling (the less important columns are left out at this width). Measured in a real Chromium; the
screenshots land in test-artifacts/."""

import pytest

from jobs import actions
from jobs.models import Job

from .conftest import login
from .flows import give_quotas

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

WIDTH, HEIGHT = 390, 844
#: Where a page's content must start at the latest (its first heading's top edge), in CSS pixels.
CONTENT_BY = 100


@pytest.fixture
def jobs(inventory, people) -> list[Job]:
    quotas = give_quotas(people)
    request = dict(image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
                   count=2, cpu_millicores=4000, memory_mb=16384, priority=50, preemptible=False,
                   max_runtime_seconds=3600)  # fmt: skip
    names = ["resnet50-imagenet-sweep-lr-0.003", "eval"]
    return [actions.submit_job(people["alice"], people["vision"], quotas["h100"].resource_class,
                               dict(request, name=name)).job for name in names]  # fmt: skip


def content_top(page) -> float:
    return page.evaluate("document.querySelector('main h1').getBoundingClientRect().top")


@pytest.mark.parametrize("path", ["/jobs/", "job", "/"])
def test_the_header_folds_behind_a_menu_button_on_a_phone(new_page, live_server, jobs, artifacts, path):
    page = new_page(width=WIDTH, height=HEIGHT)
    login(page, "alice")
    page.goto(jobs[0].get_absolute_url() if path == "job" else path)

    top = content_top(page)
    assert top <= CONTENT_BY, f"{page.url}: the content starts {top:.0f} px down a {HEIGHT} px screen"
    nav = page.get_by_role("navigation", name="Main")
    expect(nav).to_be_hidden()
    expect(page.get_by_test_id("notifications")).to_be_in_viewport()
    name = {"/jobs/": "jobs", "job": "job", "/": "overview"}[path]
    page.screenshot(path=artifacts / f"phone-{name}-{WIDTH}px.png")

    menu = page.get_by_role("button", name="Menu")
    expect(menu).to_have_attribute("aria-expanded", "false")
    menu.click()
    expect(menu).to_have_attribute("aria-expanded", "true")
    expect(nav.get_by_role("link", name="Jobs")).to_be_in_viewport()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH
    page.screenshot(path=artifacts / f"phone-{name}-{WIDTH}px-menu.png")
    menu.click()
    expect(nav).to_be_hidden()


def test_the_jobs_table_shows_name_and_state_without_sideways_scrolling(new_page, live_server, jobs, artifacts):
    page = new_page(width=WIDTH, height=HEIGHT)
    login(page, "alice")
    page.goto("/jobs/")

    wrap = page.locator(".table-wrap").filter(has=page.get_by_test_id("job-table"))
    overflow = wrap.evaluate("w => w.scrollWidth - w.clientWidth")
    assert overflow <= 1, f"the jobs table is {overflow} px wider than its card"
    box = wrap.bounding_box()
    for job in jobs:
        row = page.locator(f'tr[data-job="{job.pk}"]')
        for part in (row.get_by_role("link", name=job.name), row.locator('[data-role="state"]')):
            shown = part.bounding_box()
            assert shown is not None, f"job #{job.pk}: {part} is not shown"
            assert box["x"] <= shown["x"] and shown["x"] + shown["width"] <= box["x"] + box["width"] + 1, (
                f"job #{job.pk}: {part} lies outside the table's card ({shown} in {box})"
            )
    first = page.locator(f'tr[data-job="{jobs[-1].pk}"]')
    expect(first).to_be_in_viewport()
    page.screenshot(path=artifacts / f"phone-jobs-table-{WIDTH}px.png", full_page=True)


def test_a_wide_screen_shows_the_navigation_and_no_menu_button(new_page, live_server, jobs):
    page = new_page(width=1280, height=900)
    login(page, "alice")
    page.goto("/jobs/")
    expect(page.get_by_role("navigation", name="Main").get_by_role("link", name="Jobs")).to_be_in_viewport()
    expect(page.get_by_role("button", name="Menu")).to_be_hidden()
    expect(page.get_by_role("columnheader", name="Submitted")).to_be_visible()
