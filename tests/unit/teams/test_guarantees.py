"""Quota guarantees against schedulable capacity (issue 18). The tester's case: 48 + 16 = 64 guaranteed H100s
against 56 schedulable was accepted without a word, and the team page then promised "40 more can start on the
guarantee". Now such a change needs an explicit confirmation (page and API) that says what it means, the sum is
shown against capacity, and the team page never promises more than the cluster can hold."""

from __future__ import annotations

import re

import pytest

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job, Quota

H100 = "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"
WARNING = "Guarantees would total 64 H100 80GB HBM3 against 56 schedulable: if every team claims its guarantee at once, some will wait"  # noqa: E501


@pytest.fixture
def h100(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    assert rc.allocatable == 56 and rc.display_name == "H100 80GB HBM3"
    actions.set_quota(people["admin"], people["vision"], rc, 48, 56)
    return rc


def add_form(rc, guaranteed, limit, confirm=False) -> dict:
    data = {"add-resource_class": rc.pk, "add-guaranteed": guaranteed, "add-limit": limit, "add-monthly_gpu_hours": ""}
    if confirm:
        data["add-confirm_oversubscription"] = "on"
    return data


def test_a_guarantee_over_capacity_needs_the_confirm_box_on_the_team_page(client, people, h100):
    client.force_login(people["admin"])
    response = client.post("/teams/nlp/quotas/", add_form(h100, 16, 16))
    assert response.status_code == 200
    page = response.content.decode()
    assert WARNING in page and 'data-testid="confirm-oversubscription"' in page
    assert not Quota.objects.filter(team=people["nlp"]).exists()
    assert not AuditEvent.objects.filter(action="quota.set", team=people["nlp"]).exists()
    response = client.post("/teams/nlp/quotas/", add_form(h100, 16, 16, confirm=True))
    assert response.status_code == 302
    assert Quota.objects.get(team=people["nlp"]).guaranteed == 16


def test_a_guarantee_that_fits_needs_no_confirmation(client, people, h100):
    client.force_login(people["admin"])
    response = client.post("/teams/nlp/quotas/", add_form(h100, 8, 16))
    assert response.status_code == 302 and Quota.objects.get(team=people["nlp"]).guaranteed == 8


def test_raising_a_guarantee_over_capacity_asks_and_lowering_it_does_not(client, people, h100):
    actions.set_quota(people["admin"], people["nlp"], h100, 16, 16)  # 64 against 56, set without the page
    quota = Quota.objects.get(team=people["vision"])
    client.force_login(people["admin"])
    prefix = f"quota-{quota.pk}"
    response = client.post(f"/teams/vision/quotas/{quota.pk}/", {f"{prefix}-guaranteed": 50, f"{prefix}-limit": 56})
    assert response.status_code == 200
    assert "Guarantees would total 66 H100 80GB HBM3 against 56 schedulable" in response.content.decode()
    assert "A guarantee of 40 or less for team Computer Vision fits." in response.content.decode()
    assert Quota.objects.get(pk=quota.pk).guaranteed == 48
    response = client.post(f"/teams/vision/quotas/{quota.pk}/", {f"{prefix}-guaranteed": 44, f"{prefix}-limit": 56})
    assert response.status_code == 302 and Quota.objects.get(pk=quota.pk).guaranteed == 44


def test_the_api_answers_400_with_the_meaning_unless_confirmed(api_client, people, h100):
    api_client.force_authenticate(people["admin"])
    body = {"team": "nlp", "resource_class": h100.pk, "guaranteed": 16, "limit": 16}
    response = api_client.post("/api/v1/quotas/", body, format="json")
    assert response.status_code == 400
    message = response.json()["confirm_oversubscription"][0]
    assert WARNING in message and '"confirm_oversubscription": true' in message
    assert not Quota.objects.filter(team=people["nlp"]).exists()
    response = api_client.post("/api/v1/quotas/", {**body, "confirm_oversubscription": True}, format="json")
    assert response.status_code == 201 and "confirm_oversubscription" not in response.json()
    vision = Quota.objects.get(team=people["vision"])
    response = api_client.patch(f"/api/v1/quotas/{vision.pk}/", {"guaranteed": 50}, format="json")
    assert response.status_code == 400 and "total 66" in response.json()["confirm_oversubscription"][0]
    assert api_client.patch(f"/api/v1/quotas/{vision.pk}/", {"guaranteed": 40}, format="json").status_code == 200


def test_the_api_lists_every_problem_at_once(api_client, people, h100):
    api_client.force_authenticate(people["admin"])
    body = {"team": "nlp", "resource_class": h100.pk, "guaranteed": 16, "limit": 8}
    errors = api_client.post("/api/v1/quotas/", body, format="json").json()
    assert set(errors) == {"limit", "confirm_oversubscription"}


def running(people, team, rc, count):
    fields = dict(
        name="train", image="busybox", command=[], args=[], env=[], count=count, cpu_millicores=1000,
        memory_mb=1024, priority=50, preemptible=False, max_runtime_seconds=3600,
    )  # fmt: skip
    owner = people["alice"] if team == "vision" else people["bob"]
    job = actions.submit_job(owner, people[team], rc, fields).job
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING)


def quota_note(page: str, slug: str) -> str:
    start = page.index(f'data-team="{slug}"\n     data-class-key="{H100}"')
    note = page[page.index('class="quota-note">', start) + len('class="quota-note">') :]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", note[: note.index("</p>")])).strip()


def test_the_team_page_never_promises_more_than_the_cluster_can_hold(client, people, h100):
    actions.set_quota(people["admin"], people["nlp"], h100, 16, 16)
    running(people, "nlp", h100, 8)
    running(people, "nlp", h100, 8)  # nlp holds its whole guarantee: 16
    running(people, "vision", h100, 8)  # vision holds 8 of 48
    client.force_login(people["alice"])
    page = client.get("/teams/vision/").content.decode()
    # 56 schedulable - 8 held by vision - 16 held by nlp within its guarantee = 32, not 40.
    note = quota_note(page, "vision")
    assert "32 more can start on the guarantee now" in note
    assert "the other 8 guaranteed units wait for capacity other teams' guarantees hold" in note
    assert "40 more can start" not in page
    totals = re.search(r'data-testid="class-guarantees" data-guaranteed-total="(\d+)" data-schedulable="(\d+)"', page)
    assert totals.groups() == ("64", "56")
    assert "more is promised than the cluster holds" in page


def test_an_unused_guarantee_that_fits_is_promised_whole(client, people, h100):
    client.force_login(people["alice"])
    note = quota_note(client.get("/teams/vision/").content.decode(), "vision")
    assert note.startswith("48 more can start on the guarantee, then 8 more as preemptible jobs")


def test_the_admins_quota_overview_shows_each_class_sum_against_schedulable(client, people, h100):
    actions.set_quota(people["admin"], people["nlp"], h100, 16, 16)
    client.force_login(people["admin"])
    page = client.get("/teams/").content.decode()
    overview = page[page.index('data-testid="class-guarantee-overview"') :]
    row = overview[overview.index(f'data-class-key="{H100}"') :]
    assert '<td class="num nowrap" data-role="guarantee-total">64 / 56</td>' in row[:600]
    assert "8 more guaranteed than the cluster holds" in row[:900]
    client.force_login(people["alice"])
    assert 'data-testid="class-guarantee-overview"' not in client.get("/teams/").content.decode()
