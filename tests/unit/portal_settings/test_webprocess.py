"""portal.webprocess.settle, as gunicorn.conf.py's post_worker_init runs it in every web worker: the loaded objects
are frozen out of the collector's walks and the GIL's switch interval is the setting's."""

from __future__ import annotations

import gc
import runpy
import sys
from pathlib import Path

import pytest

CONF = Path(__file__).resolve().parents[3] / "gunicorn.conf.py"


@pytest.fixture
def restored():
    interval = sys.getswitchinterval()
    yield
    gc.unfreeze()
    sys.setswitchinterval(interval)


def test_the_worker_hook_freezes_what_is_loaded_and_sets_the_switch_interval(settings, restored):
    settings.PORTAL_GIL_SWITCH_SECONDS = 0.002
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    hooks = runpy.run_path(str(CONF))
    hooks["post_worker_init"](worker=None)
    # Django, DRF and every view module the URLconf names are among the frozen objects; a full collection no
    # longer walks them.
    assert gc.get_freeze_count() > 50_000
    assert sys.getswitchinterval() == pytest.approx(0.002)


def test_a_zero_switch_interval_keeps_pythons_own(settings, restored):
    settings.PORTAL_GIL_SWITCH_SECONDS = 0
    sys.setswitchinterval(0.005)
    runpy.run_path(str(CONF))["post_worker_init"](worker=None)
    assert sys.getswitchinterval() == pytest.approx(0.005)
    assert gc.get_freeze_count() > 0


def test_another_django_project_served_from_the_checkout_still_boots(settings, restored):
    # The suite's OpenID provider runs under gunicorn from the checkout, so it gets this hook too (a CI run failed
    # with "Worker failed to boot" before the hook read the setting with a default).
    del settings.PORTAL_GIL_SWITCH_SECONDS
    sys.setswitchinterval(0.005)
    runpy.run_path(str(CONF))["post_worker_init"](worker=None)
    assert sys.getswitchinterval() == pytest.approx(0.005)
    assert gc.get_freeze_count() > 0


def test_the_production_defaults_are_four_processes_of_one_turn_and_a_short_switch(monkeypatch):
    from django.conf import settings  # noqa: PLC0415

    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    monkeypatch.delenv("GUNICORN_THREADS", raising=False)
    conf = runpy.run_path(str(CONF))
    assert (conf["workers"], conf["threads"]) == (4, 16)
    assert settings.PORTAL_BUSY_REQUESTS == 1
    assert settings.PORTAL_GIL_SWITCH_SECONDS == pytest.approx(0.001)
