"""Long-polls and event streams are served apart from the API (issue 30): behind the demo's proxy (nginx with
deploy/proxy/portal.conf.template, as docker-compose runs it), a web gunicorn with few threads and a stream gunicorn.
One identity holds many event streams open, more than web has threads; /healthz and another user's API call still
answer, because the proxy sent the streams to the stream server. Routed to web, the streams would take every web
thread and both would wait (the incident: /healthz timed out after 60 s with 40 streams open)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from urllib.parse import urlsplit

import pytest

from accounts.models import APIToken

from .conftest import REPO, worker_database_url
from .processes import free_port, start_gunicorn, stop, wait_until_up

pytestmark = pytest.mark.integration

STREAMS = 40
WEB_THREADS = 4


def start_proxy(env: dict[str, str], log, web: str, streams: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = env | {
        "PORTAL_PORT": str(port),
        "PORTAL_WEB_PORT": str(urlsplit(web).port),
        "PORTAL_STREAMS_PORT": str(urlsplit(streams).port),
    }
    with open(log, "w") as out:
        proxy = subprocess.Popen(
            [sys.executable, "deploy/proxy/demo.py"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        return urllib.request.urlopen(f"{base}/healthz", timeout=5).status == 200

    wait_until_up(proxy, answers, 30, 0.2, lambda: f"the proxy did not start:\n{log.read_text()[-3000:]}")
    return proxy, base


def open_stream(base: str, path: str, token: str) -> http.client.HTTPConnection:
    """An event stream, open: its first line (``retry:``) has arrived."""
    address = urlsplit(base)
    conn = http.client.HTTPConnection(address.hostname, address.port, timeout=30)
    conn.request("GET", path, headers={"Authorization": f"Bearer {token}", "Accept": "text/event-stream"})
    response = conn.getresponse()
    assert response.status == 200, response.read()[:500]
    assert response.read1(64).startswith(b"retry:")
    return conn


def get(url: str, token: str | None = None) -> tuple[int, bytes]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
        return response.status, response.read()


def test_streams_held_open_by_one_identity_leave_web_answering(transactional_db, people, tmp_path):
    _, alice = APIToken.issue(people["alice"], "many streams")
    _, bob = APIToken.issue(people["bob"], "an API call")
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "PORTAL_DATA_DIR": str(tmp_path),
        "PORTAL_WAIT_POLL_SECONDS": "0.5",
        "PORTAL_EVENT_STREAM_SECONDS": "300",  # open for the whole test
        "PORTAL_STREAMS_PER_IDENTITY": str(STREAMS),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    servers = []
    held: list[http.client.HTTPConnection] = []
    try:
        web, web_base = start_gunicorn(env, tmp_path / "web.log", workers=1, threads=WEB_THREADS)
        servers.append(web)
        # As deploy/35-streams.yaml, docker-compose.yml and the demo run it: gunicorn's plain gthread worker.
        streams_env = env | {"GUNICORN_CMD_ARGS": "--worker-class gthread"}
        streams, streams_base = start_gunicorn(streams_env, tmp_path / "streams.log", workers=1, threads=STREAMS + 8)
        servers.append(streams)
        proxy, base = start_proxy(env, tmp_path / "proxy.log", web_base, streams_base)
        servers.append(proxy)

        for n in range(STREAMS):
            held.append(open_stream(base, "/api/v1/teams/vision/events/stream/", alice))
        # One more is past alice's cap: 429 in words, from the stream server.
        status = None
        try:
            get(f"{base}/api/v1/teams/vision/events/stream/", alice)
        except urllib.error.HTTPError as error:
            status, detail = error.code, json.loads(error.read())["detail"]
        assert status == 429 and f"{STREAMS} event streams" in detail

        status, body = get(f"{base}/healthz")
        assert status == 200 and json.loads(body)["status"] == "ok"
        status, body = get(f"{base}/api/v1/jobs/?team=nlp", bob)
        assert status == 200 and "results" in json.loads(body)
        status, body = get(f"{base}/api/v1/me/", bob)
        assert status == 200 and json.loads(body)["username"] == "bob"
        assert "Traceback" not in (tmp_path / "web.log").read_text()
        assert "Traceback" not in (tmp_path / "streams.log").read_text()
    finally:
        for conn in held:
            conn.close()
        # Killed: their shutdown is not what this test checks, and the stream server would give the streams it still
        # serves (their clients gone, unnoticed until its next write) gunicorn's graceful timeout, 30 s.
        for server in reversed(servers):
            stop(server, signal.SIGKILL)
