"""Turns: at most PORTAL_BUSY_REQUESTS requests of one web process run at once; the others wait for a turn.

A gunicorn gthread process runs each request on a thread of its own, and its threads share one GIL. With many
requests running at once, each one that comes back from a database query waits for the GIL behind all the others
(Python hands it over every 5 ms), and a request of a dozen queries waits a dozen times: at a high request rate the
slowest requests took 0.4–1 s for a few milliseconds of work (docs/benchmarks.md, section 0). A request waiting for
a turn instead waits on a semaphore, asleep, and the few running ones get the GIL back at once; processes, not
threads, share the cores.

The threads stay many (gunicorn.conf.py) because some requests wait on purpose: a long-poll gives its turn back
while it sleeps between its reads (``idle()``, jobs.eventstream), so waiting clients take threads, not turns. A
streamed response (an event stream, a followed log) is sent after the middleware has given the turn back.

Turns are handed out in the order requests asked for them (``Turns``): a freed turn goes straight to the request
that has waited longest. Python's ``threading.Semaphore`` lets a request that has just arrived take a freed turn
before the one it woke, which then waits again at the back of the queue, so under load a request could wait
behind any number of later ones.

``TurnsMiddleware`` comes first in MIDDLEWARE; 0 turns: no limit (every request runs at once, as before).

The web worker (portal.webworker) asks ``per_process()`` how many turns there are and how many requests are paused in
``idle()``, to accept a new connection only while a turn is free for it; ``watch`` tells it when a pause begins or
ends.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from django.conf import settings

_held = threading.local()
_create = threading.Lock()


class Turns:
    """A fixed number of turns, handed out first come, first served."""

    def __init__(self, count: int):
        self._lock = threading.Lock()
        self.count = count
        self.free = count
        self._waiting: deque[threading.Lock] = deque()
        #: Requests inside ``idle()``: running, but holding no turn and wanting none until they wake.
        self.paused = 0
        self._watchers: list[Callable[[], None]] = []

    def watch(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the request's thread) after a request pauses in ``idle()`` and after it resumes."""
        self._watchers.append(callback)

    def _pause(self, step: int) -> None:
        with self._lock:
            self.paused += step
        for callback in self._watchers:
            callback()

    def acquire(self) -> None:
        with self._lock:
            if self.free and not self._waiting:
                self.free -= 1
                return
            gate = threading.Lock()
            gate.acquire()
            self._waiting.append(gate)
        gate.acquire()  # opened by release(), which hands this request its turn

    def release(self) -> None:
        with self._lock:
            if self._waiting:
                self._waiting.popleft().release()  # the turn passes on; it is never free in between
            else:
                self.free += 1

    @property
    def waiting(self) -> int:
        return len(self._waiting)


_turns: Turns | None = None


def per_process() -> Turns | None:
    """This process's turns; None when PORTAL_BUSY_REQUESTS is 0 (no limit) or unset (gunicorn.conf.py, and so the
    web worker, also serves the test suite's OpenID provider, a Django project without the portal's settings)."""
    return _queue() if getattr(settings, "PORTAL_BUSY_REQUESTS", 0) > 0 else None


def _queue() -> Turns:
    global _turns
    if _turns is None:
        with _create:
            if _turns is None:
                _turns = Turns(settings.PORTAL_BUSY_REQUESTS)
    return _turns


class TurnsMiddleware:
    """Run each request in a turn (module docstring)."""

    def __init__(self, get_response):
        self.get_response = get_response
        self.limited = settings.PORTAL_BUSY_REQUESTS > 0

    def __call__(self, request):
        if not self.limited or getattr(_held, "turn", False):
            return self.get_response(request)
        turns = _queue()
        turns.acquire()
        _held.turn = True
        try:
            return self.get_response(request)
        finally:
            if _held.turn:
                turns.release()
            _held.turn = False


@contextmanager
def idle() -> Iterator[None]:
    """Give the running request's turn back while the block runs (a long-poll's pause); take one again after."""
    held = getattr(_held, "turn", False)
    if held:
        _held.turn = False
        turns = _queue()
        turns.release()
    try:
        if held:
            turns._pause(+1)  # inside the try: the count comes down again whatever a watcher does
        yield
    finally:
        if held:
            turns._pause(-1)
            turns.acquire()
            _held.turn = True
