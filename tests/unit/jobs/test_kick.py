"""Kicks for the job cycle coalesce when every process shares the cache (jobs.kick): one cycle asked for and not
started yet takes every later change with it; a starting cycle lets the next change kick again. With the embedded
per-process cache every kick is still sent (a worker could not clear the web process's mark)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from celery import current_app
from django.core.cache import caches

from jobs import kick


@pytest.fixture
def sent(monkeypatch) -> list[str]:
    names: list[str] = []
    monkeypatch.setattr(current_app, "send_task", lambda name, **kwargs: names.append(name))
    return names


@pytest.fixture
def shared_cache(settings, tmp_path):
    # A cache every process can see (what Redis is in production): Django's file-based backend.
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache", "LOCATION": str(tmp_path)}
    }
    caches["default"].clear()
    yield
    caches["default"].clear()


def test_kicks_coalesce_until_a_cycle_starts(shared_cache, sent) -> None:
    for _ in range(5):
        kick.kick_admission()
    assert sent == [kick.RUN_CYCLE_TASK]
    kick.cycle_starting()
    kick.kick_admission()
    kick.kick_admission()
    assert sent == [kick.RUN_CYCLE_TASK] * 2


def test_the_cycle_task_clears_the_mark_before_it_reads(shared_cache, sent, monkeypatch) -> None:
    from jobs import tasks
    from jobs.cycle import metrics as cycle_metrics

    seen: list[object] = []

    def cycle(backend, fleet=None):  # what the cycle would find in the cache when it begins to read
        seen.append(caches["default"].get(kick.CYCLE_ASKED_KEY))
        return SimpleNamespace(as_dict=dict)

    monkeypatch.setattr(cycle_metrics, "run_observed_cycle", cycle)
    monkeypatch.setattr(tasks, "get_backend", lambda: None)
    monkeypatch.setattr(tasks.fleet, "reachable_names", list)  # no registered cluster to queue a pass of
    kick.kick_admission()
    assert caches["default"].get(kick.CYCLE_ASKED_KEY) == 1
    tasks.run_cycle()
    assert seen == [None]  # the cycle began with the mark gone


def test_a_kick_the_broker_refused_does_not_hold_back_the_next(shared_cache, monkeypatch) -> None:
    calls: list[str] = []

    def refuse(name, **kwargs):
        calls.append(name)
        raise ConnectionError("broker down")

    monkeypatch.setattr(current_app, "send_task", refuse)
    kick.kick_admission()
    kick.kick_admission()
    assert calls == [kick.RUN_CYCLE_TASK] * 2


def test_with_a_per_process_cache_every_kick_is_sent(settings, sent) -> None:
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    for _ in range(3):
        kick.kick_admission()
    assert sent == [kick.RUN_CYCLE_TASK] * 3
