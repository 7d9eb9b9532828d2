"""How many event streams and long-polls one identity may hold open at once (issue 30): past
PORTAL_STREAMS_PER_IDENTITY the next one is answered 429 with Retry-After and a sentence, so one pipeline or one
person with many tabs cannot take the stream server's threads from everyone else.

The rule:

- An identity is the signed-in user (a token's or a session's; a service account is a user of its own). Each open
  capped request holds one of the identity's numbered slots, a key in Django's cache added only if absent
  (``cache.add``, atomic on Redis and in the local memory cache alike). With CACHE_URL on Redis every process and
  replica counts against the same slots; on the embedded default (local memory), and while that Redis is down
  (core/cache.py), each process counts its own.
- A slot is given back when the request ends: a long-poll when its answer is ready, a stream when the server closes
  its response (the stream ended, or the client went away). A slot also lapses by itself a minute after the
  longest its request may last (PORTAL_WAIT_MAX_SECONDS, PORTAL_EVENT_STREAM_SECONDS, PORTAL_LOG_FOLLOW_SECONDS),
  so a process that died does not keep its slots.
- Retry-After is the seconds until the soonest of the identity's open requests ends at the latest.
- 0 turns the cap off.
"""

from __future__ import annotations

import functools
import logging
import math
import random
import time
import uuid
from collections.abc import Callable, Iterator

from django.conf import settings
from django.core.cache import cache
from drf_spectacular.utils import OpenApiResponse
from prometheus_client import Counter
from rest_framework import exceptions

logger = logging.getLogger(__name__)

#: A slot's key in the cache: one per identity and slot number.
SLOT_KEY = "portal-stream-slot:{ident}:{number}"
#: A slot outlives its request's longest length by this much before it lapses on its own (seconds).
LAPSE_MARGIN = 60

REFUSED = Counter(
    "gpuportal_stream_cap_refusals_total",
    "Event streams and long-polls answered 429 because their identity held PORTAL_STREAMS_PER_IDENTITY already.",
)

#: The 429 in the schema of each capped operation.
TOO_MANY = OpenApiResponse(
    description="You hold PORTAL_STREAMS_PER_IDENTITY event streams and long-polls open already (all kinds "
    "together); close one, or retry after Retry-After seconds (the soonest of yours ends by then)."
)


class StreamCapReached(exceptions.Throttled):
    """429 with Retry-After; the detail says what to do."""

    default_code = "too_many_streams"


class Slot:
    """One open capped request's place; ``release`` is safe to call twice."""

    def __init__(self, key: str | None = None, mark: str | None = None):
        self.key = key
        self.mark = mark

    def release(self) -> None:
        if self.key is None:
            return
        key, self.key = self.key, None
        held = cache.get(key)
        if held is not None and held[1] == self.mark:  # not a later request's slot taken after this one lapsed
            cache.delete(key)


#: How many slots ``take`` reads at once when its first try finds the slot taken.
WINDOW = 16


def take(ident: object, seconds: float) -> Slot:
    """A free slot of ``ident`` for a request lasting at most ``seconds``, or StreamCapReached.

    It tries one slot, a random one, with one ``cache.add``: while few of the identity's slots are held that takes
    one, and no request reads every slot. Else it reads the slots from there on WINDOW at a time and tries the
    free ones it saw, so a busy identity reads a few slots, not all of them (with 200 streams held under a cap of
    264, reading all of them was about a third of a long-poll's CPU, bench/streams_beside_load.py); a refusal has
    read them all, and Retry-After comes from what it read."""
    cap = settings.PORTAL_STREAMS_PER_IDENTITY
    if cap <= 0 or ident is None:
        return Slot()
    now = time.time()
    mark = uuid.uuid4().hex
    value, timeout = (now + seconds, mark), math.ceil(seconds) + LAPSE_MARGIN
    start = random.randrange(cap)  # noqa: S311 - spreads the tries over the slots; nothing secret
    first = SLOT_KEY.format(ident=ident, number=start)
    if cache.add(first, value, timeout=timeout):
        return Slot(first, mark)
    read = []  # what each window held, for Retry-After if every slot is held
    for at in range(1, cap, WINDOW):
        window = [
            SLOT_KEY.format(ident=ident, number=(start + step) % cap) for step in range(at, min(at + WINDOW, cap))
        ]
        read.append(cache.get_many(window))
        for key in window:
            if key not in read[-1] and cache.add(key, value, timeout=timeout):
                return Slot(key, mark)
    held = {key: end for seen in [cache.get_many([first]), *read] for key, end in seen.items()}
    soonest = min((end for end, _ in held.values()), default=now + 1)
    REFUSED.inc()
    logger.info("stream cap: identity %s holds %d streams and long-polls; refused one more", ident, len(held))
    raise StreamCapReached(
        wait=max(1, math.ceil(soonest - now)),
        detail=(
            f"You have {cap} event streams and long-polls open, the most one account may hold at once "
            "(PORTAL_STREAMS_PER_IDENTITY). Close one you no longer read, or retry after Retry-After seconds; a "
            "stream whose client went away frees its place at its next keep-alive."
        ),
    )


class _ReleasedAtClose:
    """A response's content that gives its slot back when it ends or the server closes the response."""

    def __init__(self, content, slot: Slot):
        self._content = iter(content)
        self._slot = slot

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._content)
        except StopIteration:
            self._slot.release()
            raise

    def close(self) -> None:
        try:
            close = getattr(self._content, "close", None)
            if close is not None:
                close()
        finally:
            self._slot.release()


def capped(seconds: Callable[[], float]):
    """Decorates a view's handler (``handler(self, request, ...)``, after DRF's authentication): it runs holding
    one of the user's slots; a streaming answer keeps the slot until it is closed. ``seconds()``: the longest the
    request may last."""

    def decorate(handler):
        @functools.wraps(handler)
        def view(self, request, *args, **kwargs):
            slot = take(request.user.pk, seconds())
            try:
                response = handler(self, request, *args, **kwargs)
            except BaseException:
                slot.release()
                raise
            if getattr(response, "streaming", False):
                response.streaming_content = _ReleasedAtClose(response.streaming_content, slot)
            else:
                slot.release()
            return response

        view.stream_capped = True  # the stream server serves it (tests/unit/test_stream_routing.py)
        return view

    return decorate


def wait_seconds() -> float:
    return settings.PORTAL_WAIT_MAX_SECONDS


def event_stream_seconds() -> float:
    return settings.PORTAL_EVENT_STREAM_SECONDS


def log_follow_seconds() -> float:
    return settings.PORTAL_LOG_FOLLOW_SECONDS
