"""The jobs list's Owner ("mine"), Kind and Idle filters, on the page and in the API (one FilterSet drives both),
and a stopped notebook's session, which reads as stopped rather than as a cancelled job (issue 31, item 15)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState
from jobs.models import Job
from jobs.notebook.sessions import stop_by_person
from tests.factories import member, notebook_session
from tests.sim_objects import H100

REQUEST = dict(
    name="train", image="nvcr.io/nvidia/pytorch:24.01-py3", command=["python", "train.py"], args=[], env=[],
    count=1, cpu_millicores=2000, memory_mb=8192, priority=50, preemptible=False, max_runtime_seconds=3600,
)  # fmt: skip


@pytest.fixture
def setup(inventory, people):
    rc = ResourceClass.objects.get(key=H100)
    actions.set_quota(people["admin"], people["vision"], rc, 4, 8)
    carol = member(people["vision"])
    mine = actions.submit_job(carol, people["vision"], rc, dict(REQUEST, name="carols")).job
    alices = actions.submit_job(people["alice"], people["vision"], rc, dict(REQUEST, name="alices")).job
    idle = actions.submit_job(people["alice"], people["vision"], rc, dict(REQUEST, name="idle")).job
    Job.objects.filter(pk=idle.pk).update(state=JobState.RUNNING, started_at=timezone.now(), idle_since=timezone.now())
    session = notebook_session(carol)
    stop_by_person(carol, session.notebook)
    notebook = Job.objects.get(pk=session.notebook.session_id)
    return {**people, "carol": carol, "mine": mine, "alices": alices, "idle": idle, "notebook": notebook}


def page_ids(client, query: str) -> list[int]:
    response = client.get(f"/jobs/{query}")
    assert response.status_code == 200
    return [j.pk for j in response.context["page"].object_list]


def api_ids(api_client, query: str) -> list[int]:
    response = api_client.get(f"/api/v1/jobs/{query}")
    assert response.status_code == 200, response.content
    return [j["id"] for j in response.json()["results"]]


def test_owner_mine_kind_and_idle_filter_the_page_and_the_api(client, api_client, setup):
    client.force_login(setup["carol"])
    api_client.force_login(setup["carol"])
    mine, alices, idle, notebook = (setup[k].pk for k in ("mine", "alices", "idle", "notebook"))
    for ids in (lambda q: page_ids(client, q), lambda q: api_ids(api_client, q)):
        assert sorted(ids("?mine=true")) == sorted([mine, notebook])
        assert sorted(ids("?mine=false")) == sorted([mine, alices, idle, notebook])
        assert ids("?kind=notebook") == [notebook]
        assert sorted(ids("?kind=batch")) == sorted([mine, alices, idle])
        assert ids("?idle=true") == [idle]
        assert ids("?mine=true&kind=batch") == [mine]


def test_the_page_offers_the_new_filters_with_their_choices_kept(client, setup):
    client.force_login(setup["carol"])
    html = client.get("/jobs/?mine=true&kind=notebook&idle=true").content.decode()
    assert '<select id="f-mine" name="mine">' in html and '<option value="true" selected>' in html
    assert '<option value="notebook" selected>Notebook</option>' in html
    assert '<input type="checkbox" id="f-idle" name="idle" value="true" checked>' in html


def test_a_bad_filter_value_is_named_with_what_to_send(api_client, setup):
    api_client.force_login(setup["carol"])
    response = api_client.get("/api/v1/jobs/?idle=maybe&mine=perhaps&kind=cron")
    assert response.status_code == 400
    assert set(response.json()) >= {"idle", "mine", "kind"}


def test_a_stopped_notebooks_session_reads_as_stopped_not_cancelled(client, api_client, setup):
    notebook = setup["notebook"]
    assert notebook.state == JobState.CANCELLED  # its stored state: the quota was given back at once
    client.force_login(setup["carol"])
    row = client.get("/jobs/?kind=notebook").content.decode()
    assert f'data-job="{notebook.pk}"' in row
    assert ">Stopped</span>" in row and ">Cancelled</span>" not in row
    assert ">Stopped</span>" in client.get(notebook.get_absolute_url()).content.decode()
    api_client.force_login(setup["carol"])
    shown = api_client.get(f"/api/v1/jobs/{notebook.pk}/").json()
    assert (shown["state"], shown["state_label"]) == ("cancelled", "Stopped")
    batch = api_client.get(f"/api/v1/jobs/{setup['mine'].pk}/").json()
    assert batch["state_label"] == "Queued"
