"""The web processes' PostgreSQL connection pool: gunicorn.conf.py's post_fork sizes it to the worker's threads
before the application loads, an operator's DATABASE_POOL_MAX wins, and portal.settings turns the number into
Django's pool options (persistent connections off, as Django requires with a pool); without it, and on SQLite,
nothing changes. Settings are loaded in a fresh interpreter with their own environment, as a deployment would."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[3]
PROBE = (
    "import json; from django.conf import settings; db = settings.DATABASES['default']; "
    "print(json.dumps({'max_age': db.get('CONN_MAX_AGE'), 'pool': db.get('OPTIONS', {}).get('pool')}))"
)


def database_settings(**environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_", "DATABASE_"))}
    env |= {"DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": "/tmp/portal-settings-test"}
    env |= environment
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


PG = "postgres://portal@db.example:5432/portal"


def test_a_pool_size_gives_django_a_pool_and_no_persistent_connections():
    assert database_settings(DATABASE_URL=PG, DATABASE_POOL_MAX="6") == {
        "max_age": 0,
        "pool": {"min_size": 2, "max_size": 6, "max_idle": 60, "timeout": 30},
    }
    assert database_settings(DATABASE_URL=PG, DATABASE_POOL_MAX="1")["pool"]["min_size"] == 1


def test_without_a_pool_size_each_thread_keeps_a_persistent_connection():
    assert database_settings(DATABASE_URL=PG) == {"max_age": 60, "pool": None}
    assert database_settings(DATABASE_URL=PG, DATABASE_POOL_MAX="0") == {"max_age": 60, "pool": None}
    sqlite = database_settings(DATABASE_URL="sqlite:////tmp/portal-settings-test/x.sqlite3", DATABASE_POOL_MAX="6")
    assert sqlite["pool"] is None


def test_gunicorn_sizes_the_pool_to_the_workers_threads_unless_the_operator_did(monkeypatch):
    config = runpy.run_path(str(REPO / "gunicorn.conf.py"))
    worker = SimpleNamespace(cfg=SimpleNamespace(threads=7))
    monkeypatch.delenv("DATABASE_POOL_MAX", raising=False)
    config["post_fork"](None, worker)
    assert os.environ["DATABASE_POOL_MAX"] == "7"
    monkeypatch.setenv("DATABASE_POOL_MAX", "3")
    config["post_fork"](None, worker)
    assert os.environ["DATABASE_POOL_MAX"] == "3"
