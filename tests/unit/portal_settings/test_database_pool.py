"""The web processes' PostgreSQL connection pool: gunicorn.conf.py's post_fork sizes it to the worker's threads
before the application loads, an operator's DATABASE_POOL_MAX wins, and portal.settings turns the number into
Django's pool options (persistent connections off, as Django requires with a pool); without it, and on SQLite,
nothing changes. Settings are loaded in a fresh interpreter with their own environment, as a deployment would.

Prepared statements (DATABASE_PREPARE_THRESHOLD): by default a pooled connection (the web processes') prepares a
query the fifth time it runs it, which needs the values sent apart from the query (server-side binding); 0 turns
both off, as Django ships; Celery's unpooled connections and SQLite get neither. On PostgreSQL (CI), a query run
six times on a pooled connection really is prepared there."""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from django.db import connection

REPO = Path(__file__).resolve().parents[3]
PROBE = (
    "import json; from django.conf import settings; db = settings.DATABASES['default']; "
    "print(json.dumps({'max_age': db.get('CONN_MAX_AGE'), 'pool': db.get('OPTIONS', {}).get('pool')}))"
)


OPTIONS = (
    "import json; from django.conf import settings; options = settings.DATABASES['default'].get('OPTIONS', {}); "
    "print(json.dumps({k: options.get(k) for k in ('server_side_binding', 'prepare_threshold')}))"
)


def database_settings(probe: str = PROBE, **environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_", "DATABASE_"))}
    env |= {"DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": "/tmp/portal-settings-test"}
    env |= environment
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
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


def test_the_web_processes_pool_prepares_repeated_queries_unless_the_operator_turns_it_off():
    on = {"server_side_binding": True, "prepare_threshold": 5}
    off = {"server_side_binding": None, "prepare_threshold": None}
    assert database_settings(OPTIONS, DATABASE_URL=PG, DATABASE_POOL_MAX="4") == on
    assert database_settings(OPTIONS, DATABASE_URL=PG, DATABASE_POOL_MAX="4", DATABASE_PREPARE_THRESHOLD="2") == {
        "server_side_binding": True,
        "prepare_threshold": 2,
    }
    assert database_settings(OPTIONS, DATABASE_URL=PG, DATABASE_POOL_MAX="4", DATABASE_PREPARE_THRESHOLD="0") == off
    # Celery's processes: no pool, values bound into the query as Django does.
    assert database_settings(OPTIONS, DATABASE_URL=PG) == off
    sqlite = "sqlite:////tmp/portal-settings-test/x.sqlite3"
    assert database_settings(OPTIONS, DATABASE_URL=sqlite, DATABASE_POOL_MAX="4") == off


#: Run with a pool against the test database: the same query six times, then what the connection has prepared.
PREPARED = """
import json, django
django.setup()
from django.db import connection
for _ in range(6):
    with connection.cursor() as cursor:
        cursor.execute("SELECT datname FROM pg_database WHERE datname = %s", [connection.settings_dict["NAME"]])
        cursor.fetchall()
with connection.cursor() as cursor:
    cursor.execute("SELECT statement FROM pg_prepared_statements")
    print(json.dumps([row[0] for row in cursor.fetchall()]))
"""


@pytest.mark.django_db
def test_a_query_run_six_times_on_a_pooled_connection_is_prepared_on_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's (CI runs this there)")
    db = connection.settings_dict
    url = (
        f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    )

    def prepared(**environment: str) -> list[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_"))}
        env |= {
            "DJANGO_SETTINGS_MODULE": "portal.settings",
            "DATABASE_URL": url,
            "DATABASE_POOL_MAX": "2",
        } | environment
        done = subprocess.run([sys.executable, "-c", PREPARED], cwd=REPO, env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert "SELECT datname FROM pg_database WHERE datname = $1" in prepared()
    assert prepared(DATABASE_PREPARE_THRESHOLD="0") == []
