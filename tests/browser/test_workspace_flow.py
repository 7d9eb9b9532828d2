"""One-click sessions end to end: the portal (live server), a real Jupyter server started with the arguments the
notebook's pod gets (no token, base_url from its address), and Debian's nginx in front of it with
deploy/proxy/workspace.conf.template asking the portal about every request (auth_request). In Chromium the owner
clicks Open and is in Jupyter; another member of the team and an anonymous browser are refused by nginx; once the
owner stops the session, the cookie that got them in no longer does.

The portal runs on ``localhost`` and the notebooks on ``127.0.0.1``: two hosts, so the browser keeps their cookies
apart as it would a portal and a notebooks domain."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import string
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from django.utils import timezone

from accounts.choices import MembershipRole
from cluster.sim import SimulatedCluster
from gpus.models import ResourceClass
from gpus.reconcile import sync_inventory
from jobs.choices import JobKind, JobState
from jobs.models import Job, Notebook
from jobs.notebook import workspace
from jobs.notebook.kind import NotebookKind
from jobs.notebook.sessions import start_clocks
from tests.conftest import REPO
from tests.factories import MembershipFactory, UserFactory
from tests.sim_objects import DEMO_SCENARIO, H100

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

NGINX = next((p for p in (shutil.which("nginx"), "/usr/sbin/nginx") if p and os.access(p, os.X_OK)), None)
JUPYTER = REPO / ".venv" / "bin" / "jupyter-server"
NGINX_MAIN = """worker_processes 1;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {prefix}/access.log;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    include {prefix}/workspace.conf;
}}
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def answers(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - a local test server
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def wait_until(proc: subprocess.Popen, log: Path, ready, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    pytest.fail(f"{what} did not start:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=20)


@pytest.fixture
def team_notebook(live_server, people, settings, tmp_path, monkeypatch):
    """Alice's running notebook whose address is under the nginx this fixture starts, a Jupyter server behind it,
    and Carol, another member of her team. Yields (notebook, carol, the simulated cluster Stop talks to)."""
    if NGINX is None:
        pytest.fail("nginx is not installed (apt-get install nginx)")
    proxy_port, jupyter_port = free_port(), free_port()
    settings.PORTAL_NOTEBOOK_ACCESS = "portal"
    settings.PORTAL_NOTEBOOK_URL_TEMPLATE = f"http://127.0.0.1:{proxy_port}/{{namespace}}/{{name}}/"
    settings.PORTAL_LIVE_POLL_SECONDS = 0
    cluster = SimulatedCluster(tmp_path / "sim.json", scenario=DEMO_SCENARIO)
    sync_inventory(cluster)
    monkeypatch.setattr("jobs.notebook.views.get_backend", lambda: cluster)
    rc = ResourceClass.objects.get(key=H100)
    notebook = Notebook.objects.create(
        team=people["vision"], owner=people["alice"], resource_class=rc, name="scratch",
        image="quay.io/jupyter/base-notebook", count=1, cpu_millicores=1000, memory_mb=2048, ttl_seconds=3600,
        idle_timeout_seconds=3600,
    )  # fmt: skip
    job = Job.objects.create(
        team=notebook.team, owner=notebook.owner, resource_class=rc, kind=JobKind.NOTEBOOK, notebook=notebook,
        name=notebook.name, image=notebook.image, count=1, cpu_millicores=1000, memory_mb=2048,
        state=JobState.RUNNING, node_name="gpu-h100-01", started_at=timezone.now(),
    )  # fmt: skip
    Notebook.objects.filter(pk=notebook.pk).update(session=job)
    start_clocks({job.pk: job.started_at})  # as the session's start does
    notebook.refresh_from_db()
    carol = UserFactory(username="carol")
    MembershipFactory(user=carol, team=people["vision"], role=MembershipRole.MEMBER)

    # The Jupyter server with the pod's own arguments, on this host's loopback and a free port.
    _volume, _service, workload = NotebookKind().render(job)
    args = [
        arg for arg in workload["spec"]["template"]["spec"]["containers"][0]["args"]
        if not arg.startswith(("--ServerApp.ip=", "--ServerApp.port="))
    ]  # fmt: skip
    home = tmp_path / "home"
    home.mkdir()
    env = os.environ | {
        "HOME": str(home), "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
        "JUPYTER_RUNTIME_DIR": str(home / "runtime"),
    }  # fmt: skip
    jupyter_log = tmp_path / "jupyter.log"
    with open(jupyter_log, "w") as out:
        jupyter = subprocess.Popen(
            [str(JUPYTER), *args, "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={jupyter_port}",
             f"--ServerApp.root_dir={home}", "--ServerApp.open_browser=False",
             # The pod runs as jovyan (runAsNonRoot); a CI container may run this test as root.
             *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else [])],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
    base = workspace.base_path(notebook)
    wait_until(jupyter, jupyter_log, lambda: answers(f"http://127.0.0.1:{jupyter_port}{base}api") == 200, "Jupyter")

    # nginx in front of it, asking the live server.
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    portal = urlsplit(live_server.url)
    template = string.Template((REPO / "deploy" / "proxy" / "workspace.conf.template").read_text())
    (prefix / "workspace.conf").write_text(
        template.safe_substitute(
            WORKSPACE_LISTEN=f"127.0.0.1:{proxy_port}",
            PORTAL_AUTH_URL=f"http://127.0.0.1:{portal.port}/auth/workspace/",
            PORTAL_HOST=portal.hostname,
            WORKSPACE_UPSTREAM=f"http://127.0.0.1:{jupyter_port}",
        )
    )
    (prefix / "nginx.conf").write_text(NGINX_MAIN.format(prefix=prefix))
    nginx_log = prefix / "error.log"
    nginx_log.touch()
    nginx = subprocess.Popen(
        [NGINX, "-p", str(prefix), "-e", str(nginx_log), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    wait_until(nginx, nginx_log, lambda: answers(f"{notebook.url}api/status") == 401, "nginx")
    try:
        yield notebook, carol, cluster
    finally:
        stop(nginx)
        stop(jupyter)


def test_the_owner_opens_in_one_click_others_are_refused_and_a_stopped_sessions_cookie_stops_working(
    new_page, team_notebook, people, artifacts
):
    notebook, carol, _cluster = team_notebook
    status_url = f"{notebook.url}api/status"

    # The owner: Open on the notebook's page, and the browser is in Jupyter, through nginx.
    owner = new_page()
    login(owner, "alice")
    owner.goto(notebook.get_absolute_url())
    with owner.expect_navigation(url=lambda url: url.startswith(notebook.url)):
        owner.get_by_test_id("notebook-open").click()
    assert owner.url.startswith(notebook.url)
    # A file is made (a POST through nginx, with Jupyter's own XSRF cookie): the server is usable, not only readable.
    made = owner.evaluate(
        """async (base) => {
            const xsrf = (document.cookie.match(/_xsrf=([^;]+)/) || [])[1] || "";
            const r = await fetch(base + "api/contents", {method: "POST", headers: {"X-XSRFToken": xsrf},
                                                          body: JSON.stringify({type: "file", ext: ".txt"})});
            return r.status;
        }""",
        notebook.url,
    )
    assert made == 201
    response = owner.goto(status_url)
    assert response.status == 200, response.text()
    assert "started" in json.loads(owner.locator("body").inner_text())  # Jupyter's own /api/status
    cookies = {c["name"]: c for c in owner.context.cookies(notebook.url)}
    cookie = cookies[workspace.COOKIE_NAME]
    assert cookie["domain"] == "127.0.0.1" and cookie["path"] == workspace.base_path(notebook) and cookie["httpOnly"]
    assert "sessionid" not in cookies  # the portal's own session never goes to the notebook's host
    owner.goto(notebook.get_absolute_url())
    owner.screenshot(path=str(artifacts / "workspace-open.png"), full_page=True)

    # Another member of the team: no Open on the page, and nginx turns the address away.
    member = new_page()
    login(member, carol.username)
    member.goto(notebook.get_absolute_url())
    expect(member.get_by_test_id("notebook-open")).to_have_count(0)
    assert member.goto(status_url).status == 401
    assert member.goto(notebook.url).status == 401

    # An anonymous browser: the same.
    anonymous = new_page()
    assert anonymous.goto(status_url).status == 401

    # The owner stops the session from the portal: the cookie in their browser stops working.
    owner.on("dialog", lambda dialog: dialog.accept())
    with owner.expect_navigation():
        owner.get_by_test_id("notebook-stop").click()
    expect(owner.get_by_test_id("stop-reason")).to_contain_text("Stopped by its owner")
    assert owner.goto(status_url).status == 403
    assert workspace.COOKIE_NAME in {c["name"] for c in owner.context.cookies(notebook.url)}
