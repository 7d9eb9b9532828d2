"""A database the previous release created and filled migrates forward on PostgreSQL with every row intact.

tests/fixtures/previous_release/dump.sql.gz is a pg_dump of a database that the previous release's migrations
created and its ``seed_demo`` (plus some telemetry) filled; make_dump.sh next to it says how it was made and
regenerates it for the next release. The test loads it into a fresh PostgreSQL database of its own, runs the
current code's ``manage.py migrate`` on it in a subprocess, and compares every table, row and column before and
after. A restructuring that renames a table or drops a column on purpose says so in the mappings below.

It needs a PostgreSQL server and ``psql``: the default database's server when that is PostgreSQL, else one on
127.0.0.1:5432 as user postgres (``$PGHOST``, ``$PGPORT``, ``$PGUSER``, ``$PGPASSWORD`` override that). Without
them it skips, except in CI (CI=true), where it fails.
"""

import gzip
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from django.conf import settings

from tests.conftest import IN_CI

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DUMP = REPO / "tests" / "fixtures" / "previous_release" / "dump.sql.gz"

#: Tables the current code renames on purpose: name in the dump → name after migrating.
RENAMED_TABLES: dict[str, str] = {}
#: Columns the current code drops on purpose: table (name after migrating) → columns no longer there.
DROPPED_COLUMNS: dict[str, set[str]] = {
    # Issue 18: read_only became scope (read_only=True -> "read", else "manage"; accounts migration 0008).
    "portal_apitoken": {"read_only"},
}
#: Tables that ``migrate`` itself adds rows to (applied migrations, content types and permissions of new models):
#: every row of the dump must still be there unchanged, new rows may join them.
GROWING_TABLES = {"django_migrations", "django_content_type", "auth_permission"}
#: Models the current code moves to another app on purpose and whose content type a migration relabels:
#: (app_label, model) in the dump → (app_label, model) after migrating. The row keeps its id.
RELABELLED_CONTENT_TYPES: dict[tuple[str, str], tuple[str, str]] = {
    # Issue 30: the audit log and notifications moved from accounts (label portal) to core (core.0001).
    ("portal", "auditevent"): ("core", "auditevent"),
    ("portal", "notification"): ("core", "notification"),
}


def _unavailable(reason: str):
    if IN_CI:
        pytest.fail(f"CI=true but {reason}")
    pytest.skip(reason)


def _server() -> dict:
    """Connection parameters of the PostgreSQL server to use (no database name)."""
    db = settings.DATABASES["default"]
    if "postgresql" in db["ENGINE"]:
        return {
            "host": db.get("HOST") or "127.0.0.1",
            "port": int(db.get("PORT") or 5432),
            "user": db.get("USER") or "postgres",
            "password": db.get("PASSWORD") or "",
        }
    return {
        "host": os.environ.get("PGHOST", "127.0.0.1"),
        "port": int(os.environ.get("PGPORT", 5432)),
        "user": os.environ.get("PGUSER", "postgres"),
        "password": os.environ.get("PGPASSWORD", ""),
    }


def _url(server: dict, name: str) -> str:
    password = f":{server['password']}" if server["password"] else ""
    return f"postgres://{server['user']}{password}@{server['host']}:{server['port']}/{name}"


def _connect(server: dict, dbname: str):
    import psycopg

    return psycopg.connect(
        host=server["host"],
        port=server["port"],
        user=server["user"],
        password=server["password"] or None,
        dbname=dbname,
        connect_timeout=5,
        autocommit=True,
    )


@pytest.fixture
def previous_release_db():
    """A fresh database loaded with the previous release's dump; yields (server, name, URL); dropped after."""
    psql = shutil.which("psql")
    if psql is None:
        _unavailable("psql is not installed (apt-get install postgresql-client)")
    try:
        import psycopg
    except ImportError:
        _unavailable("psycopg is not installed")
    server = _server()
    try:
        admin = _connect(server, "postgres")
    except psycopg.OperationalError as error:
        _unavailable(f"no PostgreSQL server reachable at {server['host']}:{server['port']} ({error})")
    name = f"migrate_forward_{uuid.uuid4().hex[:10]}"
    url = _url(server, name)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            load = subprocess.run(
                [psql, "--no-psqlrc", "--quiet", "-v", "ON_ERROR_STOP=1", "--dbname", url],
                input=gzip.decompress(DUMP.read_bytes()), capture_output=True, timeout=300,
            )  # fmt: skip
            assert load.returncode == 0, f"loading {DUMP.name} failed:\n{load.stderr.decode()[-4000:]}"
            yield server, name, url
        finally:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _snapshot(server: dict, name: str) -> dict[str, dict]:
    """Every table of the public schema: {"columns": [...], "key": [...], "rows": [tuple, ...] by primary key}."""
    out = {}
    with _connect(server, name) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_type = 'BASE TABLE' ORDER BY table_name"
            )
        ]
        for table in tables:
            columns = [
                c
                for (c,) in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_schema = 'public' AND table_name = %s ORDER BY ordinal_position",
                    [table],
                )
            ]
            key = [
                c
                for (c,) in conn.execute(
                    "SELECT a.attname FROM pg_index i "
                    "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                    "WHERE i.indrelid = %s::regclass AND i.indisprimary ORDER BY a.attnum",
                    [f'public."{table}"'],
                )
            ]
            order = ", ".join(f'"{c}"' for c in (key or columns))
            select = ", ".join(f'"{c}"' for c in columns)
            rows = conn.execute(f'SELECT {select} FROM public."{table}" ORDER BY {order}').fetchall()
            out[table] = {"columns": columns, "key": key, "rows": rows}
    return out


def _manage(url: str, data_dir: Path, *args: str, code: str | None = None) -> subprocess.CompletedProcess:
    env = {
        **{k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"},
        "DATABASE_URL": url,
        "PORTAL_DATA_DIR": str(data_dir),
        "CELERY_BROKER_URL": settings.CELERY_BROKER_URL,
        "DJANGO_SETTINGS_MODULE": "portal.settings",
    }
    command = [sys.executable, "-c", code] if code else [sys.executable, "manage.py", *args]
    return subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


#: Run in a subprocess on the migrated database: every model's count, and every row read through the ORM.
ORM_READ = """
import json
import django
django.setup()
from django.apps import apps
out = {}
for model in apps.get_models(include_auto_created=True):
    meta = model._meta
    if not meta.managed or meta.proxy:
        continue
    count = model._default_manager.count()
    read = sum(1 for _ in model._default_manager.all().iterator())
    out[meta.label] = {"table": meta.db_table, "count": count, "read": read}
print(json.dumps(out))
"""


def _as_dicts(snapshot: dict) -> dict[tuple, dict]:
    """Rows of one table by primary key (the whole row where there is none), each as {column: value}."""
    columns, key = snapshot["columns"], snapshot["key"] or snapshot["columns"]
    rows = {}
    for row in snapshot["rows"]:
        values = dict(zip(columns, row, strict=True))
        rows[tuple(values[c] for c in key)] = values
    return rows


def test_previous_release_migrates_forward_with_every_row_intact(previous_release_db, tmp_path):
    server, name, url = previous_release_db
    before = _snapshot(server, name)
    assert before["gpus_gpusample"]["rows"] and before["jobs_job"]["rows"], "the dump should hold demo data"

    migrate = _manage(url, tmp_path, "migrate", "--noinput")
    assert migrate.returncode == 0, f"migrate failed:\n{migrate.stdout[-3000:]}\n{migrate.stderr[-5000:]}"

    after = _snapshot(server, name)
    for (app_label, model), (new_app, new_model) in RELABELLED_CONTENT_TYPES.items():
        for i, row in enumerate(before["django_content_type"]["rows"]):
            values = dict(zip(before["django_content_type"]["columns"], row, strict=True))
            if (values["app_label"], values["model"]) == (app_label, model):
                values.update(app_label=new_app, model=new_model)
                before["django_content_type"]["rows"][i] = tuple(values.values())

    problems = []
    for old_table, old in before.items():
        table = RENAMED_TABLES.get(old_table, old_table)
        if table not in after:
            problems.append(f"{old_table}: the table is gone after migrating (renamed? add it to RENAMED_TABLES)")
            continue
        new = after[table]
        dropped = DROPPED_COLUMNS.get(table, set())
        missing = [c for c in old["columns"] if c not in new["columns"] and c not in dropped]
        if missing:
            problems.append(f"{table}: columns {missing} are gone (dropped on purpose? add them to DROPPED_COLUMNS)")
        kept = [c for c in old["columns"] if c in new["columns"]]
        old_rows, new_rows = _as_dicts(old), _as_dicts(new)
        if table not in GROWING_TABLES and len(new_rows) != len(old_rows):
            problems.append(f"{table}: {len(old_rows)} rows before migrating, {len(new_rows)} after")
        lost = [k for k in old_rows if k not in new_rows]
        if lost:
            problems.append(f"{table}: {len(lost)} rows are gone, e.g. key {lost[:3]}")
        changed = [
            (k, c, old_rows[k][c], new_rows[k][c])
            for k in old_rows
            if k in new_rows
            for c in kept
            if old_rows[k][c] != new_rows[k][c]
        ]
        if changed:
            shown = "; ".join(f"key {k} {c}: {a!r} -> {b!r}" for k, c, a, b in changed[:5])
            problems.append(f"{table}: {len(changed)} values changed, e.g. {shown}")
    assert not problems, "Migrating the previous release's data lost or changed rows:\n" + "\n".join(problems)

    check = _manage(url, tmp_path, "migrate", "--check", "--noinput")
    assert check.returncode == 0, f"migrations left unapplied:\n{check.stdout}\n{check.stderr[-3000:]}"
    shown = _manage(url, tmp_path, "showmigrations", "--plan")
    assert shown.returncode == 0, shown.stderr[-3000:]
    unapplied = [line for line in shown.stdout.splitlines() if line.lstrip().startswith("[ ]")]
    assert not unapplied, "unapplied migrations:\n" + "\n".join(unapplied)

    system = _manage(url, tmp_path, "check", "--database", "default")
    assert system.returncode == 0, f"manage.py check failed:\n{system.stdout}\n{system.stderr[-3000:]}"

    orm = _manage(url, tmp_path, code=ORM_READ)
    assert orm.returncode == 0, f"reading every model through the ORM failed:\n{orm.stderr[-5000:]}"
    models = json.loads(orm.stdout.strip().splitlines()[-1])
    assert models, "no models found"
    for label, seen in models.items():
        assert seen["table"] in after, f"{label}: its table {seen['table']} does not exist after migrating"
        rows = len(after[seen["table"]]["rows"])
        assert seen["count"] == seen["read"] == rows, f"{label}: ORM counts {seen}, table {rows} rows"
