"""The agent's loop: sample every ``interval`` seconds, flush every ``flush`` seconds, start NVML with backoff.

Single-threaded and driven by an injected clock and sleep, so tests step through hours of outages instantly.
``step()`` does whatever is due at this instant and returns how long to sleep before something else is.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from .nvml import NvmlCollector, NvmlUnavailable, log_inventory
from .sender import Backoff, Sender, rfc3339

log = logging.getLogger(__name__)


class AgentRunner:
    def __init__(
        self,
        collector: NvmlCollector,
        sender: Sender,
        *,
        interval: float = 10.0,
        flush: float = 30.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
        init_backoff: Backoff | None = None,
    ):
        self.collector = collector
        self.sender = sender
        self.buffer = sender.buffer
        self.interval = interval
        self.flush_every = flush
        # Timestamps come from the wall clock; the schedule from a monotonic one, so an NTP step backwards does not
        # stall sampling for as long as the step (a test's fake clock serves as both).
        self.clock = clock
        self.monotonic = monotonic or (time.monotonic if clock is time.time else clock)
        self.sleep = sleep
        # A node without its driver yet (the GPU operator installs it after the DaemonSet starts) must not be
        # polled in a tight loop: 10 s, 20 s, 40 s … up to 5 minutes between init attempts.
        self.init_backoff = init_backoff or Backoff(base=10.0, cap=300.0)
        self.next_init = float("-inf")
        self.next_sample = float("-inf")
        self.next_flush: float | None = None
        self.init_failures = 0
        self._dropped_logged = 0
        self._dropped_logged_at = float("-inf")
        self.stopping = False
        self._inventory_due = False

    def step(self) -> float:
        now, wall = self.monotonic(), self.clock()
        if not self.collector.ready and now >= self.next_init:
            self._start_nvml(now)
        if self.collector.ready and now >= self.next_sample:
            self._sample(now, wall)
            # Keep the cadence (t0, t0+10, t0+20 …) unless a tick overran a whole interval.
            self.next_sample += self.interval
            if self.next_sample <= now:
                self.next_sample = now + self.interval
        if self.next_flush is None:
            self.next_flush = now + self.flush_every
        if now >= self.next_flush:
            emptied = self.sender.flush(now, wall)
            # A batch that must wait is retried when its backoff ends (sooner or later than the next flush tick).
            backing_off = not emptied and self.sender.next_attempt > now
            self.next_flush = self.sender.next_attempt if backing_off else now + self.flush_every
        self._log_dropped(now)
        return max(0.0, self._next_event() - now)

    def _next_event(self) -> float:
        return min(self.next_flush, self.next_sample if self.collector.ready else self.next_init)

    def _start_nvml(self, now: float) -> None:
        try:
            self.collector.start()
        except NvmlUnavailable as error:
            self.init_failures += 1
            delay = self.init_backoff.next_delay()
            self.next_init = now + delay
            log.error("NVML could not start: %s. Trying again in %.0f s.", error, delay)
            return
        if self.init_failures:
            log.info("NVML started after %d failed attempts.", self.init_failures)
        self.init_failures = 0
        self.init_backoff.reset()
        self.next_sample = now
        self._inventory_due = True

    def _sample(self, now: float, wall: float) -> None:
        try:
            readings = self.collector.collect(rfc3339(wall))
        except NvmlUnavailable as error:
            self.collector.stop()
            delay = self.init_backoff.next_delay()
            self.next_init = now + delay
            log.error("NVML stopped answering: %s. Restarting it in %.0f s.", error, delay)
            return
        except Exception:  # a bug or an NVML surprise must cost one tick, not the agent
            log.exception("Collecting the GPU readings failed; the next tick tries again.")
            return
        if self._inventory_due:
            log_inventory(readings)
            self._inventory_due = False
        self.buffer.extend(reading.to_sample() for reading in readings)

    def _log_dropped(self, now: float) -> None:
        """Say how many samples the full buffer cost, at most once a minute (it can drop one batch per tick)."""
        fresh = self.buffer.dropped - self._dropped_logged
        if fresh and now - self._dropped_logged_at >= 60:
            log.warning(
                "The sample buffer is full (%d samples) while the portal cannot be reached: dropped %d of the oldest, "
                "%d since the agent started.",
                self.buffer.capacity,
                fresh,
                self.buffer.dropped,
            )
            self._dropped_logged = self.buffer.dropped
            self._dropped_logged_at = now

    def run(self, should_stop: Callable[[], bool] | None = None) -> None:
        """Loop until ``should_stop()`` or :meth:`stop`; then one last flush attempt and nvmlShutdown."""
        should_stop = should_stop or (lambda: False)
        try:
            while not self.stopping and not should_stop():
                self.sleep(self.step())
        finally:
            if len(self.buffer):
                self.sender.next_attempt = float("-inf")
                self.sender.flush(self.monotonic(), self.clock())
            self.collector.stop()

    def stop(self, *_args) -> None:
        self.stopping = True
