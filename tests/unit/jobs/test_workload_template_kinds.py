"""Workload templates of notebooks and inference services (issue 35, item 4): a template has a kind; a lead saves a
notebook or a service (its page, or the templates API with from_notebook, from_service or a spec and its kind), the
spec checked by that kind's create API; members start from it with ``template`` in POST /api/v1/notebooks/ and
/api/v1/services/ or the prefilled browser forms; a template of another kind is refused where it cannot be used."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from core.models import AuditEvent
from jobs.models import InferenceService, Notebook, WorkloadTemplate
from tests.factories import API_SERVICE_BODY, inference_service, member, notebook_session, submit_job
from tests.sim_objects import H100

pytestmark = pytest.mark.django_db

TEMPLATES = "/api/v1/teams/{}/templates/"


def as_user(api_client, user):
    api_client.force_authenticate(user)
    return api_client


def test_a_lead_saves_a_notebook_and_a_member_launches_from_it(cluster, people, api_client):
    source = notebook_session(people["alice"], name="scratch", count=2, ttl_seconds=3600).notebook
    api = as_user(api_client, people["alice"])
    saved = api.post(TEMPLATES.format("vision"), {"name": "lab", "from_notebook": source.pk}, format="json")
    assert saved.status_code == 201, saved.content
    assert saved.data["kind"] == "notebook" and saved.data["latest"] == 1
    spec = saved.data["versions"][0]["spec"]
    assert spec["name"] == "scratch" and spec["count"] == 2 and spec["resource_class"] == H100
    assert spec["workspace"] == "jupyter" and spec["ttl_seconds"] == 3600 and spec["image"] == source.image
    assert "team" not in spec and "id" not in spec and "state" not in spec and "template" not in spec
    assert saved.data["versions"][0]["source_job"] is None
    event = AuditEvent.objects.get(action="template.save")
    assert event.after["kind"] == "notebook" and event.after["from_notebook"] == source.pk
    assert event.actor == people["alice"] and event.team == people["vision"]

    carol = member(people["vision"])
    api = as_user(api_client, carol)
    made = api.post("/api/v1/notebooks/", {"template": "lab", "name": "carols", "count": 1}, format="json")
    assert made.status_code == 201, made.content
    notebook = Notebook.objects.get(pk=made.data["id"])
    assert (notebook.owner, notebook.team, notebook.name, notebook.count, notebook.ttl_seconds) == (
        carol, people["vision"], "carols", 1, 3600,
    )  # fmt: skip
    # The whole is checked again: the template's own name is taken now, and a broken change is refused.
    taken = api.post("/api/v1/notebooks/", {"template": "lab@1"}, format="json")
    assert taken.status_code == 400 and "already has a notebook called scratch" in str(taken.json()["name"])
    broken = api.post("/api/v1/notebooks/", {"template": "lab", "name": "x2", "count": 0}, format="json")
    assert broken.status_code == 400 and "count" in broken.json()
    # A notebook's template makes no job, and a job's template no notebook.
    job_from_it = api.post("/api/v1/jobs/", {"template": "lab"}, format="json")
    assert job_from_it.status_code == 400
    assert "makes a notebook (POST /api/v1/notebooks/" in str(job_from_it.json()["template"])
    assert "not a job" in str(job_from_it.json()["template"])
    job = submit_job(people["alice"], name="resnet")
    as_user(api_client, people["alice"]).post(TEMPLATES.format("vision"), {"name": "resnet", "from_job": job.pk},
                                              format="json")  # fmt: skip
    wrong = as_user(api_client, carol).post("/api/v1/notebooks/", {"template": "resnet", "name": "n"}, format="json")
    assert wrong.status_code == 400 and "makes a job" in str(wrong.json()["template"])
    assert "not a notebook" in str(wrong.json()["template"])


def test_a_notebook_spec_is_checked_by_the_notebook_api_and_a_name_keeps_its_kind(cluster, people, api_client):
    api = as_user(api_client, people["alice"])
    bad = {"name": "Bad!", "resource_class": "no-such-class", "count": 0, "wheels": 4}
    answer = api.post(TEMPLATES.format("vision"), {"name": "lab", "kind": "notebook", "spec": bad}, format="json")
    assert answer.status_code == 400, answer.content
    assert {"resource_class", "count", "wheels"} <= answer.json()["spec"].keys(), answer.json()
    assert not WorkloadTemplate.objects.exists()
    good = {"name": "lab", "resource_class": H100, "count": 1, "workspace": "jupyter"}
    first = api.post(TEMPLATES.format("vision"), {"name": "lab", "kind": "notebook", "spec": good}, format="json")
    assert first.status_code == 201 and first.data["kind"] == "notebook", first.content
    # Checked as a job, a notebook's spec does not read (the default kind is job).
    as_job = api.post(TEMPLATES.format("vision"), {"name": "lab2", "spec": good}, format="json")
    assert as_job.status_code == 400 and "image" in as_job.json()["spec"]
    job = submit_job(people["alice"])
    again = api.post(TEMPLATES.format("vision"), {"name": "lab", "from_job": job.pk}, format="json")
    assert again.status_code == 400 and "makes notebooks, not jobs" in str(again.json()["name"])
    mixed = api.post(TEMPLATES.format("vision"), {"name": "x", "from_job": job.pk, "kind": "service"}, format="json")
    assert mixed.status_code == 400 and "from_job saves a job template" in str(mixed.json()["kind"])
    two = api.post(TEMPLATES.format("vision"), {"name": "x", "from_job": job.pk, "from_notebook": 1}, format="json")
    assert two.status_code == 400 and "exactly one" in str(two.json()["spec"])
    other = notebook_session(people["bob"], team="nlp", name="theirs").notebook
    hidden = api.post(TEMPLATES.format("vision"), {"name": "x", "from_notebook": other.pk}, format="json")
    assert hidden.status_code == 400 and "No notebook" in str(hidden.json()["from_notebook"])
    assert list(WorkloadTemplate.objects.values_list("name", "kind")) == [("lab", "notebook")]


def test_a_lead_saves_a_service_and_a_member_starts_one_from_it(cluster, people, api_client):
    source = inference_service(people["alice"], name="llm", min_replicas=1, max_replicas=3)
    api = as_user(api_client, people["alice"])
    saved = api.post(TEMPLATES.format("vision"), {"name": "llm", "from_service": source.pk, "description": "vLLM"},
                     format="json")  # fmt: skip
    assert saved.status_code == 201, saved.content
    assert saved.data["kind"] == "service"
    spec = saved.data["versions"][0]["spec"]
    assert spec["name"] == "llm" and spec["image"] == "registry.example/llm:1" and spec["resource_class"] == H100
    assert spec["port"] == 8080 and spec["min_replicas"] == 1 and spec["max_replicas"] == 3 and spec["cpu"] == 2
    assert spec["readiness"] == {"type": "http", "path": "/health", "period_seconds": 5} and spec["liveness"] is None
    assert spec["metric"] == "pods" and spec["metric_name"] == "requests_per_second"
    assert AuditEvent.objects.get(action="template.save").after["from_service"] == source.pk

    carol = member(people["vision"])
    api = as_user(api_client, carol)
    made = api.post("/api/v1/services/", {"template": "llm", "name": "carols-llm", "max_replicas": 2}, format="json")
    assert made.status_code == 201, made.content
    service = InferenceService.objects.get(pk=made.data["id"])
    assert (service.owner, service.name, service.port, service.min_replicas, service.max_replicas) == (
        carol, "carols-llm", 8080, 1, 2,
    )  # fmt: skip
    assert service.job.image == "registry.example/llm:1" and service.readiness["path"] == "/health"
    taken = api.post("/api/v1/services/", {"template": "llm"}, format="json")
    assert taken.status_code == 400 and "name" in taken.json()
    wrong = api.post("/api/v1/jobs/", {"template": "llm"}, format="json")
    assert wrong.status_code == 400 and "makes a service (POST /api/v1/services/" in str(wrong.json()["template"])
    missing = api.post("/api/v1/services/", {"template": "llm@7", "name": "x"}, format="json")
    assert missing.status_code == 400 and "has no version 7" in str(missing.json()["template"])
    # A spec given with kind service is checked as POST /api/v1/services/ checks one, every problem at once.
    api = as_user(api_client, people["alice"])
    body = {k: v for k, v in API_SERVICE_BODY.items() if k != "team"}
    broken = {"name": "chat", "kind": "service", "spec": {**body, "port": 0, "min_replicas": 0}}
    bad = api.post(TEMPLATES.format("vision"), broken, format="json")
    assert bad.status_code == 400 and {"port", "min_replicas"} <= bad.json()["spec"].keys(), bad.json()
    good = api.post(TEMPLATES.format("vision"), {"name": "chat", "kind": "service", "spec": body}, format="json")
    assert good.status_code == 201, good.content


def test_the_pages_save_a_notebook_and_a_service_and_the_forms_fill_in_from_them(cluster, people):
    notebook = notebook_session(people["alice"], name="scratch", image="quay.io/jupyter/scipy-notebook:2024-05-27")
    notebook = notebook.notebook
    service = inference_service(people["alice"], name="llm", port=9000)
    lead, carol = Client(), Client()
    lead.force_login(people["alice"])
    carol.force_login(member(people["vision"]))
    for page in (notebook.get_absolute_url(), service.get_absolute_url()):
        assert b'data-testid="save-template"' in lead.get(page).content
        assert b'data-testid="save-template"' not in carol.get(page).content
    save = reverse("jobs:template-save", args=["vision"])
    assert carol.post(save, {"notebook": notebook.pk, "name": "lab"}).status_code == 403
    assert lead.post(save, {"notebook": notebook.pk, "name": "lab"}).status_code == 302
    assert lead.post(save, {"service": service.pk, "name": "llm"}).status_code == 302
    assert dict(WorkloadTemplate.objects.values_list("name", "kind")) == {"lab": "notebook", "llm": "service"}
    assert AuditEvent.objects.filter(action="template.save", actor=people["alice"]).count() == 2
    clash = lead.post(save, {"service": service.pk, "name": "lab"}, follow=True).content.decode()
    assert "Template not saved: Template lab of team vision makes notebooks, not inference services" in clash

    team_page = lead.get(reverse("jobs:team-detail", args=["vision"])).content.decode()
    assert "/notebooks/?template=vision/lab" in team_page and "/services/new/?template=vision/llm" in team_page
    assert '<td data-testid="template-kind">Notebook</td>' in team_page
    assert '<td data-testid="template-kind">Inference service</td>' in team_page

    form = carol.get(reverse("jobs:notebook-list") + "?template=vision/lab").content.decode()
    assert 'value="quay.io/jupyter/scipy-notebook:2024-05-27"' in form and 'value="scratch"' in form
    assert "Filled in from template lab (version 1)" in form
    form = carol.get(reverse("jobs:service-new") + "?template=vision/llm").content.decode()
    assert 'value="registry.example/llm:1"' in form and 'value="9000"' in form
    assert "Filled in from template llm (version 1)" in form
    # A template of another kind fills in nothing and says where it is used.
    wrong = carol.get(reverse("jobs:job-new") + "?template=vision/lab").content.decode()
    assert "makes a notebook" in wrong and "Filled in" not in wrong
    wrong = carol.get(reverse("jobs:service-new") + "?template=vision/lab").content.decode()
    assert "makes a notebook" in wrong and "not a service" in wrong


def test_a_spec_that_would_no_longer_be_taken_is_not_saved_and_says_why(cluster, people, api_client):
    from jobs.models import NotebookPolicy

    notebook = notebook_session(people["alice"], name="scratch", ttl_seconds=4 * 3600).notebook
    NotebookPolicy.objects.create(team=people["vision"], ttl_seconds=3600, max_ttl_seconds=2 * 3600,
                                  idle_timeout_seconds=1800, max_idle_timeout_seconds=3600)  # fmt: skip
    lead = Client()
    lead.force_login(people["alice"])
    page = lead.post(reverse("jobs:template-save", args=["vision"]), {"notebook": notebook.pk, "name": "lab"},
                     follow=True).content.decode()  # fmt: skip
    assert "Template not saved: its spec would not be accepted now (ttl_seconds: At most 2 hours" in page
    api = as_user(api_client, people["alice"])
    refused = api.post(TEMPLATES.format("vision"), {"name": "lab", "from_notebook": notebook.pk}, format="json")
    assert refused.status_code == 400 and "ttl_seconds" in refused.json()["spec"]
    body = {k: v for k, v in API_SERVICE_BODY.items() if k != "team"} | {"readiness": {"type": "http", "tries": 3}}
    nested = api.post(TEMPLATES.format("vision"), {"name": "chat", "kind": "service", "spec": body}, format="json")
    assert nested.status_code == 400 and "tries" in nested.json()["spec"]["readiness"], nested.json()
    assert not WorkloadTemplate.objects.exists()
