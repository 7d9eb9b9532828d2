"""Prepared statements on PostgreSQL (portal/settings.py, DATABASE_PREPARE_THRESHOLD): by default a connection
prepares a query the fifth time it runs it, which needs the values sent apart from the query (server-side binding);
0 turns both off, as Django ships; SQLite gets neither. On PostgreSQL (CI), a query the ORM repeats on one connection
really is prepared there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from accounts.models import Team

REPO = Path(__file__).resolve().parents[3]
PROBE = (
    "import json; from django.conf import settings; options = settings.DATABASES['default'].get('OPTIONS', {}); "
    "print(json.dumps({k: options.get(k) for k in ('server_side_binding', 'prepare_threshold')}))"
)
PG = "postgres://portal@db.example:5432/portal"


def options(**environment: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_", "DATABASE_"))}
    env |= {"DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": "/tmp/portal-settings-test"}
    env |= environment
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_postgresql_prepares_repeated_queries_unless_the_operator_turns_it_off():
    on = {"server_side_binding": True, "prepare_threshold": 5}
    assert options(DATABASE_URL=PG) == on
    assert options(DATABASE_URL=PG, DATABASE_POOL_MAX="4") == on  # the web processes' pool too
    assert options(DATABASE_URL=PG, DATABASE_PREPARE_THRESHOLD="2")["prepare_threshold"] == 2
    off = {"server_side_binding": None, "prepare_threshold": None}
    assert options(DATABASE_URL=PG, DATABASE_PREPARE_THRESHOLD="0") == off
    assert options(DATABASE_URL="sqlite:////tmp/portal-settings-test/x.sqlite3") == off


@pytest.mark.django_db
def test_a_query_run_five_times_on_a_connection_is_prepared_on_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's (CI runs this there)")
    Team.objects.create(slug="prep", name="Prep", namespace="prep")
    table = Team._meta.db_table

    def prepared() -> list[str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s", [f"%{table}%"])
            return [row[0] for row in cursor.fetchall()]

    before = prepared()
    for _ in range(6):
        assert Team.objects.filter(slug="prep").values_list("name", flat=True).get() == "Prep"
    after = prepared()
    assert len(after) > len(before)
    assert any(f'"{table}"."slug" = $1' in statement for statement in after), after
