"""A Redis outage under the token API: gunicorn serves the portal with CACHE_URL on a redis-server of this test's own.
Token authentication reads the wrong-token throttle from the cache before it checks the token, so while Redis is down
(killed: connections refused) or hangs (stopped with SIGSTOP: connections taken, never answered) every bearer-token
request must still answer 2xx or 4xx within a second (core/cache.py). Once Redis is back the throttle counts in it
again, across both web processes.

Each request comes from an address of its own (X-Forwarded-For through one trusted proxy hop), so one phase's
throttled address never answers for another's.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
import urllib.error
import urllib.request

import pytest
import redis

from accounts.models import APIToken

from .conftest import worker_database_url
from .processes import free_port, start_gunicorn, start_redis, stop, wait_for

pytestmark = pytest.mark.integration

#: Wrong tokens one address may send a minute (PORTAL_THROTTLE_TOKEN_FAILURES).
FAILURES = 3
#: How long a web process keeps its counts to itself after the cache failed (PORTAL_CACHE_RETRY_SECONDS).
RETRY_SECONDS = 1
#: The longest any request may take while Redis is away (seconds).
PATIENCE = 1.0

addresses = (f"198.51.100.{n}" for n in itertools.count(1))


def ask(
    base: str, token: str | None, method: str = "GET", path: str = "/api/v1/me/", patience: float = PATIENCE
) -> tuple[int, float]:
    """The status of one request from a new address, and how long it took; fails the test on a 5xx or a wait."""
    headers = {"X-Forwarded-For": next(addresses), "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    body = b"{}" if method == "POST" else None
    request = urllib.request.Request(f"{base}{path}", data=body, method=method, headers=headers)
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            status = response.status
    except urllib.error.HTTPError as error:
        status = error.code
    except OSError as error:
        pytest.fail(f"{method} {path} got no answer in {time.monotonic() - started:.1f} s: {error}")
    seconds = time.monotonic() - started
    assert status < 500, f"{method} {path} answered {status}"
    assert seconds < patience, f"{method} {path} answered {status} after {seconds:.2f} s"
    return status, seconds


def wrong_tokens_from_one_address(base: str, address: str) -> list[int]:
    codes = []
    for _ in range(FAILURES + 1):
        request = urllib.request.Request(
            f"{base}/api/v1/me/", headers={"Authorization": "Bearer gpp_0000_guess", "X-Forwarded-For": address}
        )
        try:
            urllib.request.urlopen(request, timeout=5)
        except urllib.error.HTTPError as error:
            codes.append(error.code)
    return codes


def counted_in_redis(port: int, address: str) -> bool:
    return any(address.encode() in key for key in redis.Redis(port=port).keys("*token-failure*"))


def every_kind_of_request_answers(base: str, token: str, patience: float = PATIENCE) -> None:
    for _ in range(3):
        assert ask(base, token, patience=patience)[0] == 200
        assert ask(base, "gpp_0000_guess", patience=patience)[0] in (401, 429)
        assert ask(base, token, path="/api/v1/jobs/?team=vision", patience=patience)[0] == 200
        # The sign-in code's throttle (a DRF throttle, like token creation's).
        assert ask(base, None, method="POST", path="/api/v1/auth/device/", patience=patience)[0] == 201


def throttle_counts_in_redis_again(base: str, port: int, log) -> None:
    # Each process keeps its counts in its own memory for PORTAL_CACHE_RETRY_SECONDS after its last failure; once
    # that has passed for both, the next request in each asks Redis again.
    time.sleep(RETRY_SECONDS + 0.5)

    def counted() -> bool:
        address = next(addresses)
        wrong_tokens_from_one_address(base, address)
        return counted_in_redis(port, address)

    wait_for(counted, timeout=20, what="a wrong token counted in Redis again")
    address = next(addresses)
    codes = wrong_tokens_from_one_address(base, address)
    assert codes == [401] * FAILURES + [429], f"{address}: {codes}\n{log.read_text()[-3000:]}"
    assert counted_in_redis(port, address)


def test_the_token_api_answers_while_redis_is_down_or_hangs_and_throttles_again_after(
    transactional_db, people, tmp_path
):
    _, token = APIToken.issue(people["alice"], "pipeline")
    port = free_port()
    cache = start_redis(port, tmp_path)
    env = {
        **os.environ,
        "DATABASE_URL": worker_database_url(),
        "PORTAL_DATA_DIR": str(tmp_path),
        "CACHE_URL": f"redis://127.0.0.1:{port}/0",
        "PORTAL_THROTTLE_TOKEN_FAILURES": f"{FAILURES}/min",
        "PORTAL_TRUSTED_PROXIES": "1",
        "PORTAL_CACHE_RETRY_SECONDS": str(RETRY_SECONDS),
    }
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    log = tmp_path / "web.log"
    web = None
    try:
        web, base = start_gunicorn(env, log, workers=2, threads=4)
        every_kind_of_request_answers(base, token, patience=10)  # each process's first requests load the views
        throttle_counts_in_redis_again(base, port, log)

        stop(cache)  # down: every connection refused
        every_kind_of_request_answers(base, token)
        cache = start_redis(port, tmp_path)
        throttle_counts_in_redis_again(base, port, log)

        os.kill(cache.pid, signal.SIGSTOP)  # hangs: connections taken, nothing answered
        try:
            every_kind_of_request_answers(base, token)
        finally:
            os.kill(cache.pid, signal.SIGCONT)
        throttle_counts_in_redis_again(base, port, log)

        logged = log.read_text()
        assert "The cache (CACHE_URL, Redis) failed" in logged and "answers again" in logged
        assert "Traceback" not in logged
    finally:
        if web is not None:
            stop(web)
        stop(cache)
