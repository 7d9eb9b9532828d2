"""portal.webprocess.settle, as gunicorn.conf.py's post_worker_init runs it in every web worker: the loaded objects
are frozen out of the collector's walks; and gunicorn.conf.py's production defaults."""

from __future__ import annotations

import gc
import runpy
from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parents[3] / "gunicorn.conf.py"


@pytest.fixture
def restored():
    yield
    gc.unfreeze()


def test_the_worker_hook_freezes_what_is_loaded(restored):
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    hooks = runpy.run_path(str(CONF))
    hooks["post_worker_init"](worker=None)
    # Django, DRF and every view module the URLconf names are among the frozen objects; a full collection no
    # longer walks them.
    assert gc.get_freeze_count() > 50_000


def test_the_production_defaults_are_four_sync_processes(monkeypatch):
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    monkeypatch.delenv("GUNICORN_THREADS", raising=False)
    conf = runpy.run_path(str(CONF))
    assert (conf["workers"], conf["threads"], conf["worker_class"]) == (4, 1, "sync")
