"""Getting samples to the portal: a bounded buffer, exponential backoff with jitter, and the POSTs themselves.

The contract (docs/operator-guide.md, "Agent"): ``POST {PORTAL_URL}/api/v1/telemetry/samples/`` with
``Authorization: Bearer <node token>``, a JSON body ``{"node", "cluster", "sent_at", "agent", "samples": [...]}``
("cluster" only when the agent was told it) of at most 2,000 samples. What the answer means for the batch:

- 2xx: delivered, removed from the buffer.
- 408, 429, 5xx, no connection, timeout: kept, and sent again after the backoff (or the server's Retry-After).
- 413: the batch is halved (and stays halved for this run) until the server takes it: a server whose limit
  is below 2,000.
- any other 4xx (400 malformed, 401 bad token, 403 another node's or cluster's token): dropped and the server's
  answer logged. Sending the same bytes again cannot succeed, and keeping them would block everything behind them.
"""

from __future__ import annotations

import collections
import email.utils
import http.client
import json
import logging
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import AGENT_NAME

log = logging.getLogger(__name__)

INGEST_PATH = "/api/v1/telemetry/samples/"
MAX_SAMPLES_PER_POST = 2000
RETRYABLE_4XX = {408, 429}
RETRY_AFTER_CAP_SECONDS = 900.0


def rfc3339(epoch_seconds: float) -> str:
    """UTC, whole seconds, "Z": 2026-11-23T15:00:00Z."""
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SampleBuffer:
    """Samples waiting to be sent, oldest first, never more than ``capacity``: when full, the oldest go first.

    During a long portal outage the newest readings are the ones worth keeping; ``dropped`` counts what was lost.
    """

    def __init__(self, capacity: int = 10_000):
        if capacity < 1:
            raise ValueError("The buffer must hold at least one sample.")
        self.capacity = capacity
        self._samples: collections.deque[dict[str, Any]] = collections.deque()
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._samples)

    def extend(self, samples: Iterable[dict[str, Any]]) -> int:
        """Append; returns how many old samples were dropped to make room."""
        dropped = 0
        for sample in samples:
            if len(self._samples) >= self.capacity:
                self._samples.popleft()
                dropped += 1
            self._samples.append(sample)
        self.dropped += dropped
        return dropped

    def peek(self, count: int) -> list[dict[str, Any]]:
        return [self._samples[i] for i in range(min(count, len(self._samples)))]

    def discard(self, count: int) -> None:
        for _ in range(min(count, len(self._samples))):
            self._samples.popleft()


class Backoff:
    """Exponential backoff with "equal jitter": attempt n waits between half and all of min(cap, base·2ⁿ).

    The jitter spreads a fleet of agents that all lost the portal at the same moment; the lower half bound keeps the
    delay growing so a dead portal is not hammered.
    """

    def __init__(self, base: float = 5.0, cap: float = 300.0, rng: random.Random | None = None):
        self.base = base
        self.cap = cap
        self.rng = rng or random.Random()  # noqa: S311 - jitter, not security
        self.attempt = 0

    def ceiling(self, attempt: int) -> float:
        return min(self.cap, self.base * (2**attempt))

    def next_delay(self) -> float:
        ceiling = self.ceiling(self.attempt)
        self.attempt += 1
        return ceiling / 2 + self.rng.uniform(0, ceiling / 2)

    def reset(self) -> None:
        self.attempt = 0


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Retry-After as seconds from ``now``: delta-seconds or an HTTP date (RFC 9110 §10.2.3). None if absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        seconds = float(value)
    else:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - now
    return min(max(seconds, 0.0), RETRY_AFTER_CAP_SECONDS)


@dataclass
class PostResult:
    """What one POST came to: ``status`` None when no HTTP answer came back at all."""

    status: int | None
    body: str = ""
    retry_after: str | None = None
    error: str = ""

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300

    @property
    def retryable(self) -> bool:
        return self.status is None or self.status >= 500 or self.status in RETRYABLE_4XX


def http_post(url: str, body: bytes, headers: dict[str, str], timeout: float) -> PostResult:
    """POST with urllib; every outcome (HTTP error, refused connection, timeout) comes back as a PostResult."""
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")  # noqa: S310 - http(s) only
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return PostResult(response.status, response.read().decode("utf-8", "replace"))
    except urllib.error.HTTPError as error:
        text = error.read().decode("utf-8", "replace") if error.fp else ""
        return PostResult(error.code, text, error.headers.get("Retry-After") if error.headers else None)
    except (urllib.error.URLError, OSError, http.client.HTTPException) as error:  # refused, DNS, TLS, timeout, cut
        reason = getattr(error, "reason", error)
        return PostResult(None, error=str(reason))


class Sender:
    """Drains a :class:`SampleBuffer` to the portal in POSTs of at most ``max_batch`` samples."""

    def __init__(
        self,
        portal_url: str,
        node: str,
        token: Callable[[], str],
        buffer: SampleBuffer,
        *,
        backoff: Backoff | None = None,
        post: Callable[[str, bytes, dict[str, str], float], PostResult] = http_post,
        timeout: float = 15.0,
        max_batch: int = MAX_SAMPLES_PER_POST,
        cluster: str = "",
    ):
        if not portal_url.startswith(("http://", "https://")):
            raise ValueError(f"PORTAL_URL must start with http:// or https://, not {portal_url!r}.")
        self.url = portal_url.rstrip("/") + INGEST_PATH
        self.node = node
        #: The portal's name for the node's cluster; the portal refuses a batch whose token is another cluster's.
        self.cluster = cluster
        self.token = token
        self.buffer = buffer
        self.backoff = backoff or Backoff()
        self.post = post
        self.timeout = timeout
        self.max_batch = max_batch
        self.next_attempt = float("-inf")  # on the ``now`` clock; in the future while backing off
        self.delivered = 0
        self.rejected = 0

    def body(self, samples: list[dict[str, Any]], now: float) -> dict[str, Any]:
        body = {"node": self.node, "sent_at": rfc3339(now), "agent": AGENT_NAME, "samples": samples}
        return {**body, "cluster": self.cluster} if self.cluster else body

    def flush(self, now: float, wall: float | None = None) -> bool:
        """Send what the buffer holds, batch by batch, until it is empty or a batch must wait.

        ``now`` schedules the retries (monotonic in the agent), ``wall`` is the time of day for ``sent_at`` and
        HTTP-date Retry-After (the same clock when not given). Returns True when the buffer was emptied. While
        backing off (``now < next_attempt``) nothing is sent.
        """
        wall = now if wall is None else wall
        if now < self.next_attempt:
            return False
        size = self.max_batch
        while len(self.buffer):
            batch = self.buffer.peek(size)
            result = self._send(batch, wall)
            if result.delivered:
                self._check_accepted(result, len(batch))
                self.buffer.discard(len(batch))
                self.delivered += len(batch)
                self.backoff.reset()
                size = self.max_batch
                continue
            if result.status == 413 and len(batch) > 1:
                # The server's limit is below ours: remember the smaller size for the rest of this run.
                size = self.max_batch = max(1, len(batch) // 2)
                log.warning("The portal refused %d samples as too many (413); sending %d at a time.", len(batch), size)
                continue
            if not result.retryable:
                self.buffer.discard(len(batch))
                self.rejected += len(batch)
                log.error(
                    "The portal rejected %d samples with HTTP %s and they were dropped (sending them again would "
                    "fail the same way): %s%s",
                    len(batch),
                    result.status,
                    result.body[:2000],
                    self._advice(result.status),
                )
                continue
            server_delay = parse_retry_after(result.retry_after, wall)
            delay = self.backoff.next_delay() if server_delay is None else server_delay
            if server_delay is not None:
                self.backoff.attempt += 1  # a server asking for patience still counts as a failed attempt
            self.next_attempt = now + delay
            cause = f"HTTP {result.status}" if result.status is not None else result.error or "no answer"
            log.warning(
                "Could not deliver %d buffered samples to %s (%s); retrying in %.0f s.",
                len(self.buffer),
                self.url,
                cause,
                delay,
            )
            return False
        return True

    def _send(self, batch: list[dict[str, Any]], now: float) -> PostResult:
        body = json.dumps(self.body(batch, now), separators=(",", ":")).encode()
        headers = {
            "Authorization": f"Bearer {self.token()}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "User-Agent": AGENT_NAME,
        }
        started = time.monotonic()
        result = self.post(self.url, body, headers, self.timeout)
        log.debug("POST %d samples: %s in %.2f s", len(batch), result.status, time.monotonic() - started)
        return result

    @staticmethod
    def _check_accepted(result: PostResult, sent: int) -> None:
        """202 {"accepted": n}: fewer than sent means the server kept only some (duplicates, say); worth a line."""
        try:
            accepted = json.loads(result.body).get("accepted") if result.body else None
        except (ValueError, AttributeError):
            accepted = None
        if isinstance(accepted, int) and accepted != sent:
            log.info("The portal accepted %d of %d samples.", accepted, sent)

    @staticmethod
    def _advice(status: int | None) -> str:
        if status == 401:
            return " — the node token is not valid: check the Secret mounted as PORTAL_AGENT_TOKEN / --token-file."
        if status == 403:
            return (
                " — the token belongs to another node or cluster: NODE_NAME and PORTAL_AGENT_CLUSTER must be the node "
                "and cluster the token was issued for."
            )
        return ""
