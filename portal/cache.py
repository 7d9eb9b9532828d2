"""Django's Redis cache, with one client per connection pool instead of one per call.

``django.core.cache.backends.redis.RedisCacheClient`` builds a new ``redis.Redis`` for every operation. Building
one copies redis-py's table of response callbacks into two case-insensitive dicts (~160 upper-cased keys): about
60 µs of CPU, nearly what the GET it is built for costs (bench/api_cpu.py's profile of the bare view with CACHE_URL
on Redis: a fifth of its CPU).
Every API request with a token reads the failed-token throttle (core.throttles), and every submission marks
its kick (jobs.kick), so that was paid on nearly every request.

A ``redis.Redis`` holds no connection of its own: each command takes one from the pool and gives it back, so one
client per pool serves every thread (redis-py's documentation: client instances are thread-safe). The pools, the
servers chosen for reads and writes, the serializer and every cache method are Django's own.

``portal/settings.py`` uses this backend whenever CACHE_URL names Redis.
"""

from __future__ import annotations

from django.core.cache.backends.redis import RedisCache, RedisCacheClient


class SharedClientRedisCacheClient(RedisCacheClient):
    """Django's client, building each pool's ``redis.Redis`` once."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._clients: dict[int, object] = {}  # id of a pool (Django keeps its pools for good) → its client

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(id(pool))
        if client is None:  # two threads at once may both build one; setdefault keeps the first
            client = self._clients.setdefault(id(pool), self._client(connection_pool=pool))
        return client


class SharedClientRedisCache(RedisCache):
    """``django.core.cache.backends.redis.RedisCache`` with ``SharedClientRedisCacheClient``."""

    def __init__(self, server, params):
        super().__init__(server, params)
        self._class = SharedClientRedisCacheClient
