"""A fault-injecting HTTP proxy in front of the real kube-apiserver, for the fault-tolerance tests.

The portal's client talks plain HTTP to the proxy; the proxy talks TLS to the apiserver (the static admin token
travels in the client's Authorization header, as it would to the apiserver). Each request meets one outcome,
drawn from a seeded random generator by the weights given:

- ``ok``: forwarded, answered.
- ``error``: answered 500 with a Kubernetes Status body; the apiserver never sees it.
- ``drop_before``: the connection is closed before anything is forwarded (the request never happened).
- ``drop_after``: forwarded, then the connection is closed without the answer: the write happened, the client does
  not know (the case that makes a retried create meet its own object).
- ``reset``: like ``drop_after``, closed with a TCP reset (SO_LINGER 0) instead of a FIN.
- ``delay``: held longer than the client waits (``delay_seconds``), then forwarded: the client times out, and the
  original request reaches the apiserver after the client may already have retried it.

Counts per outcome are kept in ``outcomes``. Watches (never used by the job cycle) are forwarded whole.
"""

from __future__ import annotations

import http.client
import http.server
import json
import random
import socket
import ssl
import struct
import threading
import time
from collections import Counter
from urllib.parse import urlsplit

OUTCOMES = ("ok", "error", "drop_before", "drop_after", "reset", "delay")
HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "proxy-connection"}


class FaultProxy:
    def __init__(self, upstream: str, weights: dict[str, float], *, seed: int = 16, delay_seconds: float = 3.0):
        unknown = set(weights) - set(OUTCOMES)
        assert not unknown, f"unknown outcomes {unknown}"
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port or 443
        self.weights = weights
        self.delay_seconds = delay_seconds
        self.outcomes: Counter[str] = Counter()
        self.writes: Counter[str] = Counter()  # outcome of each non-GET request
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._tls = ssl.create_default_context()
        self._tls.check_hostname = False
        self._tls.verify_mode = ssl.CERT_NONE  # the harness's apiserver has a self-signed certificate
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.server.shutdown()
        self.server.server_close()

    def healthy(self) -> None:
        """From now on, forward everything."""
        with self._lock:
            self.weights = {"ok": 1.0}

    def _draw(self, method: str, path: str) -> str:
        if "watch=true" in path.lower():
            return "ok"
        with self._lock:
            names = list(self.weights)
            outcome = self._random.choices(names, [self.weights[n] for n in names])[0]
            self.outcomes[outcome] += 1
            if method != "GET":
                self.writes[outcome] += 1
        return outcome

    def _forward(self, method: str, path: str, headers: dict[str, str], body: bytes | None):
        upstream = http.client.HTTPSConnection(self.upstream_host, self.upstream_port, context=self._tls, timeout=60)
        try:
            upstream.request(method, path, body=body, headers=headers)
            response = upstream.getresponse()
            return response.status, response.reason, response.getheaders(), response.read()
        finally:
            upstream.close()

    def _handler_class(self):
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                outcome = proxy._draw(self.command, self.path)
                if outcome == "drop_before":
                    self._hang_up(reset=False)
                    return
                if outcome == "error":
                    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                              "reason": "InternalError", "message": "fault injected by the test proxy"}  # fmt: skip
                    self._answer(500, "Internal Server Error", [("Content-Type", "application/json")],
                                 json.dumps(status).encode())  # fmt: skip
                    return
                if outcome == "delay":
                    time.sleep(proxy.delay_seconds)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                try:
                    status, reason, response_headers, payload = proxy._forward(self.command, self.path, headers, body)
                except OSError:
                    self._hang_up(reset=False)
                    return
                if outcome in ("drop_after", "reset"):
                    self._hang_up(reset=outcome == "reset")
                    return
                kept = [(k, v) for k, v in response_headers if k.lower() not in HOP_BY_HOP]
                self._answer(status, reason, kept, payload)

            def _answer(self, status: int, reason: str, headers, payload: bytes) -> None:
                try:
                    self.send_response(status, reason)
                    for key, value in headers:
                        self.send_header(key, value)
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                except OSError:
                    self.close_connection = True  # the client gave up (timed out) meanwhile

            def _hang_up(self, reset: bool) -> None:
                self.close_connection = True
                try:
                    if reset:
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    else:
                        self.connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815 - http.server's naming

            def log_message(self, *args) -> None:
                pass

        return Handler
