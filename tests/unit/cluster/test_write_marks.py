"""The Kubernetes backend as get_backend() builds it: PORTAL_K8S_WATCH_CACHE turns its caches on or off, and its
write marks are shared through Django's cache (so one worker's read waits for another's write)."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.core.cache import cache

from cluster import get_backend
from cluster.kubernetes_cache import SharedWriteMarks, WriteMarks

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


@pytest.fixture
def kubernetes_settings(settings, tmp_path: Path):
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    settings.PORTAL_CLUSTER_BACKEND = "kubernetes"
    settings.PORTAL_K8S_IN_CLUSTER = False
    settings.PORTAL_KUBECONFIG = str(path)
    get_backend.cache_clear()
    yield settings
    get_backend.cache_clear()


@pytest.mark.parametrize("enabled", [True, False])
def test_the_setting_turns_the_caches_on_or_off(kubernetes_settings, enabled: bool) -> None:
    kubernetes_settings.PORTAL_K8S_WATCH_CACHE = enabled
    backend = get_backend()
    assert backend.watch_cache is enabled
    assert isinstance(backend.write_marks, SharedWriteMarks)


def test_write_marks_only_rise_and_are_seen_by_another_process() -> None:
    cache.clear()
    mine, theirs = SharedWriteMarks(), SharedWriteMarks()  # two processes' marks, one shared cache
    assert mine.newest("jobs") is None
    mine.note("jobs", "120")
    mine.note("jobs", "90")  # an older write answered later
    assert mine.newest("jobs") == "120" and theirs.newest("jobs") == "120"
    theirs.note("jobs", "130")
    assert mine.newest("jobs") == "130"
    assert mine.newest("nodes") is None  # per cache
    mine.note("jobs", "not-a-number")  # never raises, never lowers
    assert mine.newest("jobs") == "130"


def test_own_marks_hold_without_the_shared_cache(monkeypatch) -> None:
    marks = SharedWriteMarks()
    marks.note("jobs", "7")

    def down(*args, **kwargs):
        raise ConnectionError("cache down")

    monkeypatch.setattr(cache, "get", down)
    monkeypatch.setattr(cache, "set", down)
    marks.note("jobs", "9")
    assert marks.newest("jobs") == "9"
    plain = WriteMarks()
    plain.note("nodes", "3")
    assert plain.newest("nodes") == "3" and plain.newest("jobs") is None
