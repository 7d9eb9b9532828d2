"""Webhooks end to end: a real Celery worker POSTs to a real HTTP receiver on 127.0.0.1. Every request's signature
verifies with the code the user guide shows (run as written), a 500 is retried after the backoff and then
succeeds, and three events arrive in the order they happened (the later ones wait behind the retry)."""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.db import transaction

from accounts import webhook_ops
from core import webhooks
from core.choices import DeliveryStatus
from core.models import Delivery

pytestmark = pytest.mark.integration

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "user-guide.md"


def documented_verify():
    """The verification function exactly as docs/user-guide.md shows it."""
    text = GUIDE.read_text()
    block = re.search(r"<!-- webhook-verify:.*?-->\s*```python\n(.*?)```", text, re.S)
    assert block, "the user guide's verification snippet is missing"
    namespace: dict = {}
    exec(compile(block.group(1), str(GUIDE), "exec"), namespace)  # noqa: S102 - our own documentation
    return namespace["verify"]


class Receiver:
    """An HTTP endpoint that records every request and answers from a script (then 200)."""

    def __init__(self, answers: list[int]):
        self.requests: list[dict] = []
        self.answers = answers
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append({"headers": dict(self.headers), "body": body, "at": time.monotonic()})
                code = receiver.answers.pop(0) if receiver.answers else 200
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"nope" if code >= 300 else b"thanks")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook/abc123"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook_worker(transactional_db, monkeypatch, settings, request):
    """A worker that may call 127.0.0.1 over http, with 1-second backoff, its deliveries routed to its queue."""
    monkeypatch.setenv("PORTAL_WEBHOOK_ALLOW_LOCAL", "1")
    monkeypatch.setenv("PORTAL_WEBHOOK_RETRY_BASE_SECONDS", "1")
    worker = request.getfixturevalue("celery_worker_process")
    settings.PORTAL_WEBHOOK_ALLOW_LOCAL = True
    settings.PORTAL_WEBHOOK_QUEUE = worker["queue"]
    return worker


def wait_for(predicate, what: str, log: Path, timeout: float = 60):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"Timed out waiting for {what}.\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def test_signed_retried_and_in_order(webhook_worker, people, capsys):
    verify = documented_verify()
    with Receiver(answers=[500]) as receiver:
        webhook, secret = webhook_ops.create(
            people["alice"], people["vision"], {"name": "ci", "url": receiver.url, "events": ["job.*"]}
        )
        with transaction.atomic():
            for n, event_type in enumerate(["job.queued", "job.running", "job.succeeded"], start=1):
                webhooks.emit(people["vision"], event_type, {"job": 7, "n": n}, actor=people["alice"])
        webhooks.emit(people["nlp"], "job.failed", {"job": 8})  # another team's: never sent here
        wait_for(lambda: len(receiver.requests) >= 4, "four requests (one retry)", webhook_worker["log"])
        time.sleep(1.5)  # anything more (a duplicate, the other team's event) would arrive meanwhile

    requests = receiver.requests
    assert len(requests) == 4, [r["body"] for r in requests]
    for request in requests:
        assert verify(secret, request["headers"]["X-Portal-Signature"], request["body"]), request["headers"]
        assert not verify(secret, request["headers"]["X-Portal-Signature"], request["body"] + b" ")
    bodies = [json.loads(r["body"]) for r in requests]
    assert [b["data"]["n"] for b in bodies] == [1, 1, 2, 3], "the retry came first, then the rest in order"
    assert [b["type"] for b in bodies] == ["job.queued", "job.queued", "job.running", "job.succeeded"]
    assert {b["actor"] for b in bodies} == {"alice"} and {b["team"] for b in bodies} == {"vision"}
    assert bodies[0]["id"] == bodies[1]["id"], "a retry is the same event"
    assert requests[0]["headers"]["X-Portal-Event"] == "job.queued"
    assert requests[1]["at"] - requests[0]["at"] >= 0.9, "the retry waited for the backoff"

    deliveries = list(Delivery.objects.filter(webhook=webhook).order_by("id"))
    assert [d.status for d in deliveries] == [DeliveryStatus.SUCCEEDED] * 3
    assert [a["code"] for a in deliveries[0].attempts_log] == [500, 200]
    assert deliveries[0].attempt == 2 and deliveries[0].response_code == 200
    assert [r["headers"]["X-Portal-Delivery"] for r in requests] == [str(d.pk) for d in [deliveries[0], *deliveries]]
    with capsys.disabled():  # the delivery log as the webhook's page shows it, for the record
        print("\nwebhook delivery log:")
        for d in deliveries:
            codes = ", ".join(f"{a['code']}" for a in d.attempts_log)
            print(f"  #{d.pk} {d.event_type:14} {d.status:9} attempts {d.attempt} (codes: {codes})")
