"""A team lead cancels a member's job from its page in real Chromium: the form asks why (the browser will not
send it empty), the confirmation comes, and the timeline says who and why; the owner's bell has the notice."""

import pytest

from accounts.choices import MembershipRole
from accounts.models import Membership
from core.models import Notification
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job
from tests.factories import UserFactory

from .conftest import login

expect = pytest.importorskip("playwright.sync_api").expect

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"


def test_a_lead_cancels_a_members_job_with_a_reason(page, live_server, inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 8, 16)
    carol = UserFactory(username="carol")
    Membership.objects.create(user=carol, team=people["vision"], role=MembershipRole.MEMBER)
    fields = {**actions.spec_defaults(), "name": "carols-run", "image": "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
              "command": ["sleep", "600"]}  # fmt: skip
    job = actions.submit_job(carol, people["vision"], rc, fields).job

    login(page, "alice")
    page.goto(job.get_absolute_url())
    reason = page.get_by_label("Why you are stopping carol's job (they are told)")
    expect(reason).to_be_visible()
    asked = []
    page.on("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_test_id("job-cancel").click()  # empty: the browser keeps the form (the field is required)
    expect(reason).to_be_visible()
    assert asked == [] and Job.objects.get(pk=job.pk).state == JobState.QUEUED

    reason.fill("Blocking the H100s needed for the demo.")
    with page.expect_navigation():
        page.get_by_test_id("job-cancel").click()
    assert asked and f"#{job.pk}" in asked[0]
    expect(page.get_by_test_id("job-state")).to_have_text(JobState.CANCELLED.label)
    expect(page.get_by_test_id("timeline").locator("li").last).to_contain_text(
        "Cancelled by alice: Blocking the H100s needed for the demo."
    )
    note = Notification.objects.get(user=carol)
    assert note.title == f"alice cancelled your job #{job.pk} carols-run" and "demo" in note.body
