"""The notebooks' authorisation endpoint (jobs.notebook.workspace): the owner's Open makes a one-time ticket, the
ingress trades it for the notebook's own cookie, and only that cookie, for that notebook and its running session,
lets a request through. Driven through Django's test client as the ingress would ask (tests/browser/
test_workspace_flow.py does it with a real nginx and Jupyter server)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from http.cookies import SimpleCookie
from urllib.parse import parse_qs, urlsplit

import pytest
import time_machine
from django.core import signing

from accounts.choices import MembershipRole
from core.models import AuditEvent
from gpus.models import ResourceClass
from jobs import actions
from jobs.checks import notebook_access_settings
from jobs.choices import JobKind, JobState, NotebookState
from jobs.models import Job, Notebook, WorkspaceTicket
from jobs.notebook import workspace
from jobs.notebook.kind import NotebookKind
from tests.factories import MembershipFactory, UserFactory
from tests.sim_objects import H100

TEMPLATE = "http://127.0.0.1:8089/{namespace}/{name}/"
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def portal_access(settings):
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"
    settings.PORTAL_NOTEBOOK_URL_TEMPLATE = TEMPLATE
    settings.PORTAL_WORKSPACE_TICKET_SECONDS = 30
    settings.PORTAL_WORKSPACE_COOKIE_SECONDS = 3600


@pytest.fixture
def travel():
    with time_machine.travel(START, tick=False) as traveller:
        yield traveller


def running_notebook(owner, name="explore") -> Notebook:
    team = owner.memberships.first().team
    rc = ResourceClass.objects.get(key="nvidia.com/mig-1g.10gb@NVIDIA-A100-SXM4-80GB")
    notebook = Notebook.objects.create(
        team=team, owner=owner, resource_class=rc, name=name, image="quay.io/jupyter/base-notebook", count=1,
        cpu_millicores=1000, memory_mb=2048, ttl_seconds=3600, idle_timeout_seconds=3600,
    )  # fmt: skip
    start_session(notebook)
    return notebook


def start_session(notebook: Notebook) -> Job:
    job = Job.objects.create(
        team=notebook.team, owner=notebook.owner, resource_class=notebook.resource_class, kind=JobKind.NOTEBOOK,
        notebook=notebook, name=notebook.name, image=notebook.image, count=1, cpu_millicores=1000, memory_mb=2048,
        state=JobState.RUNNING, node_name="gpu-a100-mig-01",
    )  # fmt: skip
    Notebook.objects.filter(pk=notebook.pk).update(session=job, state=NotebookState.ACTIVE)
    notebook.refresh_from_db()
    return job


def ask(client, url: str, cookies: dict | None = None, style: str = "nginx"):
    """The ingress's question about a request for ``url`` (its headers as each ingress sets them)."""
    parts = urlsplit(url)
    uri = parts.path + (f"?{parts.query}" if parts.query else "")
    headers = {
        "nginx": {"HTTP_X_FORWARDED_HOST": parts.netloc, "HTTP_X_ORIGINAL_URI": uri},
        "ingress-nginx": {"HTTP_X_ORIGINAL_URL": url},
        "traefik": {"HTTP_X_FORWARDED_HOST": parts.netloc, "HTTP_X_FORWARDED_URI": uri},
        "envoy": {"HTTP_X_FORWARDED_HOST": parts.netloc},
    }[style]
    client.cookies = SimpleCookie(cookies or {})
    # Envoy's ext_authz appends the original path and query to the endpoint's path.
    return client.get("/auth/workspace" + uri if style == "envoy" else "/auth/workspace/", **headers)


def open_as(client, user, notebook: Notebook):
    client.force_login(user)
    response = client.post(f"/notebooks/{notebook.pk}/open/")
    client.logout()
    return response


def opened(client, user, notebook: Notebook) -> tuple[str, str]:
    """The owner's Open and the exchange: the notebook's URL with its ticket, and the cookie the exchange gave."""
    response = open_as(client, user, notebook)
    assert response.status_code == 302
    url = response["Location"]
    answer = ask(client, url)
    assert answer.status_code == 204
    return url, answer.cookies[workspace.COOKIE_NAME].value


@pytest.mark.parametrize("style", ["nginx", "ingress-nginx", "traefik", "envoy"])
def test_the_owner_opens_in_one_click_and_the_cookie_lets_every_request_through(
    client, inventory, people, portal_access, style
):
    notebook = running_notebook(people["alice"])
    response = open_as(client, people["alice"], notebook)
    assert response.status_code == 302
    url = response["Location"]
    assert url.startswith(f"http://127.0.0.1:8089/team-vision/{notebook.resource_name}/?portal-ticket=")
    answer = ask(client, url, style=style)
    assert answer.status_code == 204 and answer.content == b""
    cookie = answer.cookies[workspace.COOKIE_NAME]
    assert cookie["path"] == f"/team-vision/{notebook.resource_name}/" and cookie["httponly"]
    assert not cookie["secure"]  # an http:// address; an https:// one gets a Secure cookie (below)
    assert int(cookie["max-age"]) == 3600
    # Every later request of the browser carries it, the ticket long gone: in.
    for path in ("api/status", "lab", "api/kernels?x=1"):
        assert ask(client, notebook.url + path, {cookie.key: cookie.value}, style).status_code == 204
    event = AuditEvent.objects.get(action="notebook.open")
    assert event.actor == people["alice"] and event.object_id == str(notebook.pk)
    assert event.after["session"] == notebook.session_id
    # Only the ticket's hash is kept.
    ticket = parse_qs(urlsplit(url).query)["portal-ticket"][0]
    assert not WorkspaceTicket.objects.filter(digest=ticket).exists()


def test_an_https_address_gets_a_secure_cookie(client, inventory, people, portal_access, settings):
    settings.PORTAL_NOTEBOOK_URL_TEMPLATE = "https://{name}.{namespace}.notebooks.example.org/"
    notebook = running_notebook(people["alice"])
    url = open_as(client, people["alice"], notebook)["Location"]
    answer = ask(client, url)
    cookie = answer.cookies[workspace.COOKIE_NAME]
    assert answer.status_code == 204 and cookie["secure"] and cookie["path"] == "/"


def test_nobody_gets_in_without_the_notebooks_cookie(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    assert ask(client, notebook.url).status_code == 401
    assert ask(client, notebook.url + "api/status", {"sessionid": "x"}).status_code == 401
    assert ask(client, notebook.url + "lab?portal-ticket=made-up").status_code == 401


def test_a_ticket_is_used_once(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    url, _cookie = opened(client, people["alice"], notebook)
    assert ask(client, url).status_code == 401  # a second browser with the same link: no


def test_an_expired_ticket_is_refused(client, inventory, people, portal_access, travel):
    notebook = running_notebook(people["alice"])
    url = open_as(client, people["alice"], notebook)["Location"]
    travel.shift(timedelta(seconds=31))
    assert ask(client, url).status_code == 401
    # ... and the next Open clears it away.
    open_as(client, people["alice"], notebook)
    assert WorkspaceTicket.objects.count() == 1


def test_a_cookie_opens_only_its_own_notebook(client, inventory, people, portal_access):
    first = running_notebook(people["alice"], "first")
    second = running_notebook(people["alice"], "second")
    _url, cookie = opened(client, people["alice"], first)
    # Sent to the other notebook's address (a proxy that sets one Domain for all, or a copy by hand): not in.
    assert ask(client, second.url, {workspace.COOKIE_NAME: cookie}).status_code == 401
    # A ticket for one notebook does not open another.
    url = open_as(client, people["alice"], first)["Location"]
    assert ask(client, second.url + "?" + urlsplit(url).query).status_code == 401


def test_a_tampered_or_expired_cookie_is_refused(client, inventory, people, portal_access, travel):
    notebook = running_notebook(people["alice"])
    _url, cookie = opened(client, people["alice"], notebook)
    name = workspace.COOKIE_NAME
    claims = signing.loads(cookie, salt=workspace.SIGNING_SALT)
    forged = signing.dumps(claims | {"u": people["bob"].pk}, salt="another salt")
    payload, signature = cookie.split(":", 1)
    for value in (forged, cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB"), f"{payload}x:{signature}"):
        assert ask(client, notebook.url, {name: value}).status_code == 401
    assert ask(client, notebook.url, {name: cookie}).status_code == 204
    travel.shift(timedelta(seconds=3601))
    assert ask(client, notebook.url, {name: cookie}).status_code == 401


def test_a_stopped_or_restarted_sessions_cookie_stops_working(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    url, cookie = opened(client, people["alice"], notebook)
    name = workspace.COOKIE_NAME
    Job.objects.filter(pk=notebook.session_id).update(state=JobState.CANCELLED)
    Notebook.objects.filter(pk=notebook.pk).update(state=NotebookState.STOPPED)
    assert ask(client, notebook.url, {name: cookie}).status_code == 403
    start_session(Notebook.objects.get(pk=notebook.pk))  # "Start again": a new session, a new Job
    assert ask(client, notebook.url, {name: cookie}).status_code == 403
    _url, fresh = opened(client, people["alice"], notebook)  # a new Open gets in
    assert ask(client, notebook.url, {name: fresh}).status_code == 204


def test_only_the_owner_can_open(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    carol = UserFactory(username="carol")
    MembershipFactory(user=carol, team=people["vision"], role=MembershipRole.MEMBER)
    for user in (carol, people["admin"]):
        response = open_as(client, user, notebook)
        assert response.status_code == 302 and response["Location"] == notebook.get_absolute_url()
    assert open_as(client, people["bob"], notebook).status_code == 404  # another team's: not even seen
    assert not WorkspaceTicket.objects.exists() and not AuditEvent.objects.filter(action="notebook.open").exists()
    client.force_login(carol)
    page = client.post(f"/notebooks/{notebook.pk}/open/", follow=True).text
    assert "Only alice, who owns notebook explore, can open it" in page
    assert 'data-testid="notebook-open"' not in page


def test_a_departed_owners_cookie_stops_working(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    _url, cookie = opened(client, people["alice"], notebook)
    people["alice"].is_active = False
    people["alice"].save()
    assert ask(client, notebook.url, {workspace.COOKIE_NAME: cookie}).status_code == 403


def test_a_queued_session_cannot_be_opened_yet(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    Job.objects.filter(pk=notebook.session_id).update(state=JobState.QUEUED)
    response = open_as(client, people["alice"], notebook)
    assert response["Location"] == notebook.get_absolute_url() and not WorkspaceTicket.objects.exists()


def test_addresses_that_are_no_notebooks_are_refused(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    _url, cookie = opened(client, people["alice"], notebook)
    name = workspace.COOKIE_NAME
    for url in (
        "http://127.0.0.1:8089/team-vision/nb-999999-gone/",
        "http://127.0.0.1:8089/team-nlp/" + notebook.resource_name + "/",  # its name under another namespace
        "http://evil.example:8089/team-vision/" + notebook.resource_name + "/",
    ):
        assert ask(client, url, {name: cookie}).status_code == 403, url
    # A path a proxy would normalise into another notebook's: refused, not judged by its first segments.
    for step in ("../nb-2-other/api", "%2e%2e/nb-2-other/", "./api", "x%2F..%2Fy/", "a%5c..%5cb"):
        assert ask(client, notebook.url + step, {name: cookie}).status_code == 403, step
    client.cookies = SimpleCookie({name: cookie})
    assert client.get("/auth/workspace/").status_code == 403  # an ingress that says nothing


def test_with_token_access_there_is_no_open(client, inventory, people, settings):
    settings.PORTAL_NOTEBOOK_URL_TEMPLATE = TEMPLATE
    notebook = running_notebook(people["alice"])
    client.force_login(people["alice"])
    assert 'data-testid="notebook-open"' not in client.get(notebook.get_absolute_url()).text
    assert client.post(f"/notebooks/{notebook.pk}/open/")["Location"] == notebook.get_absolute_url()
    assert not WorkspaceTicket.objects.exists()


def test_the_page_offers_open_to_the_owner_of_a_running_session(client, inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    client.force_login(people["alice"])
    page = client.get(notebook.get_absolute_url()).text
    assert 'data-testid="notebook-open"' in page and 'data-testid="notebook-token' not in page


def test_the_workload_serves_under_its_address_without_a_password(inventory, people, portal_access):
    notebook = running_notebook(people["alice"])
    _volume, _service, workload = NotebookKind().render(notebook.session)
    pod = workload["spec"]["template"]["spec"]
    container = pod["containers"][0]
    base = f"/team-vision/{notebook.resource_name}/"
    assert f"--ServerApp.base_url={base}" in container["args"]
    assert "--IdentityProvider.token=" in container["args"]
    assert "--PasswordIdentityProvider.password_required=False" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--PasswordIdentityProvider.hashed_password")]
    assert container["readinessProbe"]["httpGet"]["path"] == f"{base}api"
    assert container["securityContext"]["privileged"] is False and pod["securityContext"]["runAsNonRoot"] is True
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    assert all("hostPath" not in volume for volume in pod["volumes"])


def test_with_token_access_the_workload_keeps_its_password(inventory, people, settings):
    notebook = running_notebook(people["alice"])
    Notebook.objects.filter(pk=notebook.pk).update(token_hash="sha256:0123456789ab:" + "f" * 64)
    notebook.refresh_from_db()
    _volume, _service, workload = NotebookKind().render(notebook.session)
    args = workload["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--ServerApp.base_url=/" in args and "--PasswordIdentityProvider.password_required=True" in args
    assert f"--PasswordIdentityProvider.hashed_password={notebook.token_hash}" in args


def test_the_start_up_check_refuses_an_unknown_access_and_a_template_without_a_name(settings):
    settings.PORTAL_NOTEBOOK_URL_TEMPLATE = TEMPLATE
    assert notebook_access_settings() == []
    settings.PORTAL_NOTEBOOK_ACCESS = "sso"
    [error] = notebook_access_settings()
    assert error.id == "jobs.E003" and "use token" in error.msg
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"
    assert notebook_access_settings() == []
    settings.PORTAL_NOTEBOOK_URL_TEMPLATE = "https://notebooks.example.org/?nb={name}"
    assert [m.id for m in notebook_access_settings()] == ["jobs.E004"]


def test_with_portal_access_the_api_sends_no_token(api_client, inventory, people, portal_access):
    actions.set_quota(people["admin"], people["vision"], ResourceClass.objects.get(key=H100), 1, 1)
    api_client.force_authenticate(people["alice"])
    response = api_client.post(
        "/api/v1/notebooks/", {"team": "vision", "name": "scratch", "resource_class": H100}, format="json"
    )
    assert response.status_code == 201, response.json()
    assert "token" not in response.json()


def test_a_request_with_a_valid_cookie_costs_one_query(
    client, inventory, people, portal_access, django_assert_num_queries
):
    notebook = running_notebook(people["alice"])
    _url, cookie = opened(client, people["alice"], notebook)
    kernels = notebook.url + "api/kernels"
    with django_assert_num_queries(1):  # the notebook with its team, cluster, owner and session, in one SELECT
        assert ask(client, kernels, {workspace.COOKIE_NAME: cookie}).status_code == 204
