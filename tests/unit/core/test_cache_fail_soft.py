"""The shared cache fails soft (core/cache.py): a Redis that refuses or never answers costs one short wait, then the
process keeps its values in its own memory, shared by its threads, and says so once in the log. The real redis-server
going away and coming back under a live server is tests/integration/test_cache_outage.py."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator

import pytest

from core.cache import FailSoftRedisCache

TIMEOUT = 0.25
OPTIONS = {"SOCKET_CONNECT_TIMEOUT": TIMEOUT, "SOCKET_TIMEOUT": TIMEOUT}


@pytest.fixture
def refused_url() -> str:
    """A Redis URL where nothing listens: every connection is refused at once."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://127.0.0.1:{port}/0"


@pytest.fixture
def silent_url() -> Iterator[str]:
    """A Redis URL whose server takes the connection and never answers (a Redis that hangs)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(16)  # the kernel completes the handshakes; nobody ever reads or writes
        yield f"redis://127.0.0.1:{sock.getsockname()[1]}/0"


def cache_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == "core.cache"]


def test_a_refused_cache_keeps_values_in_the_process_and_warns_once(refused_url, settings, caplog):
    settings.PORTAL_CACHE_RETRY_SECONDS = 60
    caplog.set_level(logging.WARNING, logger="core.cache")
    cache = FailSoftRedisCache(refused_url, {"OPTIONS": OPTIONS})
    started = time.monotonic()
    assert cache.get("history", []) == []
    assert cache.add("mark", 1, 60) is True
    assert cache.add("mark", 2, 60) is False
    assert cache.incr("mark") == 2
    cache.set("history", [3.0, 2.0], 60)
    assert cache.get_many(["history", "mark", "absent"]) == {"history": [3.0, 2.0], "mark": 2}
    # Another thread's cache object (Django makes one per thread) sees the same values.
    assert FailSoftRedisCache(refused_url, {"OPTIONS": OPTIONS}).get("history") == [3.0, 2.0]
    assert time.monotonic() - started < 1
    (warning,) = cache_warnings(caplog)
    assert "The cache (CACHE_URL, Redis) failed: ConnectionError" in warning and "for 60 s" in warning


def test_a_silent_cache_costs_one_timeout_then_nothing(silent_url, settings, caplog):
    settings.PORTAL_CACHE_RETRY_SECONDS = 60
    caplog.set_level(logging.WARNING, logger="core.cache")
    cache = FailSoftRedisCache(silent_url, {"OPTIONS": OPTIONS})
    started = time.monotonic()
    assert cache.get("history", "default") == "default"
    first = time.monotonic() - started
    assert TIMEOUT * 0.8 < first < 1, f"the first operation waited {first:.2f} s"
    started = time.monotonic()
    for n in range(20):
        cache.set(f"k{n}", n, 60)
        assert cache.get(f"k{n}") == n
    assert time.monotonic() - started < 0.1, "later operations do not wait for Redis"
    (warning,) = cache_warnings(caplog)
    assert "TimeoutError" in warning


def test_redis_is_tried_again_after_the_retry_time(silent_url, settings, caplog):
    settings.PORTAL_CACHE_RETRY_SECONDS = 0.5
    caplog.set_level(logging.WARNING, logger="core.cache")
    cache = FailSoftRedisCache(silent_url, {"OPTIONS": OPTIONS})
    cache.set("a", 1, 60)  # waits for Redis, then keeps the value here
    started = time.monotonic()
    assert cache.get("a") == 1
    assert time.monotonic() - started < 0.1
    time.sleep(0.6)
    started = time.monotonic()
    assert cache.get("a") == 1, "Redis still does not answer: the process's own value"
    assert time.monotonic() - started > TIMEOUT * 0.8, "after the retry time the operation asked Redis again"
    assert len(cache_warnings(caplog)) == 1, "one warning per outage"
