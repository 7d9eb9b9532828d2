"""Fixtures of the agent's tests (no Django)."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer

import pytest

from .fake_portal import Recorder


@pytest.fixture
def server():
    """The contract's ingest endpoint on a free local port (fake_portal.Recorder): it answers from ``script``, 202
    when that is empty, and keeps every request in ``requests``."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    httpd.requests = []
    httpd.script = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd
    httpd.shutdown()
    httpd.server_close()
