"""A hand-moved clock for the simulated cluster in tests."""

from __future__ import annotations

import time
from datetime import UTC, datetime

DAY = 86_400.0
#: The fixed start of the cluster tests' clock (FakeClock), epoch seconds.
T0 = 1_716_000_000.0


class SimClock:
    """The simulated cluster's clock: starts a minute ahead of the wall clock (which stamps submissions, so
    the cluster never sees work from its future) and moves only when a test advances it.

    With ``hour`` it starts at that hour (UTC) of the day after today instead: the simulated request load on
    services follows the hour of the day (cluster/sim/traffic.py), so a test that counts replicas must not
    depend on the hour it happens to run at."""

    def __init__(self, hour: float | None = None) -> None:
        if hour is None:
            self.t = time.time() + 60
        else:
            self.t = (time.time() // DAY + 1) * DAY + hour * 3600

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds

    @property
    def now(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)

    @property
    def hour(self) -> float:
        """The hour of the day (UTC, 0-24)."""
        return (self.t % DAY) / 3600


class FakeClock:
    """The cluster tests' clock: epoch seconds in ``now``, fixed at ``T0`` unless told otherwise, moved by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
