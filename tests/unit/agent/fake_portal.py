"""Stand-ins for the portal's ingest endpoint the agent posts to: a scripted post function (FakePortal), a real HTTP
handler recording what it gets (Recorder, served by the ``server`` fixture in conftest.py), and a random source
that always answers the same fraction (SimpleRng) for backoff without jitter."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from agent.sender import PostResult


class FakePortal:
    """Answers POSTs from a script of results; records what was sent."""

    def __init__(self, *answers: PostResult):
        self.answers = list(answers)
        self.bodies: list[dict] = []
        self.headers: list[dict] = []

    def __call__(self, url, body, headers, timeout):
        self.bodies.append(json.loads(body))
        self.headers.append(headers)
        if self.answers:
            return self.answers.pop(0)
        return PostResult(202, json.dumps({"accepted": len(self.bodies[-1]["samples"])}))

    @property
    def sent(self) -> list[str]:
        return [s["gpu_uuid"] for body in self.bodies for s in body["samples"]]


class SimpleRng:
    """uniform(a, b) always at the same fraction of the way from a to b."""

    def __init__(self, fraction: float):
        self.fraction = fraction

    def uniform(self, a, b):
        return a + (b - a) * self.fraction


class Recorder(BaseHTTPRequestHandler):
    """The ingest endpoint as the contract describes it, answering from the server's script."""

    def do_POST(self):  # noqa: N802
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        self.server.requests.append((self.command, self.path, dict(self.headers), json.loads(body)))
        status, payload, extra = self.server.script.pop(0) if self.server.script else (202, None, {})
        data = json.dumps(payload if payload is not None else {"accepted": len(json.loads(body)["samples"])})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for key, value in extra.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data.encode())

    def log_message(self, *args):
        pass
