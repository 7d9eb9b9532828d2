"""The shared cache on a real redis-server: django-redis's backend, failing soft (core/cache.py). Settings
pick it whenever CACHE_URL names Redis, with short socket timeouts; every cache operation the portal uses works on
it, from many threads at once, and lands in Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import redis

from core.cache import FailSoftRedisCache

from .processes import free_port, start_redis, stop

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def redis_url(tmp_path):
    port = free_port()
    server = start_redis(port, tmp_path)
    try:
        yield f"redis://127.0.0.1:{port}/3"
    finally:
        stop(server)


def test_settings_use_django_redis_failing_soft_for_redis_and_leave_other_caches_alone():
    probe = "from django.conf import settings; c = settings.CACHES['default']; print(c['BACKEND'], c.get('OPTIONS'))"

    def backend(url: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CACHE_"))}
        env |= {"DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": "/tmp/portal-settings-test"}
        env |= {"CACHE_URL": url} if url else {}
        done = subprocess.run([sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip().splitlines()[-1]

    assert backend("redis://redis:6379/1") == (
        "core.cache.FailSoftRedisCache {'SOCKET_CONNECT_TIMEOUT': 0.25, 'SOCKET_TIMEOUT': 0.25}"
    )
    assert backend("") == "django.core.cache.backends.locmem.LocMemCache None"


def test_every_operation_works_from_many_threads(redis_url):
    cache = FailSoftRedisCache(redis_url, {"OPTIONS": {"SOCKET_CONNECT_TIMEOUT": 0.25, "SOCKET_TIMEOUT": 0.25}})
    cache.set("history", [3.0, 2.0], 60)
    assert cache.get("history", []) == [3.0, 2.0]
    assert cache.add("mark", 1, 60) is True
    assert cache.add("mark", 2, 60) is False
    assert cache.get_many(["history", "mark", "absent"]) == {"history": [3.0, 2.0], "mark": 1}
    assert cache.incr("mark") == 2
    cache.delete("history")
    assert cache.get("history", "gone") == "gone"

    errors: list[BaseException] = []

    def hammer(n: int) -> None:
        try:
            for i in range(200):
                cache.set(f"t{n}", i, 60)
                assert cache.get(f"t{n}") == i
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert redis.Redis.from_url(redis_url).get(cache.make_and_validate_key("t0")) is not None
