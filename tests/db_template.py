"""One migrated test database a run, copied for each pytest-xdist process (PostgreSQL only).

Each test process has a test database of its own (``test_<name>_gw0``, ``_gw1``, ...). Migrating one from empty runs
every migration of every app: tens of seconds of CPU, paid once per process, all at the start of the run where the
processes compete for the same two cores. Instead the first process to get there migrates one template database
(``test_<name>_template``, by ``manage.py migrate`` in a process of its own) and each process, itself included, makes
its own test database as a copy of it (``CREATE DATABASE ... TEMPLATE``, a file copy: about a second).

It goes through pytest-django's documented fixtures and plain SQL only (tests/conftest.py): the copy is made in
``django_db_modify_db_settings`` once the process's database name is known; ``django_db_keepdb`` then tells Django's
test set-up to use that database as it finds it (its ``migrate`` finds nothing to do) and not to drop it, so
``django_db_setup`` drops it at the end, and the run's controller drops the template (``drop_template``).

Outside PostgreSQL, or outside pytest-xdist, Django creates and drops the test database as usual."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

from .openapi import SHARED_DIR

REPO = Path(__file__).resolve().parent.parent
#: The file in the run's shared folder that names the template database once it is migrated.
TEMPLATE_NAME_FILE = "db-template"


def _admin_sql(*statements: str) -> None:
    """Run ``statements`` on the server's ``postgres`` database, outside any transaction (CREATE/DROP DATABASE)."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    params = {"host": db.get("HOST") or None, "port": db.get("PORT") or None, "user": db.get("USER") or None}
    params |= {"password": db.get("PASSWORD") or None}
    with psycopg.connect(dbname="postgres", autocommit=True, **{k: v for k, v in params.items() if v}) as conn:
        for statement in statements:
            conn.execute(statement)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def copy_template_for_this_process() -> str | None:
    """In a pytest-xdist process on PostgreSQL: make this process's test database (its ``TEST`` ``NAME``, which
    pytest-django has just suffixed) as a copy of the run's template, migrating the template first if no process
    has yet. Returns the database's name, or None where the run has no shared folder."""
    from django.conf import settings

    shared = os.environ.get(SHARED_DIR)
    if not shared or not Path(shared).is_dir():
        return None
    db = settings.DATABASES["default"]
    test_name = db["TEST"].get("NAME") or f"test_{db['NAME']}"
    template = f"{test_name.rsplit('_gw', 1)[0]}_template"
    with open(Path(shared) / "db-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one process migrates the template; the others wait, then copy it
        marker = Path(shared) / TEMPLATE_NAME_FILE
        if not marker.exists():
            drop_database(template)
            _admin_sql(f"CREATE DATABASE {_quoted(template)}")
            environ = os.environ | {"DATABASE_URL": _url(db, template)}
            subprocess.run(
                [sys.executable, "manage.py", "migrate", "--no-input", "-v", "0"], cwd=REPO, env=environ, check=True
            )
            marker.write_text(template)
        _admin_sql(
            f"DROP DATABASE IF EXISTS {_quoted(test_name)} WITH (FORCE)",
            f"CREATE DATABASE {_quoted(test_name)} WITH TEMPLATE {_quoted(template)}",
        )
    return test_name


def _url(db: dict, name: str) -> str:
    user = db.get("USER") or ""
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    where = f"{user}{password}@" if user else ""
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"postgres://{where}{db.get('HOST') or 'localhost'}{port}/{name}"


def drop_database(name: str) -> None:
    """Drop a test database this run made (a process's copy at its end, or the template in the controller)."""
    _admin_sql(f"DROP DATABASE IF EXISTS {_quoted(name)} WITH (FORCE)")


def drop_template() -> None:
    """In the run's controller, at the end: drop the template its processes copied, if one was made."""
    shared = os.environ.get(SHARED_DIR)
    marker = Path(shared) / TEMPLATE_NAME_FILE if shared else None
    if marker is not None and marker.exists():
        drop_database(marker.read_text())
