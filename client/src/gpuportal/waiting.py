"""How ``Client.wait()`` waits for a job to end. Today it polls the job with a growing interval; the portal will
offer a long-poll (issue 18), and a ``Waiter`` using it can replace ``PollingWaiter`` without changing callers.

``sleep`` and ``monotonic`` are this module's names for the clock, so a test can drive the waiting step by step."""

from __future__ import annotations

from collections.abc import Callable
from time import monotonic, sleep
from typing import Protocol

from .errors import WaitTimeout
from .types import FINAL_STATES, Job

__all__ = ["PollingWaiter", "Waiter", "monotonic", "sleep"]


class Waiter(Protocol):
    def wait(self, fetch: Callable[[], Job], timeout: float | None) -> Job:
        """Return the job once it is in a final state; raise WaitTimeout after ``timeout`` seconds."""
        ...


class PollingWaiter:
    """GET the job, then again after ``first`` seconds, each pause ``factor`` times longer up to ``longest``."""

    def __init__(self, first: float = 1.0, factor: float = 1.5, longest: float = 15.0) -> None:
        self.first, self.factor, self.longest = first, factor, longest

    def wait(self, fetch: Callable[[], Job], timeout: float | None) -> Job:
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
