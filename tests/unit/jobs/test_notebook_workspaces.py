# ruff: noqa: F811
"""Workspace kinds (jobs.notebook.workspaces): what each renders, the portal sign-in the other kinds need, the idle
signal each feeds the culler (code-server's /healthz heartbeat from the simulated cluster's load model, RStudio's
latest request through the sign-in endpoint), and the launch paths that choose one (API, form)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from jobs.choices import JobState, NotebookState, StopReason, WorkspaceKind
from jobs.models import Notebook
from jobs.notebook import culling, workspace
from jobs.notebook.sessions import cull_notebooks, heartbeat_time, start_notebook, stop_notebook
from jobs.notebook.workspaces import WORKSPACES
from jobs.render import NOTEBOOK_HOME

# The simulated cluster and the clock of the notebooks' own tests, as fixtures (hence F811 on their parameters).
from tests.unit.jobs.test_notebooks import MIN, START, evidence, launch, samples, settle, sim, travel  # noqa: F401
from tests.unit.jobs.test_workspace_auth import ask

T0 = START


@pytest.fixture
def portal(settings):
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"


# -- the pure rule --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"activity": T0 + 25 * MIN}, T0 + 25 * MIN),
        ({"activity": T0 + 25 * MIN, "gpu_last_busy": T0 + 40 * MIN}, T0 + 40 * MIN),
        ({"activity": T0 + 90 * MIN}, T0 + 60 * MIN),  # a clock ahead of the portal's counts as now, no later
        ({"activity": T0 - 10 * MIN}, T0),  # before the session: the start is later
        ({"activity": T0 + 50 * MIN, "gpu_newest": T0 + 50 * MIN}, None),  # no readings lately: still unknown
    ],
)
def test_the_servers_own_activity_moves_the_last_activity(changes, expected):
    assert culling.last_activity(evidence(**changes), T0 + 60 * MIN, timedelta(seconds=60)) == expected


def test_code_servers_heartbeat_is_read_in_milliseconds():
    assert heartbeat_time({"status": "alive", "lastHeartbeat": int(T0.timestamp() * 1000) + 1500}) == T0 + timedelta(
        seconds=1.5
    )
    assert heartbeat_time({"status": "expired", "lastHeartbeat": 0}) is None  # never beat yet
    assert heartbeat_time({"lastHeartbeat": "soon"}) is None and heartbeat_time(None) is None


# -- rendering ------------------------------------------------------------------------------------------------


def _rendered(cluster, nb):
    [workload] = cluster.list_workloads("team-vision")
    pod = workload["spec"]["template"]["spec"]
    service = cluster.get_service("team-vision", nb.resource_name)
    return pod, pod["containers"][0], service


@pytest.mark.parametrize(
    ("kind", "port", "probe", "words"),
    [
        ("code-server", 8080, "/healthz", ["code-server", "--bind-addr=0.0.0.0:8080", "--auth=none", NOTEBOOK_HOME]),
        ("rstudio", 8787, "/", ["rserver", "--www-port=8787", "--auth-none=1", "--www-root-path=/"]),
    ],
)
def test_each_kind_runs_its_server_on_its_port_with_every_restriction(sim, travel, people, portal, kind, port, probe,
                                                                      words):  # fmt: skip
    nb = launch(people["alice"], workspace=kind).notebook
    assert nb.workspace == kind and nb.image == WORKSPACES[kind].default_image()
    settle(sim, travel)
    pod, container, service = _rendered(sim, nb)
    text = " ".join(container["command"] + container["args"])
    assert all(word in text for word in words), text
    assert "start-notebook" not in text and "PasswordIdentityProvider" not in text
    assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert container["readinessProbe"]["httpGet"] == {"path": probe, "port": port}
    assert service["spec"]["ports"][0]["targetPort"] == "http"  # the container's port by name
    assert {"name": "HOME", "value": NOTEBOOK_HOME} in container["env"]
    assert {"name": "home", "mountPath": NOTEBOOK_HOME} in container["volumeMounts"]
    assert container["securityContext"] | {} == {
        "privileged": False, "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
    }  # fmt: skip
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1000
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert not any("hostPath" in volume for volume in pod["volumes"])


def test_jupyter_stays_as_it_was(sim, travel, people):
    nb = launch(people["alice"]).notebook
    assert nb.workspace == WorkspaceKind.JUPYTER
    settle(sim, travel)
    _, container, service = _rendered(sim, nb)
    assert container["command"] == ["start-notebook.py"] and "--ServerApp.port=8888" in container["args"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/api", "port": 8888}
    assert container["ports"][0]["containerPort"] == 8888 and service["spec"]["ports"][0]["targetPort"] == "http"
    assert not any(item.get("name") == "HOME" for item in container["env"])


# -- who may launch what --------------------------------------------------------------------------------------


def test_the_other_kinds_need_the_portals_sign_in_and_an_unknown_kind_lists_the_choices(sim, travel, people):
    with pytest.raises(ValidationError) as refused:
        launch(people["alice"], workspace="code-server")
    assert "PORTAL_NOTEBOOK_ACCESS=portal" in refused.value.message_dict["workspace"][0]
    with pytest.raises(ValidationError) as refused:
        launch(people["alice"], workspace="emacs", name="Bad_Name")
    problems = refused.value.message_dict
    assert "jupyter, code-server, rstudio" in problems["workspace"][0] and "name" in problems  # every problem at once
    assert not Notebook.objects.exists()


def test_start_again_refuses_a_kind_whose_sign_in_was_switched_off(sim, travel, people, settings):
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"
    nb = launch(people["alice"], workspace="rstudio").notebook
    stop_notebook(people["alice"], nb, StopReason.USER, sim)
    settings.PORTAL_NOTEBOOK_ACCESS = "token"
    with pytest.raises(ValidationError) as refused:
        start_notebook(people["alice"], Notebook.objects.get(pk=nb.pk))
    assert "workspace" in refused.value.message_dict


# -- idle signals feeding the culler --------------------------------------------------------------------------


def test_an_idle_code_server_is_warned_and_stopped_by_its_heartbeat(sim, travel, people, portal):
    nb = launch(people["alice"], workspace="code-server", env=[{"name": "SIM_GPU_LOAD", "value": "idle"}]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    since = nb.running_since
    samples(nb.session, since, since + 60 * MIN, 1.0)
    travel.move_to(since + 15 * MIN)
    health = sim.workspace_health("team-vision", nb.resource_name, nb.session.pod_name)
    assert health["status"] == "expired" and heartbeat_time(health) <= since + MIN  # no use since it started
    assert cull_notebooks(sim)["warned"] == 1
    travel.move_to(since + 30 * MIN)
    assert cull_notebooks(sim)["stopped"] == 1
    nb.refresh_from_db()
    assert (nb.state, nb.stop_reason) == (NotebookState.STOPPED, StopReason.IDLE)
    assert nb.session.state == JobState.CANCELLED


def test_a_code_server_in_use_stays_while_its_gpus_are_quiet(sim, travel, people, portal):
    nb = launch(people["alice"], workspace="code-server", env=[{"name": "SIM_GPU_LOAD", "value": "train"}]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    since = nb.running_since
    samples(nb.session, since, since + 60 * MIN, 1.0)  # the readings say idle; the editor's heartbeat says in use
    travel.move_to(since + 45 * MIN)
    health = sim.workspace_health("team-vision", nb.resource_name, nb.session.pod_name)
    assert health["status"] == "alive"
    assert cull_notebooks(sim) | {} == {"checked": 1, "warned": 0, "stopped": 0, "ended": 0, "repaired": 0}
    nb.refresh_from_db()
    assert nb.last_activity_at == since + 45 * MIN and nb.idle_deadline == since + 75 * MIN


def test_only_a_code_server_answers_healthz(sim, travel, people):
    nb = launch(people["alice"]).notebook
    settle(sim, travel)
    nb.refresh_from_db()
    assert sim.workspace_health("team-vision", nb.resource_name, nb.session.pod_name) is None
    assert sim.workspace_health("team-vision", "nb-nothing", nb.session.pod_name) is None


def test_rstudio_is_in_use_while_the_sign_in_lets_its_requests_through(client, sim, travel, people, settings):
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"
    settings.PORTAL_NOTEBOOK_URL_TEMPLATE = "http://127.0.0.1:8089/{namespace}/{name}/"
    nb = launch(people["alice"], workspace="rstudio", env=[{"name": "SIM_GPU_LOAD", "value": "idle"}]).notebook
    settle(sim, travel)
    cull_notebooks(sim)
    nb.refresh_from_db()
    since = nb.running_since
    samples(nb.session, since, since + 60 * MIN, 1.0)
    travel.move_to(since + 10 * MIN)
    opened = workspace.open_url(people["alice"], nb)
    answer = ask(client, opened)
    assert answer.status_code == 204
    cookie = {workspace.COOKIE_NAME: answer.cookies[workspace.COOKIE_NAME].value}
    assert Notebook.objects.get(pk=nb.pk).last_request_at == since + 10 * MIN
    travel.move_to(since + 10 * MIN + timedelta(seconds=30))
    assert ask(client, nb.url + "events/get_events", cookie).status_code == 204
    assert Notebook.objects.get(pk=nb.pk).last_request_at == since + 10 * MIN  # at most one write a minute
    travel.move_to(since + 20 * MIN)
    assert ask(client, nb.url, cookie).status_code == 204
    assert Notebook.objects.get(pk=nb.pk).last_request_at == since + 20 * MIN
    travel.move_to(since + 35 * MIN)
    counts = cull_notebooks(sim)
    nb.refresh_from_db()
    assert counts["warned"] == 1 and nb.idle_deadline == since + 50 * MIN  # 30 minutes after its latest request
    assert ask(client, nb.url, {}).status_code == 401
    travel.move_to(since + 50 * MIN)
    assert cull_notebooks(sim)["stopped"] == 1


# -- API and form ---------------------------------------------------------------------------------------------


def test_the_api_takes_a_workspace_and_refuses_an_unknown_one_with_the_choices(api_client, sim, people, portal):
    api_client.force_authenticate(people["alice"])
    body = {"team": "vision", "name": "editor", "resource_class": "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"}
    refused = api_client.post("/api/v1/notebooks/", body | {"workspace": "emacs"}, format="json")
    assert refused.status_code == 400
    assert "choose one of jupyter, code-server, rstudio" in refused.json()["workspace"][0]
    made = api_client.post("/api/v1/notebooks/", body | {"workspace": "code-server"}, format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["workspace"] == "code-server" and made.json()["image"].startswith("codercom/code-server:")
    assert api_client.get(f"/api/v1/notebooks/{made.json()['id']}/").json()["workspace"] == "code-server"


def test_the_api_refuses_the_other_kinds_without_the_portals_sign_in(api_client, sim, people):
    api_client.force_authenticate(people["alice"])
    body = {"team": "vision", "name": "editor", "resource_class": "nvidia.com/gpu@NVIDIA-H100-80GB-HBM3"}
    refused = api_client.post("/api/v1/notebooks/", body | {"workspace": "rstudio"}, format="json")
    assert refused.status_code == 400 and "PORTAL_NOTEBOOK_ACCESS=portal" in refused.json()["workspace"][0]


def test_the_launch_form_offers_the_kinds_and_the_pages_show_them(client, sim, people, settings):
    client.force_login(people["alice"])
    page = client.get(reverse("jobs:notebook-list"))
    assert [value for value, _ in page.context["form"].fields["workspace"].choices] == ["jupyter"]
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"
    page = client.get(reverse("jobs:notebook-list"))
    assert [value for value, _ in page.context["form"].fields["workspace"].choices] == [
        "jupyter", "code-server", "rstudio",
    ]  # fmt: skip
    assert settings.PORTAL_RSTUDIO_IMAGE in page.content.decode()  # offered in the image list
    form = {"team": people["vision"].pk, "name": "stats", "workspace": "rstudio", "image": "",
            "resource_class": page.context["form"].fields["resource_class"].queryset.first().pk, "count": 1, "cpu": 4,
            "memory_gib": 16, "volume_gib": 20, "ttl_hours": "", "idle_minutes": ""}  # fmt: skip
    response = client.post(reverse("jobs:notebook-list"), form)
    nb = Notebook.objects.get(name="stats")
    assert response.status_code == 302 and nb.workspace == "rstudio" and nb.image == settings.PORTAL_RSTUDIO_IMAGE
    assert "RStudio Server" in client.get(nb.get_absolute_url()).content.decode()
    assert "RStudio Server" in client.get(reverse("jobs:notebook-list")).content.decode()
