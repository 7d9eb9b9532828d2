"""A team's workload templates (issue 35, item 4): leads save a job or a spec as a template, each save a new version,
audited; every member lists them and submits from them (API, browser form); a spec is checked as a submission
before it is stored; another team's templates are out of sight."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from core.models import AuditEvent
from jobs.models import Job, WorkloadTemplate, WorkloadTemplateVersion
from tests.factories import API_JOB_BODY, member, submit_job
from tests.sim_objects import H100

pytestmark = pytest.mark.django_db

TEMPLATES = "/api/v1/teams/{}/templates/"


def as_user(api_client, user):
    api_client.force_authenticate(user)
    return api_client


def test_a_lead_saves_a_job_as_a_template_and_each_save_is_a_version(cluster, people, api_client):
    job = submit_job(people["alice"], name="resnet", image="nvcr.io/nvidia/pytorch:24.01-py3", count=2)
    api = as_user(api_client, people["alice"])
    first = api.post(TEMPLATES.format("vision"), {"name": "resnet", "from_job": job.pk, "description": "ResNet-50"},
                     format="json")  # fmt: skip
    assert first.status_code == 201, first.content
    assert first.data["latest"] == 1 and first.data["description"] == "ResNet-50"
    spec = first.data["versions"][0]["spec"]
    assert spec["image"] == "nvcr.io/nvidia/pytorch:24.01-py3" and spec["count"] == 2 and spec["resource_class"] == H100
    assert "team" not in spec and "id" not in spec and "state" not in spec  # only what a submission takes
    second = api.post(TEMPLATES.format("vision"), {"name": "resnet", "spec": {**spec, "count": 4}}, format="json")
    assert second.status_code == 201, second.content
    assert [v["number"] for v in second.data["versions"]] == [2, 1]
    assert second.data["versions"][0]["spec"]["count"] == 4 and second.data["versions"][1]["spec"]["count"] == 2
    saved = AuditEvent.objects.filter(action="template.save").order_by("pk")
    assert [e.after["version"] for e in saved] == [1, 2] and saved[0].after["from_job"] == job.pk
    assert saved[0].actor == people["alice"] and saved[0].team == people["vision"]


def test_a_spec_is_checked_as_a_submission_every_problem_at_once_and_nothing_is_stored(cluster, people, api_client):
    api = as_user(api_client, people["alice"])
    bad = {**API_JOB_BODY, "image": "", "count": 0, "resource_class": "no-such-class"}
    bad.pop("team")
    answer = api.post(TEMPLATES.format("vision"), {"name": "Bad Name!", "spec": bad}, format="json")
    assert answer.status_code == 400
    problems = answer.json()["spec"]
    assert {"image", "count", "resource_class"} <= problems.keys(), problems
    assert not WorkloadTemplate.objects.exists()
    named = api.post(TEMPLATES.format("vision"), {"name": "Bad Name!", "spec": {**API_JOB_BODY}}, format="json")
    assert named.status_code == 400 and "lower-case letters" in str(named.json()["name"])
    assert not WorkloadTemplate.objects.exists()
    neither = api.post(TEMPLATES.format("vision"), {"name": "x"}, format="json")
    assert neither.status_code == 400 and "either spec or from_job" in str(neither.json())


def test_only_leads_save_and_remove_members_read_and_other_teams_see_nothing(cluster, people, api_client):
    job = submit_job(people["alice"])
    carol = member(people["vision"])
    api = as_user(api_client, people["alice"])
    assert api.post(TEMPLATES.format("vision"), {"name": "base", "from_job": job.pk}, format="json").status_code == 201
    api = as_user(api_client, carol)
    assert api.get(TEMPLATES.format("vision")).json()[0]["name"] == "base"
    assert api.post(TEMPLATES.format("vision"), {"name": "mine", "from_job": job.pk}, format="json").status_code == 403
    assert api.delete(TEMPLATES.format("vision") + "base/").status_code == 403
    api = as_user(api_client, people["bob"])  # of nlp
    assert api.get(TEMPLATES.format("vision")).status_code == 404
    assert api.get(TEMPLATES.format("vision") + "base/").status_code == 404
    refused = api.post("/api/v1/jobs/", {"template": "base"}, format="json")
    assert refused.status_code == 400 and "No template 'base'" in str(refused.json()["template"])
    api = as_user(api_client, people["alice"])
    assert api.delete(TEMPLATES.format("vision") + "base/").status_code == 204
    assert not WorkloadTemplateVersion.objects.exists()
    assert AuditEvent.objects.filter(action="template.delete", actor=people["alice"]).count() == 1


def test_a_member_submits_from_a_template_changing_fields_and_naming_a_version(cluster, people, api_client):
    job = submit_job(people["alice"], name="resnet", count=2)
    api = as_user(api_client, people["alice"])
    api.post(TEMPLATES.format("vision"), {"name": "resnet", "from_job": job.pk}, format="json")
    spec = WorkloadTemplateVersion.objects.get().spec
    api.post(TEMPLATES.format("vision"), {"name": "resnet", "spec": {**spec, "count": 3}}, format="json")
    carol = member(people["vision"])
    api = as_user(api_client, carol)
    latest = api.post("/api/v1/jobs/", {"template": "resnet", "name": "mine"}, format="json")
    assert latest.status_code == 201, latest.content
    made = Job.objects.get(pk=latest.data["id"])
    assert (made.owner, made.team, made.name, made.count, made.image) == (carol, people["vision"], "mine", 3, job.image)
    first = api.post("/api/v1/jobs/", {"template": "resnet@1"}, format="json")
    assert first.status_code == 201 and Job.objects.get(pk=first.data["id"]).count == 2
    # What the template holds is checked again as any submission: a change that breaks it is refused.
    broken = api.post("/api/v1/jobs/", {"template": "resnet", "count": 0}, format="json")
    assert broken.status_code == 400 and "count" in broken.json()
    missing = api.post("/api/v1/jobs/", {"template": "resnet@9"}, format="json")
    assert missing.status_code == 400 and "has no version 9" in str(missing.json()["template"])


def test_the_pages_save_list_fill_the_form_from_and_remove_a_template(cluster, people):
    job = submit_job(people["alice"], name="resnet", image="nvcr.io/nvidia/pytorch:24.01-py3")
    lead = Client()
    lead.force_login(people["alice"])
    page = lead.get(job.get_absolute_url())
    assert b'data-testid="save-template"' in page.content
    saved = lead.post(reverse("jobs:template-save", args=["vision"]), {"job": job.pk, "name": "resnet"})
    assert saved.status_code == 302 and WorkloadTemplate.objects.get().name == "resnet"
    team_page = lead.get(reverse("jobs:team-detail", args=["vision"])).content.decode()
    assert "<code>resnet</code>" in team_page and "?template=vision/resnet" in team_page
    carol = Client()
    carol.force_login(member(people["vision"]))
    assert b'data-testid="save-template"' not in carol.get(job.get_absolute_url()).content
    assert carol.post(reverse("jobs:template-save", args=["vision"]), {"job": job.pk, "name": "x"}).status_code == 403
    form = carol.get(reverse("jobs:job-new") + "?template=vision/resnet").content.decode()
    assert 'value="nvcr.io/nvidia/pytorch:24.01-py3"' in form and "Filled in from template resnet (version 1)" in form
    nothing = carol.get(reverse("jobs:job-new") + "?template=vision/nope").content.decode()
    assert "No template &#x27;nope&#x27; in team vision" in nothing
    bad_name = lead.post(reverse("jobs:template-save", args=["vision"]), {"job": job.pk, "name": "No Good"},
                         follow=True)  # fmt: skip
    assert "Template not saved: Use 1–60 lower-case letters" in bad_name.content.decode()
    assert carol.post(reverse("jobs:template-delete", args=["vision", "resnet"])).status_code == 403
    assert lead.post(reverse("jobs:template-delete", args=["vision", "resnet"])).status_code == 302
    assert not WorkloadTemplate.objects.exists()


def test_the_demos_template_reads_as_a_job_in_both_versions(cluster, people, api_client):
    from jobs import demo

    submit_job(people["alice"], name="resnet50-train", env=[{"name": "WANDB_MODE", "value": "offline"}],
               labels={"pipeline": "demo"}, count=8)  # fmt: skip
    assert demo.seed_templates() == 1 and demo.seed_templates() == 0  # once
    template = WorkloadTemplate.objects.get()
    assert [v.number for v in template.versions.all()] == [2, 1]
    api = as_user(api_client, people["alice"])
    for ref, count in (("resnet50-train@1", 8), ("resnet50-train", 4)):
        made = api.post("/api/v1/jobs/", {"template": ref}, format="json")
        assert made.status_code == 201, made.content
        assert made.data["count"] == count and made.data["env"] == [{"name": "WANDB_MODE", "value": "offline"}]
