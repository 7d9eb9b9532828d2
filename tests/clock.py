"""A hand-moved clock for the simulated cluster in tests."""

from __future__ import annotations

import time
from datetime import UTC, datetime


class SimClock:
    """The simulated cluster's clock: starts a minute ahead of the wall clock (which stamps submissions, so
    the cluster never sees work from its future) and moves only when a test advances it."""

    def __init__(self) -> None:
        self.t = time.time() + 60

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    @property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)
