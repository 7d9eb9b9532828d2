"""The jobs and team pages through Django's test client: who may see and do what, what a bad form says, and
that the numbers on the quota bars are the ones the admission cycle works with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from cluster.base import ClusterError
from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job, Quota
from jobs.usage import month_gpu_hours
from jobs.views import QuotaUsage
from tests.factories import member
from tests.sim_objects import H100

REQUEST = dict(
    name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
    count=1, cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=3600,
)  # fmt: skip


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    quota = actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    carol = member(people["vision"])
    return {**people, "rc": rc, "quota": quota, "carol": carol}


def form_data(setup, **overrides) -> dict:
    data = {
        "team": setup["vision"].pk, "name": "resnet", "image": "nvcr.io/nvidia/pytorch:24.01-py3",
        "command": "python train.py --epochs 10", "args": "", "env": "EPOCHS=10", "resource_class": setup["rc"].pk,
        "count": 2, "cpu": "4", "memory_mb": 16384, "priority": 50, "max_runtime_hours": "1.5",
        "idempotency_key": "form-token-1",
    }  # fmt: skip
    data.update(overrides)
    return data


def submit(user, setup) -> Job:
    return actions.submit_job(user, setup["vision"], setup["rc"], dict(REQUEST)).job


@pytest.mark.parametrize("path", ["/jobs/", "/jobs/new/", "/jobs/1/", "/teams/", "/teams/vision/"])
def test_pages_need_a_login(client, setup, path):
    response = client.get(path)
    assert response.status_code == 302 and response.url.startswith("/login/")


def test_the_form_stores_what_was_typed_in_the_services_units(client, setup):
    client.force_login(setup["carol"])
    response = client.post("/jobs/new/", form_data(setup, args="--data '/mnt/my data'", preemptible="on"))

    job = Job.objects.get()
    assert response.status_code == 302 and response.url == job.get_absolute_url()
    assert job.command == ["python", "train.py", "--epochs", "10"]
    assert job.args == ["--data", "/mnt/my data"]
    assert (job.cpu_millicores, job.memory_mb, job.max_runtime_seconds) == (4000, 16384, 5400)
    assert (job.owner, job.team, job.preemptible, job.idempotency_key) == (
        setup["carol"], setup["vision"], True, "form-token-1",
    )  # fmt: skip


def test_the_same_token_with_other_values_is_refused_with_a_fresh_token(client, setup):
    client.force_login(setup["carol"])
    client.post("/jobs/new/", form_data(setup))
    response = client.post("/jobs/new/", form_data(setup, name="other"))

    assert response.status_code == 200
    assert Job.objects.count() == 1
    form = response.context["form"]
    assert f"job #{Job.objects.get().pk}" in form.non_field_errors()[0]
    assert form["idempotency_key"].value() != "form-token-1"
    assert client.post("/jobs/new/", form_data(setup, name="other", idempotency_key=form["idempotency_key"].value()))
    assert Job.objects.count() == 2


@pytest.mark.parametrize(
    ("overrides", "field", "words"),
    [
        ({"command": "python 'train.py"}, "command", "Close every quote"),
        ({"command": "   "}, "command", "required"),
        ({"env": "NVIDIA_VISIBLE_DEVICES=all"}, "env", "NVIDIA device plugin"),
        ({"env": "EPOCHS"}, "env", "Line 1: write NAME=value"),
        ({"image": "Not An Image"}, "image", "not a container image reference"),
        ({"max_runtime_hours": "0.01"}, "max_runtime_hours", "1 minute"),
        ({"max_runtime_hours": "169"}, "max_runtime_hours", "168 hours"),
        ({"cpu": "1000"}, "cpu", "256"),
        ({"memory_mb": 4_000_000}, "memory_mb", "No node of this class"),
        ({"image": "nvidia/cuda:13.0.0-runtime-ubuntu24.04"}, "image", "needs CUDA 13.0"),
    ],
)
def test_bad_fields_are_explained_on_the_field_and_nothing_is_stored(client, setup, overrides, field, words):
    client.force_login(setup["carol"])
    response = client.post("/jobs/new/", form_data(setup, **overrides))

    assert response.status_code == 200
    assert not Job.objects.exists()
    assert any(words in message for message in response.context["form"].errors[field]), response.context["form"].errors


def test_a_class_without_quota_for_the_team_is_neither_offered_nor_accepted(client, setup):
    other = ResourceClass.objects.exclude(pk=setup["rc"].pk).first()
    client.force_login(setup["carol"])
    page = client.get("/jobs/new/")
    assert list(page.context["form"].fields["resource_class"].queryset) == [setup["rc"]]

    response = client.post("/jobs/new/", form_data(setup, resource_class=other.pk))
    assert "resource_class" in response.context["form"].errors
    assert not Job.objects.exists()


def test_someone_without_a_team_is_sent_back_with_a_reason(client, setup):
    client.force_login(setup["outsider"])
    response = client.get("/jobs/new/", follow=True)
    assert response.redirect_chain[-1][0] == "/jobs/"
    assert "not in a team" in str(list(response.context["messages"])[0])


def test_job_list_filters_by_team_and_state_and_hides_other_teams(client, setup):
    queued = submit(setup["alice"], setup)
    cancelled = actions.cancel_job(setup["alice"], submit(setup["alice"], setup))
    actions.set_quota(setup["admin"], setup["nlp"], setup["rc"], 1, 1)
    theirs = actions.submit_job(setup["bob"], setup["nlp"], setup["rc"], dict(REQUEST)).job

    client.force_login(setup["carol"])
    listed = lambda query="": [j.pk for j in client.get(f"/jobs/{query}").context["page"].object_list]  # noqa: E731
    assert listed() == [cancelled.pk, queued.pk]
    assert listed("?state=queued") == [queued.pk]
    assert listed(f"?q=%23{cancelled.pk}") == [cancelled.pk]
    assert listed("?team=nlp") == []
    client.force_login(setup["admin"])
    assert listed("?team=nlp") == [theirs.pk]


def test_job_page_shows_the_wait_detail_and_hides_other_teams_jobs(client, setup):
    job = submit(setup["alice"], setup)
    Job.objects.filter(pk=job.pk).update(
        wait_reason="quota", wait_message="Team Computer Vision holds 8 of its limit of 8.", queue_position=3,
        wait_detail={"requested": 1, "in_use": 8, "guaranteed": 4, "limit": 8, "waited_seconds": 5400},
    )  # fmt: skip
    client.force_login(setup["carol"])
    page = client.get(job.get_absolute_url())
    assert page.context["wait_items"] == [
        ("This job asks for", "1"), ("Team holds now", "8"), ("Team's guarantee", "4"), ("Team's limit", "8"),
        ("Waited", "1 h 30 min"),
    ]  # fmt: skip
    html = page.content.decode()
    assert "Why is this waiting?" in html and "Team quota" in html and "holds 8 of its limit of 8" in html
    # carol is a member but not the owner: she sees the job but may not cancel it.
    assert "Cancel job" not in html
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 403
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED

    client.force_login(setup["bob"])
    assert client.get(job.get_absolute_url()).status_code == 404
    assert client.post(f"/jobs/{job.pk}/cancel/").status_code == 404


def test_cancel_and_resubmit_are_posts(client, setup):
    job = submit(setup["alice"], setup)
    client.force_login(setup["alice"])
    assert client.get(f"/jobs/{job.pk}/cancel/").status_code == 405
    assert client.post(f"/jobs/{job.pk}/resubmit/", follow=True).status_code == 200
    assert not Job.objects.filter(resubmitted_from=job).exists()  # still queued: nothing to resubmit

    client.post(f"/jobs/{job.pk}/cancel/")
    again = client.post(f"/jobs/{job.pk}/cancel/", follow=True)
    assert "nothing to cancel" in str(list(again.context["messages"])[-1])
    client.post(f"/jobs/{job.pk}/resubmit/")
    assert Job.objects.get(resubmitted_from=job).state == JobState.QUEUED


def test_the_log_panel_says_why_there_is_no_log(client, setup, monkeypatch):
    job = submit(setup["alice"], setup)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, pod_name="gpj-1-train-abcde")

    class Broken:
        def pod_logs(self, namespace, pod, tail_lines):
            raise ClusterError("the API server is unreachable")

    monkeypatch.setattr("gpus.fleet.get_backend", lambda: Broken())
    client.force_login(setup["alice"])
    page = client.get(job.get_absolute_url())
    assert page.context["logs"] is None
    assert "the API server is unreachable" in page.context["logs_note"]


def test_only_admins_change_quotas(client, setup):
    quota = setup["quota"]
    data = {f"quota-{quota.pk}-guaranteed": 1, f"quota-{quota.pk}-limit": 2}
    client.force_login(setup["alice"])  # a lead, not an admin
    assert client.post(f"/teams/vision/quotas/{quota.pk}/", data).status_code == 403
    assert client.post(f"/teams/vision/quotas/{quota.pk}/delete/").status_code == 403
    assert (
        "add_form" in client.get("/teams/vision/").context and client.get("/teams/vision/").context["add_form"] is None
    )
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == (4, 8)

    client.force_login(setup["bob"])
    assert client.post(f"/teams/vision/quotas/{quota.pk}/", data).status_code == 404

    client.force_login(setup["admin"])
    response = client.post(f"/teams/vision/quotas/{quota.pk}/", data)
    assert response.status_code == 302 and response.url.endswith(f"#quota-{quota.pk}")
    quota.refresh_from_db()
    assert (quota.guaranteed, quota.limit) == (1, 2)
    assert AuditEvent.objects.filter(action="quota.set", object_id=str(quota.pk), actor=setup["admin"]).exists()


def test_adding_a_quota_offers_only_classes_the_team_has_none_for(client, setup):
    client.force_login(setup["admin"])
    offered = client.get("/teams/vision/").context["add_form"].fields["resource_class"].queryset
    assert setup["rc"] not in offered and offered.exists()
    response = client.post(
        "/teams/vision/quotas/", {"add-resource_class": setup["rc"].pk, "add-guaranteed": 1, "add-limit": 1}
    )
    assert response.status_code == 200 and "resource_class" in response.context["add_form"].errors
    assert Quota.objects.filter(team=setup["vision"]).count() == 1


def test_quota_usage_segments_fill_the_track():
    quota = Quota(guaranteed=4, limit=8)
    within = QuotaUsage(quota, used=3)
    assert (within.within, within.borrowed, within.guaranteed_free, within.borrowable) == (3, 0, 1, 4)
    borrowing = QuotaUsage(quota, used=6)
    assert (borrowing.within, borrowing.borrowed, borrowing.guaranteed_free, borrowing.borrowable) == (4, 2, 0, 2)
    lowered = QuotaUsage(quota, used=10)  # the limit was lowered below what runs
    assert lowered.track == 10 and lowered.available == 0
    for usage in (within, borrowing, lowered):
        widths = usage.widths
        total = sum(float(widths[k]) for k in ("within", "borrowed", "guaranteed_free", "borrowable"))
        assert total == pytest.approx(100, abs=0.05)


def test_gpu_hours_count_only_this_month_like_the_admission_cycle(setup):
    now = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
    month = datetime(2026, 3, 1, tzinfo=UTC)
    mig = ResourceClass.objects.filter(gpu_fraction__lt=1).first()
    actions.set_quota(setup["admin"], setup["vision"], mig, 7, 7)

    def job(rc, count, started, finished=None, charged=0.0):
        fields = dict(REQUEST, count=count, image="nvidia/cuda:12.2.2-runtime-ubuntu22.04")
        made = actions.submit_job(setup["alice"], setup["vision"], rc, fields).job
        Job.objects.filter(pk=made.pk).update(started_at=started, finished_at=finished, charged_gpu_seconds=charged)

    job(setup["rc"], 2, month - timedelta(hours=10), month + timedelta(hours=3))  # 3 h in March × 2
    job(setup["rc"], 1, month - timedelta(days=3), month - timedelta(days=2))  # all in February
    job(setup["rc"], 1, now - timedelta(hours=1), charged=1800)  # running 1 h, plus half an hour before
    job(mig, 1, now - timedelta(hours=7))  # 7 h of a fraction of a GPU

    hours = month_gpu_hours([setup["vision"].pk], now)
    assert hours[(setup["vision"].pk, setup["rc"].pk)] == pytest.approx(6 + 1 + 0.5)
    assert hours[(setup["vision"].pk, mig.pk)] == pytest.approx(7 * mig.gpu_fraction)


def test_the_job_list_pages_keep_the_filter(client, setup):
    jobs = [Job(team=setup["vision"], owner=setup["alice"], resource_class=setup["rc"], name=f"j{i}", image="ubuntu")
            for i in range(55)]  # fmt: skip
    Job.objects.bulk_create(jobs)
    client.force_login(setup["alice"])
    html = client.get("/jobs/?state=queued").content.decode()
    assert "Page 1 of 2" in html and 'rel="next" href="?state=queued&amp;page=2"' in html
    second = client.get("/jobs/?state=queued&page=2")
    assert len(second.context["page"].object_list) == 5 and "Page 2 of 2" in second.content.decode()


def test_a_bad_image_and_too_many_gpus_are_both_reported_in_one_round(client, setup):
    """ux-walk R5: a format error no longer hides the capacity check until it is fixed."""
    client.force_login(setup["carol"])
    response = client.post("/jobs/new/", form_data(setup, image="NVCR.IO/Bad Image", count=9, name="My_First_Job"))
    errors = response.context["form"].errors
    assert {"image", "count", "name"} <= set(errors), errors
    assert not Job.objects.exists()


def test_the_shm_help_says_the_operators_default(client, setup, settings):
    settings.PORTAL_SHM_FRACTION = 0.5
    client.force_login(setup["carol"])
    assert "default (50% of the memory)" in client.get("/jobs/new/").content.decode()
