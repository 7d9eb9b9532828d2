"""Delivery: the bounded buffer, backoff, what each HTTP answer does to a batch, and a real HTTP round trip."""

from __future__ import annotations

import json
import logging
import random
import threading
from datetime import UTC, datetime
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agent import AGENT_NAME
from agent.sender import (
    MAX_SAMPLES_PER_POST,
    Backoff,
    PostResult,
    SampleBuffer,
    Sender,
    http_post,
    parse_retry_after,
    rfc3339,
)
from tests.unit.agent.fake_portal import FakePortal, Recorder, SimpleRng

NOW = datetime(2026, 11, 23, 15, 0, tzinfo=UTC).timestamp()


def sample(n: int) -> dict:
    return {"ts": "2026-11-23T15:00:00Z", "gpu_uuid": f"GPU-{n}", "mig_uuid": None, "util_pct": float(n % 100)}


def make_sender(portal, samples=0, capacity=10_000, **kwargs) -> Sender:
    buffer = SampleBuffer(capacity)
    buffer.extend(sample(i) for i in range(samples))
    backoff = kwargs.pop("backoff", Backoff(base=5, cap=300, rng=random.Random(7)))
    return Sender(
        "https://portal.example.com/", "gpu-node-7", lambda: "tok-123", buffer, post=portal, backoff=backoff, **kwargs
    )


# Buffer ------------------------------------------------------------------------------------------------------
def test_buffer_is_bounded_and_drops_the_oldest_first():
    buffer = SampleBuffer(capacity=5)
    assert buffer.extend(sample(i) for i in range(3)) == 0
    assert buffer.extend(sample(i) for i in range(3, 9)) == 4
    assert len(buffer) == 5 and buffer.dropped == 4
    assert [s["gpu_uuid"] for s in buffer.peek(10)] == [f"GPU-{i}" for i in range(4, 9)]
    buffer.discard(2)
    assert [s["gpu_uuid"] for s in buffer.peek(10)] == ["GPU-6", "GPU-7", "GPU-8"]
    with pytest.raises(ValueError):
        SampleBuffer(0)


# Backoff -----------------------------------------------------------------------------------------------------
def test_backoff_doubles_up_to_the_cap_with_jitter_in_the_upper_half():
    ceilings = [5, 10, 20, 40, 80, 160, 300, 300, 300]
    low = Backoff(base=5, cap=300, rng=SimpleRng(0.0))
    high = Backoff(base=5, cap=300, rng=SimpleRng(1.0))
    assert [low.next_delay() for _ in ceilings] == [c / 2 for c in ceilings]
    assert [high.next_delay() for _ in ceilings] == ceilings
    jittered = Backoff(base=5, cap=300, rng=random.Random(1))
    delays = [jittered.next_delay() for _ in ceilings]
    assert all(c / 2 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert len(set(delays)) == len(delays)  # the jitter really varies
    high.reset()
    assert high.next_delay() == 5


# Retry-After -------------------------------------------------------------------------------------------------
def test_retry_after_seconds_and_http_dates():
    assert parse_retry_after("120", NOW) == 120
    later = datetime.fromtimestamp(NOW + 90, UTC)
    assert parse_retry_after(format_datetime(later, usegmt=True), NOW) == 90
    assert parse_retry_after(format_datetime(datetime.fromtimestamp(NOW - 5, UTC), usegmt=True), NOW) == 0
    assert parse_retry_after("86400", NOW) == 900  # capped: a misconfigured proxy must not silence a node a day
    assert parse_retry_after("soon", NOW) is None
    assert parse_retry_after(None, NOW) is None


# Answers -----------------------------------------------------------------------------------------------------
def test_delivery_empties_the_buffer_with_the_contract_body_and_headers():
    portal = FakePortal()
    sender = make_sender(portal, samples=3)
    assert sender.flush(NOW) is True
    assert len(sender.buffer) == 0 and sender.delivered == 3
    (body,) = portal.bodies
    assert body == {
        "node": "gpu-node-7",
        "sent_at": "2026-11-23T15:00:00Z",
        "agent": AGENT_NAME,
        "samples": [sample(0), sample(1), sample(2)],
    }
    assert portal.headers[0]["Authorization"] == "Bearer tok-123"
    assert portal.headers[0]["Content-Type"] == "application/json"
    assert sender.url == "https://portal.example.com/api/v1/telemetry/samples/"


def test_an_agent_told_its_cluster_says_it_in_every_batch():
    portal = FakePortal()
    sender = make_sender(portal, samples=1, cluster="cloud")
    assert sender.flush(NOW) is True
    (body,) = portal.bodies
    assert body["cluster"] == "cloud" and body["node"] == "gpu-node-7"


def test_batches_are_split_at_2000_samples_in_order():
    portal = FakePortal()
    sender = make_sender(portal, samples=4500)
    assert MAX_SAMPLES_PER_POST == 2000
    assert sender.flush(NOW) is True
    assert [len(b["samples"]) for b in portal.bodies] == [2000, 2000, 500]
    assert portal.sent == [f"GPU-{i}" for i in range(4500)]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_drop_the_batch_and_log_the_answer(status, caplog):
    portal = FakePortal(PostResult(status, '{"detail": "sample 3: util_pct 250 is above 100"}'))
    sender = make_sender(portal, samples=2500)
    with caplog.at_level(logging.ERROR):
        assert sender.flush(NOW) is True
    assert [len(b["samples"]) for b in portal.bodies] == [2000, 500]  # the rest still went
    assert sender.rejected == 2000 and sender.delivered == 500 and len(sender.buffer) == 0
    assert f"HTTP {status}" in caplog.text and "util_pct 250 is above 100" in caplog.text
    assert sender.next_attempt < NOW  # not backing off


@pytest.mark.parametrize("status", [None, 408, 429, 500, 502, 503])
def test_server_errors_keep_the_batch_and_back_off(status):
    portal = FakePortal(PostResult(status, error="Connection refused" if status is None else ""))
    sender = make_sender(portal, samples=10, backoff=Backoff(base=5, cap=300, rng=SimpleRng(1.0)))
    assert sender.flush(NOW) is False
    assert len(sender.buffer) == 10 and sender.rejected == 0
    assert sender.next_attempt == NOW + 5
    assert sender.flush(NOW + 4) is False and len(portal.bodies) == 1  # still backing off: nothing sent
    assert sender.flush(NOW + 5) is True
    assert len(portal.bodies) == 2 and portal.bodies[0]["samples"] == portal.bodies[1]["samples"]
    assert sender.backoff.attempt == 0  # success resets the backoff


def test_consecutive_failures_follow_the_backoff_schedule():
    portal = FakePortal(*[PostResult(503)] * 8)
    sender = make_sender(portal, samples=1, backoff=Backoff(base=5, cap=300, rng=SimpleRng(1.0)))
    now, waits = NOW, []
    for _ in range(8):
        sender.flush(now)
        waits.append(sender.next_attempt - now)
        now = sender.next_attempt
    assert waits == [5, 10, 20, 40, 80, 160, 300, 300]
    assert sender.flush(now) is True and len(sender.buffer) == 0


def test_retry_after_is_honoured():
    portal = FakePortal(PostResult(429, "slow down", retry_after="42"), PostResult(503, retry_after="7"))
    sender = make_sender(portal, samples=1, backoff=Backoff(base=5, cap=300, rng=SimpleRng(1.0)))
    sender.flush(NOW)
    assert sender.next_attempt == NOW + 42
    sender.flush(NOW + 42)
    assert sender.next_attempt == NOW + 42 + 7
    assert sender.flush(NOW + 49) is True


def test_413_halves_the_batch_instead_of_dropping_it():
    portal = FakePortal(PostResult(413, "too many samples"), PostResult(413, "too many samples"))
    sender = make_sender(portal, samples=2000)
    assert sender.flush(NOW) is True
    assert [len(b["samples"]) for b in portal.bodies] == [2000, 1000, 500, 500, 500, 500]
    assert portal.sent[-2000:] == [f"GPU-{i}" for i in range(2000)] and sender.rejected == 0


def test_token_is_read_for_every_post():
    tokens = iter(["first", "rotated"])
    portal = FakePortal()
    sender = make_sender(portal, samples=1)
    sender.token = lambda: next(tokens)
    sender.flush(NOW)
    sender.buffer.extend([sample(1)])
    sender.flush(NOW + 30)
    assert [h["Authorization"] for h in portal.headers] == ["Bearer first", "Bearer rotated"]


def test_portal_url_must_be_http():
    with pytest.raises(ValueError, match="http"):
        Sender("portal.example.com", "n", lambda: "t", SampleBuffer())


def test_rfc3339_is_utc_with_z():
    assert rfc3339(NOW) == "2026-11-23T15:00:00Z"
    assert rfc3339(NOW + 0.9) == "2026-11-23T15:00:00Z"


# A real HTTP server (the ``server`` fixture, tests/unit/agent/conftest.py) ----------------------------------
def test_real_http_round_trip(server):
    server.script = [(503, {"detail": "ingest paused"}, {"Retry-After": "12"}), (202, None, {})]
    buffer = SampleBuffer()
    buffer.extend(sample(i) for i in range(3))
    url = f"http://127.0.0.1:{server.server_address[1]}"
    sender = Sender(url, "gpu-node-7", lambda: "s3cret", buffer, backoff=Backoff(rng=SimpleRng(1.0)), timeout=5)

    assert sender.flush(NOW) is False
    assert sender.next_attempt == NOW + 12 and len(buffer) == 3
    assert sender.flush(NOW + 12) is True and len(buffer) == 0

    assert len(server.requests) == 2
    method, path, headers, body = server.requests[1]
    assert (method, path) == ("POST", "/api/v1/telemetry/samples/")
    assert headers["Authorization"] == "Bearer s3cret"
    assert headers["Content-Type"] == "application/json"
    assert headers["User-Agent"] == AGENT_NAME
    assert body == {
        "node": "gpu-node-7",
        "sent_at": rfc3339(NOW + 12),
        "agent": AGENT_NAME,
        "samples": [sample(0), sample(1), sample(2)],
    }


def test_http_post_reports_status_body_and_retry_after(server):
    server.script = [
        (400, {"samples": ["clock skew: ts is 2 hours in the future"]}, {}),
        (429, {}, {"Retry-After": "3"}),
    ]
    url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/telemetry/samples/"
    body = json.dumps({"samples": []}).encode()
    bad = http_post(url, body, {"Content-Type": "application/json"}, 5)
    assert (bad.status, bad.delivered, bad.retryable) == (400, False, False)
    assert "clock skew" in bad.body
    busy = http_post(url, body, {"Content-Type": "application/json"}, 5)
    assert (busy.status, busy.retry_after, busy.retryable) == (429, "3", True)
    ok = http_post(url, body, {"Content-Type": "application/json"}, 5)
    assert (ok.status, ok.delivered, json.loads(ok.body)) == (202, True, {"accepted": 0})


def test_connection_refused_is_retryable():
    with ThreadingHTTPServer(("127.0.0.1", 0), Recorder) as closed:
        port = closed.server_address[1]
    result = http_post(f"http://127.0.0.1:{port}/api/v1/telemetry/samples/", b"{}", {}, 2)
    assert result.status is None and result.retryable and not result.delivered
    assert result.error


def test_a_connection_cut_mid_answer_is_retryable():
    class Cut(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["Content-Length"]))
            self.wfile.write(b'HTTP/1.1 202 Accepted\r\nContent-Length: 100\r\n\r\n{"acc')  # then the line drops
            self.close_connection = True

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Cut)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        result = http_post(f"http://127.0.0.1:{httpd.server_address[1]}/x", b"{}", {}, 5)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.status is None and result.retryable and not result.delivered


def test_fewer_accepted_than_sent_is_logged(caplog):
    portal = FakePortal(PostResult(202, '{"accepted": 2}'))
    sender = make_sender(portal, samples=3)
    with caplog.at_level(logging.INFO):
        assert sender.flush(NOW) is True
    assert "accepted 2 of 3 samples" in caplog.text and len(sender.buffer) == 0
