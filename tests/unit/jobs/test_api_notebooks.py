"""The notebooks API: launch (token once), list and get with the time left and the address, extend, stop and
start again; who may do what (anonymous, other team, member, lead, admin); errors in words; the audit trail."""

from __future__ import annotations

import time

import pytest

from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.choices import JobState, NotebookState
from jobs.cycle.run import run_cycle
from jobs.models import Notebook
from jobs.notebook.sessions import check_token, cull_notebooks
from tests.factories import member
from tests.sim_objects import H100


@pytest.fixture
def setup(inventory, people, settings):
    settings.PORTAL_NOTEBOOK_TTL_SECONDS = 3600
    settings.PORTAL_NOTEBOOK_MAX_TTL_SECONDS = 3 * 3600
    settings.PORTAL_NOTEBOOK_EXTEND_SECONDS = 3600
    rc = ResourceClass.objects.get(key=H100)
    for slug in ("vision", "nlp"):
        actions.set_quota(people["admin"], people[slug], rc, 2, 2)
    carol = member(people["vision"])
    return {**people, "carol": carol}


def launch(client, user, **overrides):
    client.force_authenticate(user)
    data = {"team": "vision", "name": "scratch", "resource_class": H100} | overrides
    data = {k: v for k, v in data.items() if v is not None}
    return client.post("/api/v1/notebooks/", data, format="json")


def cycle_until_running(inventory, notebook):
    """Run job cycles until the notebook's session runs (the simulated pod starts a few real seconds after its
    workload is created), at most 12 s."""
    for _ in range(60):
        run_cycle(inventory)
        notebook.session.refresh_from_db()
        if notebook.session.state == JobState.RUNNING:
            return
        time.sleep(0.2)


def test_launch_answers_the_token_once_and_the_address(api_client, setup, inventory):
    response = launch(api_client, setup["carol"])
    assert response.status_code == 201, response.json()
    data = response.json()
    notebook = Notebook.objects.get(pk=data["id"])
    assert check_token(notebook.token_hash, data["token"])
    assert data["notebook_url"] == f"https://nb-{notebook.pk}-scratch.team-vision.notebooks.example.org/"
    assert data["status"] == "Queued" and data["ttl_seconds"] == 3600 and data["image"].startswith("quay.io/jupyter/")
    again = api_client.get(f"/api/v1/notebooks/{notebook.pk}/").json()
    assert "token" not in again and again["ttl_seconds_left"] is None  # not running yet: nothing counts down
    assert AuditEvent.objects.filter(action="notebook.launch", actor=setup["carol"]).exists()


def test_errors_are_sentences_per_field(api_client, setup):
    response = launch(api_client, setup["carol"], name="Bad_Name", ttl_seconds=10 * 3600)
    assert response.status_code == 400
    errors = response.json()
    assert "lower-case" in errors["name"][0] and "At most 3 hours" in errors["ttl_seconds"][0]
    response = launch(api_client, setup["carol"], resource_class="nvidia.com/nothing")
    assert response.status_code == 400 and "No resource class" in response.json()["resource_class"][0]


def test_extend_stop_and_start_again(api_client, setup, inventory):
    notebook_id = launch(api_client, setup["carol"]).json()["id"]
    url = f"/api/v1/notebooks/{notebook_id}/"
    response = api_client.post(url + "extend/", {}, format="json")
    assert response.status_code == 400 and "not running" in response.json()["detail"]
    notebook = Notebook.objects.get(pk=notebook_id)
    cycle_until_running(inventory, notebook)
    assert notebook.session.state == JobState.RUNNING
    cull_notebooks(inventory)
    data = api_client.get(url).json()
    assert 3500 < data["ttl_seconds_left"] <= 3600 and data["status"] == "Running"
    response = api_client.post(url + "extend/", {"seconds": 1800}, format="json")
    assert response.status_code == 200 and 5300 < response.json()["ttl_seconds_left"] <= 5400
    response = api_client.post(url + "stop/")
    assert response.status_code == 200 and response.json()["state"] == NotebookState.STOPPED
    assert response.json()["stop_reason"] == "user"
    assert api_client.post(url + "stop/").status_code == 400
    response = api_client.post(url + "start/")
    assert response.status_code == 201 and response.json()["token"] and response.json()["status"] == "Queued"
    actions = list(
        AuditEvent.objects.filter(object_type="jobs.Notebook", object_id=str(notebook_id))
        .order_by("id")
        .values_list("action", flat=True)
    )
    assert actions == ["notebook.launch", "notebook.extend", "notebook.stop", "notebook.start"]


def test_a_notebook_that_reads_running_can_be_extended_at_once(api_client, client, setup, inventory):
    """The session's start starts its limits (no culler pass in between): the API and the page agree that a
    Running notebook can be extended, and at the maximum both refuse with the same sentence."""
    notebook_id = launch(api_client, setup["carol"]).json()["id"]
    url = f"/api/v1/notebooks/{notebook_id}/"
    notebook = Notebook.objects.get(pk=notebook_id)
    cycle_until_running(inventory, notebook)
    data = api_client.get(url).json()
    assert data["status"] == "Running"
    assert data["running_since"] is not None and 3500 < data["ttl_seconds_left"] <= 3600
    client.force_login(setup["carol"])
    page = client.get(notebook.get_absolute_url()).content.decode()
    assert 'data-testid="notebook-extend">Extend</button>' in page  # enabled, with no reason beside it
    response = api_client.post(url + "extend/", {}, format="json")
    assert response.status_code == 200, response.json()
    assert 7100 < response.json()["ttl_seconds_left"] <= 7200
    response = api_client.post(url + "extend/", {}, format="json")  # up to the maximum of 3 hours
    assert response.status_code == 200 and 10700 < response.json()["ttl_seconds_left"] <= 10800
    refused = api_client.post(url + "extend/", {}, format="json")
    assert refused.status_code == 400 and "already runs until the team's maximum age" in refused.json()["detail"]
    page = client.get(notebook.get_absolute_url()).content.decode()
    assert 'data-testid="notebook-extend" disabled' in page
    assert refused.json()["detail"].replace("'", "&#x27;") in page


@pytest.mark.parametrize(
    ("who", "see", "stop"),
    [("anonymous", 403, 403), ("bob", 404, 404), ("carol", 200, 200), ("alice", 200, 200), ("admin", 200, 200)],
)
def test_permissions(api_client, setup, who, see, stop):
    notebook_id = launch(api_client, setup["carol"]).json()["id"]
    api_client.force_authenticate(None if who == "anonymous" else setup[who])
    url = f"/api/v1/notebooks/{notebook_id}/"
    assert api_client.get(url).status_code in ((401, 403) if see == 403 else (see,))
    # A lead or an admin stopping carol's notebook says why; carol herself need not.
    body = None if who == "carol" else {"reason": "Reclaiming the GPUs."}
    response = api_client.post(url + "stop/", body, format="json")
    assert response.status_code in ((401, 403) if stop == 403 else (stop,))
    if stop == 200:
        expected = "user" if who == "carol" else "admin"
        assert response.json()["stop_reason"] == expected


def test_a_plain_member_cannot_stop_someone_elses_notebook(api_client, setup):
    dave = member(setup["vision"], "dave")
    notebook_id = launch(api_client, setup["carol"]).json()["id"]
    api_client.force_authenticate(dave)
    response = api_client.post(f"/api/v1/notebooks/{notebook_id}/stop/")
    assert response.status_code == 403 and "owner" in response.json()["detail"]


def test_schema_lists_the_notebook_actions(openapi_schema):
    paths = openapi_schema["paths"]
    for action in ("extend", "stop", "start"):
        assert f"/api/v1/notebooks/{{id}}/{action}/" in paths


def test_list_filters_by_state_and_team(api_client, setup):
    first = launch(api_client, setup["carol"]).json()["id"]
    launch(api_client, setup["carol"], name="second")
    api_client.post(f"/api/v1/notebooks/{first}/stop/")
    stopped = api_client.get("/api/v1/notebooks/", {"state": "stopped"}).json()["results"]
    assert [n["id"] for n in stopped] == [first]
    assert api_client.get("/api/v1/notebooks/", {"team": "nlp"}).json()["count"] == 0
    assert api_client.get("/api/v1/notebooks/", {"q": "seco"}).json()["count"] == 1


def test_someone_in_one_team_may_leave_the_team_out(api_client, setup):
    response = launch(api_client, setup["carol"], team=None)
    assert response.status_code == 201, response.json()
    assert response.json()["team"] == "vision"
    response = launch(api_client, setup["carol"], team=None)
    assert response.status_code == 400 and "already has a notebook called scratch" in response.json()["name"][0]


@pytest.mark.parametrize("who", ["alice", "admin"])
def test_only_the_owner_ever_receives_a_notebooks_token(api_client, setup, who):
    """Audit finding 2: a lead or admin who starts a member's notebook never receives its access token."""
    notebook_id = launch(api_client, setup["carol"]).json()["id"]
    url = f"/api/v1/notebooks/{notebook_id}/"
    assert api_client.post(url + "stop/").status_code == 200
    api_client.force_authenticate(setup[who])
    response = api_client.post(url + "start/")
    assert response.status_code == 201 and response.json()["status"] == "Queued"
    assert "token" not in response.json()
    assert AuditEvent.objects.filter(action="notebook.start", actor=setup[who]).exists()
    api_client.force_authenticate(setup["carol"])
    assert api_client.post(url + "stop/").status_code == 200
    response = api_client.post(url + "start/")
    notebook = Notebook.objects.get(pk=notebook_id)
    assert response.status_code == 201 and check_token(notebook.token_hash, response.json()["token"])


def test_a_notebook_is_checked_as_a_job_is_and_every_problem_is_listed_at_once(api_client, setup):
    """Audit finding 6: one validation path for every kind. The notebook API checks the image grammar, the
    drivers' CUDA, CPU bounds and unknown fields as the job API does, all in one answer."""
    response = launch(api_client, setup["carol"], image="Not An Image!", cpu=0, gpus=2, memory_mb=10)
    assert response.status_code == 400, response.json()
    errors = response.json()
    assert {"image", "cpu", "gpus", "memory_mb"} <= set(errors), errors
    assert "container image reference" in errors["image"][0]
    assert "Unknown field" in errors["gpus"][0]
    assert not Notebook.objects.exists()


@pytest.mark.parametrize("cpu", [0, -1, "0.01", 1000])
def test_notebook_cpu_outside_bounds_is_refused_naming_the_field(api_client, setup, cpu):
    response = launch(api_client, setup["carol"], cpu=cpu)
    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["cpu"], response.json()
    assert not Notebook.objects.exists()


def test_a_notebook_image_too_new_for_the_drivers_is_refused(api_client, setup):
    response = launch(api_client, setup["carol"], image="nvidia/cuda:13.9.0-runtime-ubuntu24.04")
    assert response.status_code == 400, response.json()
    assert "CUDA 13.9" in response.json()["image"][0]


def test_notebook_env_names_follow_kubernetes_rule(api_client, setup):
    response = launch(api_client, setup["carol"], env={"FOO\n": "x"})
    assert response.status_code == 400 and "env" in response.json()
    response = launch(api_client, setup["carol"], env={"my.var-x": "x"})
    assert response.status_code == 201, response.json()


def test_starting_a_notebook_again_checks_its_spec_as_a_launch_does(api_client, setup):
    notebook_id = launch(api_client, setup["carol"]).json()["id"]
    url = f"/api/v1/notebooks/{notebook_id}/"
    assert api_client.post(url + "stop/").status_code == 200
    Notebook.objects.filter(pk=notebook_id).update(image="nvidia/cuda:13.9.0-runtime-ubuntu24.04")
    response = api_client.post(url + "start/")
    assert response.status_code == 400 and "CUDA 13.9" in response.json()["image"][0]
    assert Notebook.objects.get(pk=notebook_id).state == NotebookState.STOPPED
