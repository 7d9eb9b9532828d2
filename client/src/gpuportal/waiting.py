"""How ``Client.wait()`` waits for a job to end.

``LongPollWaiter`` (the default) asks the portal to answer once the job has ended (``GET /api/v1/jobs/{id}/wait/``),
at most ``LONG_POLL_SECONDS`` per request, and asks again until it has, so a waiting client sends one request
per half minute instead of polling. A portal from before the long-poll answers its URL with 404; then (and only
then) the waiter falls back to ``PollingWaiter``: GET the job with a growing pause.

A waiter gets ``fetch``: ``fetch()`` is a plain GET of the job, ``fetch(seconds=s)`` a long-poll of at most ``s``
seconds. ``sleep`` and ``monotonic`` are this module's names for the clock (and ``LONG_POLL_SECONDS`` the
long-poll's length), so a test can drive the waiting step by step."""

from __future__ import annotations

from time import monotonic, sleep
from typing import Protocol

from .errors import NotFound, WaitTimeout
from .types import FINAL_STATES, Job

__all__ = ["LONG_POLL_SECONDS", "LongPollWaiter", "PollingWaiter", "Waiter", "monotonic", "sleep"]

#: Seconds one long-poll request may last (the portal takes up to 60).
LONG_POLL_SECONDS = 30.0


class Fetch(Protocol):
    def __call__(self, *, seconds: float | None = None) -> Job: ...


class Waiter(Protocol):
    def wait(self, fetch: Fetch, timeout: float | None) -> Job:
        """Return the job once it is in a final state; raise WaitTimeout after ``timeout`` seconds."""
        ...


class PollingWaiter:
    """GET the job, then again after ``first`` seconds, each pause ``factor`` times longer up to ``longest``."""

    def __init__(self, first: float = 1.0, factor: float = 1.5, longest: float = 15.0) -> None:
        self.first, self.factor, self.longest = first, factor, longest

    def wait(self, fetch: Fetch, timeout: float | None) -> Job:
        deadline = None if timeout is None else monotonic() + timeout
        pause = self.first
        while True:
            job = fetch()
            if job.get("state") in FINAL_STATES:
                return job
            if deadline is not None:
                left = deadline - monotonic()
                if left <= 0:
                    raise WaitTimeout(job, timeout or 0)
                pause = min(pause, left)
            sleep(pause)  # the module's global, looked up now: a test may have replaced it
            pause = min(pause * self.factor, self.longest)


class LongPollWaiter:
    """Long-poll the job until it has ended; fall back to ``fallback`` (polling) on a portal without the
    long-poll."""

    def __init__(self, fallback: Waiter | None = None) -> None:
        self.fallback = fallback or PollingWaiter()

    def wait(self, fetch: Fetch, timeout: float | None) -> Job:
        deadline = None if timeout is None else monotonic() + timeout
        while True:
            left = None if deadline is None else max(0.0, deadline - monotonic())
            seconds = LONG_POLL_SECONDS if left is None else min(LONG_POLL_SECONDS, left)
            try:
                job = fetch(seconds=seconds)
            except NotFound:
                fetch()  # the job itself is not there (or not yours): that NotFound goes to the caller
                return self.fallback.wait(fetch, left)  # an older portal without the long-poll
            if job.get("state") in FINAL_STATES:
                return job
            if deadline is not None and monotonic() >= deadline:
                raise WaitTimeout(job, timeout or 0)
            sleep(0)  # nothing to wait for here (the portal waited); a test's clock moves on
