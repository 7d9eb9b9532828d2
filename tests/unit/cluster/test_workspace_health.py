"""KubernetesBackend.workspace_health against an HTTP server standing in for the API server's service proxy: the
real client's request (the Service's port by name, /healthz) and code-server's JSON read as it came."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest
from kubernetes import client

from cluster.base import ClusterError
from cluster.kubernetes import KubernetesBackend

PROXY = "/api/v1/namespaces/team-vision/services/nb-7-editor:http/proxy/healthz"


@pytest.fixture
def api_server():
    answers: dict[str, tuple[int, bytes]] = {}
    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the name http.server calls
            path = unquote(self.path)  # the client sends the ":" of "name:port" as %3A; the API server decodes it
            asked.append(path)
            status, body = answers.get(path, (404, b'{"kind": "Status", "code": 404}'))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_port}"
    yield KubernetesBackend(client.ApiClient(configuration), retries=0), answers, asked
    server.shutdown()


def test_code_servers_healthz_comes_back_as_it_answered(api_server):
    backend, answers, asked = api_server
    answers[PROXY] = (200, json.dumps({"status": "alive", "lastHeartbeat": 1764684000123}).encode())
    assert backend.workspace_health("team-vision", "nb-7-editor", "pod") == {
        "status": "alive",
        "lastHeartbeat": 1764684000123,
    }
    assert asked == [PROXY]


def test_an_answer_that_is_not_code_servers_tells_nothing(api_server):
    backend, answers, _ = api_server
    answers[PROXY] = (200, b"<html>not json</html>")
    assert backend.workspace_health("team-vision", "nb-7-editor", "pod") is None
    answers[PROXY] = (200, b"[1, 2]")
    assert backend.workspace_health("team-vision", "nb-7-editor", "pod") is None


def test_a_missing_service_is_an_error_the_culler_counts_as_unknown(api_server):
    backend, _, _ = api_server
    with pytest.raises(ClusterError):
        backend.workspace_health("team-vision", "nb-8-gone", "pod")
