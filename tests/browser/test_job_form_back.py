"""Back after submitting a job (issue 31, item 15): the browser shows the form as it was sent, so a person can
change one value and submit a similar job, instead of an empty form. Chromium restored none of the fields marked
autocomplete="off", which name, image and command were."""

import pytest

from jobs.models import Job

from .conftest import login
from .flows import give_quotas, submit_job_form

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


def test_back_after_submit_shows_the_form_as_it_was_sent(page, live_server, inventory, people):
    give_quotas(people)
    login(page, "alice")
    page.goto("/jobs/new/")
    typed = {
        "Name": "resnet-lr-0-1",
        "Image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
        "Command": "python train.py --lr 0.1",
    }
    for label, value in typed.items():
        page.get_by_label(label, exact=True).fill(value)
    submit_job_form(page)
    job = Job.objects.get(name="resnet-lr-0-1")
    assert page.url.endswith(job.get_absolute_url())

    page.go_back()
    expect(page).to_have_url(f"{live_server.url}/jobs/new/")
    for label, value in typed.items():
        expect(page.get_by_label(label, exact=True)).to_have_value(value)
