"""The shared cache on Redis (CACHE_URL) fails soft: a Redis that is down or stops answering costs a request at most
one short wait, never an error, so the API, its token authentication and its throttles keep answering.

The rule:

- Each operation waits at most PORTAL_CACHE_TIMEOUT_SECONDS to connect and as long for the answer (django-redis's
  SOCKET_CONNECT_TIMEOUT and SOCKET_TIMEOUT, which portal/settings.py puts in CACHES' OPTIONS).
- When an operation fails (refused, timed out, or an error answer), the process logs a warning and keeps what it
  would have kept in Redis in its own memory for PORTAL_CACHE_RETRY_SECONDS: one local-memory store per process,
  shared by its threads. Throttle counts, stream slots and kick marks then count per process, as on the embedded
  default (locmemcache), instead of across processes. Operations in that time do not try Redis at all, so they wait
  for nothing.
- After that the next operation tries Redis again; the first that succeeds logs that the cache answers again, and
  from then on values live in Redis again (what the process kept meanwhile lapses on its own).

Everything else is django-redis's RedisCache (with its documented default, IGNORE_EXCEPTIONS off, so a failure
reaches this class): the same operations, arguments and results, only where the values live changes while Redis is
away. django-redis rather than Django's own RedisCache because Django's makes a redis-py client for every operation
(about 130 µs of CPU a get against django-redis's 40 µs, which keeps its client for the cache object's thread;
docs/benchmarks.md, section 0), and every API request with a token reads the cache at least once
(core/throttles.py).
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.cache.backends.locmem import LocMemCache
from django_redis.cache import RedisCache
from redis.exceptions import RedisError

log = logging.getLogger(__name__)

#: Per Redis location, until when (time.monotonic()) this process keeps values in its own memory. Django makes one
#: cache object per thread; the outage is the process's, so the mark is kept here, beside them.
_AWAY_UNTIL: dict[str, float] = {}


class FailSoftRedisCache(RedisCache):
    """django-redis's RedisCache that falls back to the process's own memory while Redis fails (see the module)."""

    def __init__(self, server, params):
        super().__init__(server, params)
        self.where = server if isinstance(server, str) else ",".join(server)
        # The same name in every thread's object: LocMemCache keeps one store per name, so they share it.
        local_params = {name: value for name, value in params.items() if name != "OPTIONS"}
        self.local = LocMemCache(f"fail-soft:{self.where}", local_params)

    def _either(self, operation: str, *args, **kwargs):
        away_until = _AWAY_UNTIL.get(self.where)
        if away_until is not None and time.monotonic() < away_until:
            return getattr(self.local, operation)(*args, **kwargs)
        try:
            result = getattr(super(), operation)(*args, **kwargs)
        except (RedisError, OSError) as error:  # django-redis re-raises redis-py's error (or socket.timeout)
            if away_until is None:
                log.warning(
                    "The cache (CACHE_URL, Redis) failed: %s: %s. Throttle counts, stream slots and kick marks are "
                    "kept in this process for %s s, then Redis is tried again. Check that Redis runs and answers.",
                    type(error).__name__,
                    error,
                    settings.PORTAL_CACHE_RETRY_SECONDS,
                )
            _AWAY_UNTIL[self.where] = time.monotonic() + settings.PORTAL_CACHE_RETRY_SECONDS
            return getattr(self.local, operation)(*args, **kwargs)
        if away_until is not None and _AWAY_UNTIL.pop(self.where, None) is not None:
            log.warning("The cache (CACHE_URL, Redis) answers again; counts are shared by every process again.")
        return result

    def add(self, *args, **kwargs):
        return self._either("add", *args, **kwargs)

    def get(self, *args, **kwargs):
        return self._either("get", *args, **kwargs)

    def set(self, *args, **kwargs):
        return self._either("set", *args, **kwargs)

    def touch(self, *args, **kwargs):
        return self._either("touch", *args, **kwargs)

    def delete(self, *args, **kwargs):
        return self._either("delete", *args, **kwargs)

    def get_many(self, *args, **kwargs):
        return self._either("get_many", *args, **kwargs)

    def has_key(self, *args, **kwargs):
        return self._either("has_key", *args, **kwargs)

    def incr(self, *args, **kwargs):
        return self._either("incr", *args, **kwargs)

    def set_many(self, *args, **kwargs):
        return self._either("set_many", *args, **kwargs)

    def delete_many(self, *args, **kwargs):
        return self._either("delete_many", *args, **kwargs)

    def clear(self):
        return self._either("clear")
