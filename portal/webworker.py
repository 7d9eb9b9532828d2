"""The web processes' gunicorn worker: gthread, except that a process accepts a new connection only while it has a
turn free for the connection's first request (gunicorn.conf.py names it; ``--worker-class gthread`` is the plain one).

Every gthread process of a gunicorn server polls the same listening socket, and whichever wakes first accepts. A
client then keeps its connection (HTTP keep-alive), so every later request on it goes to that process, busy or not.
A process runs one request at a time (accounts.turns, PORTAL_BUSY_REQUESTS), so a process that happened to accept
more of the connections queues more requests while another idles: with the bench's 64 keep-alive clients on four
processes, 21, 18, 14 and 11 connections each, and the busiest process set the tail (docs/benchmarks.md, section 0).

Here a process stops polling the listening socket while the requests it is running or has queued (less those paused
in a long-poll, ``turns.idle``) fill its turns, and polls it again when one ends or pauses. A connection that
arrives meanwhile waits in the kernel's accept queue for the first process with a free turn, as a request waits at a
shared counter for the first free clerk. Requests on connections already accepted are served as before. Without
turns (PORTAL_BUSY_REQUESTS=0) the process accepts like gthread.

It also tells the arbiter it is alive (``notify``: a ``utime`` system call on the worker's heartbeat file) at most once
a second, where gthread's loop does it on every pass, so once or twice per request; the arbiter only needs to hear
from it once per ``--timeout`` (30 s by default).
"""

from __future__ import annotations

import math
import selectors
import time
from functools import partial

from gunicorn.workers.gthread import ThreadWorker

from accounts import turns


class TurnTakingWorker(ThreadWorker):
    """gthread that leaves new connections to processes with a free turn (module docstring)."""

    def init_process(self):
        self.start_counting()
        super().init_process()  # loads the application, then runs the worker's loop until the process exits

    #: Seconds between two heartbeats at most (``notify``); far under any sane --timeout.
    HEARTBEAT_SECONDS = 1.0

    def notify(self):
        now = time.monotonic()
        if now - self._notified >= self.HEARTBEAT_SECONDS:
            self._notified = now
            super().notify()

    def start_counting(self) -> None:
        self._notified = -math.inf  # the first pass of the loop tells the arbiter at once
        self.in_flight = 0  # requests handed to the thread pool and not finished
        self.listening = True  # run() registers the listening sockets
        self._turns: turns.Turns | None = None
        self._turns_known = False

    def _turns_of_process(self) -> turns.Turns | None:
        # Read on the first request, once the application (and so Django's settings) is loaded.
        if not self._turns_known:
            self._turns = turns.per_process()
            if self._turns is not None:
                self._turns.watch(self._reconsider)
            self._turns_known = True
        return self._turns

    def _reconsider(self, started: int = 0) -> None:
        """Count ``started`` requests more in flight (-1: one ended); then poll the listening sockets if a turn is
        free for a new request, else leave them to other processes."""
        with self._lock:
            self.in_flight += started
            process_turns = self._turns_of_process()
            wanted = process_turns is None or self.in_flight - process_turns.paused < process_turns.count
            if wanted == self.listening or not self.alive:
                return
            for listener in self.sockets:
                if wanted:
                    self.poller.register(listener, selectors.EVENT_READ, partial(self.accept, listener.getsockname()))
                else:
                    self.poller.unregister(listener)
            self.listening = wanted

    def enqueue_req(self, conn):
        self._reconsider(started=1)
        super().enqueue_req(conn)

    def finish_request(self, fs):
        super().finish_request(fs)
        self._reconsider(started=-1)
