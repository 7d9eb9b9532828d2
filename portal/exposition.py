"""Who may read the portal's metrics, where the event metrics come from, and the Celery side of them.

Loaded by the Celery app before Django's apps are ready, so it imports no models (``portal.metrics`` holds the
endpoint and the database collector).

Access (``allowed``): a request bearing ``PORTAL_METRICS_TOKEN`` (compared as SHA-256 digests in constant time), or,
when ``PORTAL_METRICS_ALLOW_LOCAL`` (the default), one from the loopback address that did not come through a proxy.

Event metrics: under gunicorn and Celery each process writes its own file in ``PROMETHEUS_MULTIPROC_DIR`` and
``MultiProcessCollector`` sums them; without that variable (runserver, tests) the default registry is read. A worker
whose directory is not shared with the web process (its own pod in Kubernetes) serves them itself on
``PORTAL_WORKER_METRICS_PORT``, behind the same access rule.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import socketserver
import threading
from collections.abc import Iterator
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from celery import signals
from django.conf import settings
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess
from prometheus_client.core import Metric
from prometheus_client.exposition import make_wsgi_app

from core.metrics import TASK_FAILURES

log = logging.getLogger(__name__)

PLACEHOLDER = "CHANGE-ME"
LOOPBACK = frozenset({"127.0.0.1", "::1"})
#: Headers a reverse proxy adds: a request carrying one came from elsewhere, even if the proxy is local.
PROXY_HEADERS = ("HTTP_X_FORWARDED_FOR", "HTTP_X_REAL_IP", "HTTP_FORWARDED")


def multiprocess_dir() -> str:
    return os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode()).digest()


def token_matches(authorization: str) -> bool:
    """Whether an Authorization header carries the configured token (never true when none is configured)."""
    token = settings.PORTAL_METRICS_TOKEN
    scheme, _, given = (authorization or "").partition(" ")
    # deploy/examples' placeholder is never a key: a Secret applied unedited must not open the metrics to all.
    if not token or PLACEHOLDER in token or scheme.lower() != "bearer" or not given:
        return False
    return hmac.compare_digest(_digest(given.strip()), _digest(token))


def allowed(meta: dict) -> bool:
    """Whether the request (its WSGI environ / Django META) may read the metrics."""
    if token_matches(meta.get("HTTP_AUTHORIZATION", "")):
        return True
    local = meta.get("REMOTE_ADDR") in LOOPBACK and not any(meta.get(h) for h in PROXY_HEADERS)
    return bool(settings.PORTAL_METRICS_ALLOW_LOCAL and local)


REFUSAL = (
    "Metrics are readable with the bearer token set in PORTAL_METRICS_TOKEN (Authorization: Bearer <token>), "
    "or from the portal's own host when PORTAL_METRICS_ALLOW_LOCAL is true.\n"
)


class Both:
    """Several collectors read as one registry (generate_latest only calls ``collect``)."""

    def __init__(self, *collectors) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


def event_registry():
    """The event metrics of every process (multiprocess) or of this one."""
    if multiprocess_dir():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
        return registry
    return REGISTRY


# -- Celery -----------------------------------------------------------------------------------------------------


def _guarded(app):
    """A WSGI app that answers only what ``allowed`` lets through."""

    def guarded(environ, start_response):
        if not allowed(environ):
            start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
            return [REFUSAL.encode()]
        return app(environ, start_response)

    return guarded


class _ThreadingServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the stdlib's signature
        pass


def serve_worker_metrics(port: int, addr: str = "0.0.0.0") -> WSGIServer:  # noqa: S104 - scraped from outside the pod
    """Serve the event metrics of this host's processes on ``port`` in a daemon thread (the worker's)."""
    server = make_server(
        addr, port, _guarded(make_wsgi_app(event_registry())), _ThreadingServer, handler_class=_QuietHandler
    )
    threading.Thread(target=server.serve_forever, name="metrics", daemon=True).start()
    log.info("serving metrics on %s:%d", addr, port)
    return server


def install_celery_hooks(app) -> None:
    """Count task failures, forget dead pool processes' live gauges, serve the worker's metrics if configured."""

    @signals.task_failure.connect(weak=False)
    def count_failure(sender=None, **_):
        TASK_FAILURES.labels(task=getattr(sender, "name", None) or "unknown").inc()

    @signals.worker_process_shutdown.connect(weak=False)
    def forget_process(pid=None, **_):
        if multiprocess_dir():
            multiprocess.mark_process_dead(pid or os.getpid())

    @signals.worker_ready.connect(weak=False)
    def serve(**_):
        port = settings.PORTAL_WORKER_METRICS_PORT
        if port:
            serve_worker_metrics(port)
