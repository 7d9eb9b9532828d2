"""One migrated test database a run, copied for each pytest-xdist process (PostgreSQL only).

Each test process has a test database of its own (``test_<name>_gw0``, ``_gw1``, ...). Migrating one from empty runs
every migration of every app: tens of seconds of CPU, paid once per process, all at the start of the run where the
processes compete for the same two cores. Instead the first process to get there migrates one template database
(``test_<name>_template``) and each process, itself included, makes its own as a copy of it (``CREATE DATABASE ...
TEMPLATE``, a file copy: about a second). The copy holds what the migration left (tables, the migrations' own rows,
content types, permissions, the cache table); the test database is then used and dropped as before. The run's
controller drops the template at the end (tests/conftest.py, pytest_unconfigure).

Outside PostgreSQL, or outside pytest-xdist, Django creates the test database as usual."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from .openapi import SHARED_DIR

#: The file in the run's shared folder that names the template database once it is migrated.
TEMPLATE_NAME_FILE = "db-template"


def _template_name(test_name: str) -> str:
    return f"{test_name.rsplit('_gw', 1)[0]}_template"


def use_template_databases() -> None:
    """Make Django's PostgreSQL test database creation copy the run's template (migrating it first if no process
    has yet). Called in a pytest-xdist worker before pytest-django creates the test database."""
    shared = os.environ.get(SHARED_DIR)
    if not shared or not Path(shared).is_dir():
        return
    from django.db.backends.postgresql.creation import DatabaseCreation

    create = DatabaseCreation.create_test_db
    if getattr(create, "copies_template", False):
        return

    def create_test_db(self, verbosity=1, autoclobber=False, serialize=True, keepdb=False):
        if keepdb or self.connection.alias != "default":
            return create(self, verbosity, autoclobber, serialize, keepdb)
        from django.conf import settings
        from django.core.management import call_command

        test_name = self._get_test_db_name()
        template = _template_name(test_name)
        test_settings = self.connection.settings_dict["TEST"]
        original_name = self.connection.settings_dict["NAME"]
        with open(Path(shared) / "db-template.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process migrates the template; the others wait, then copy it
            marker = Path(shared) / TEMPLATE_NAME_FILE
            if not marker.exists():
                test_settings["NAME"] = template
                try:
                    create(self, verbosity, True, False, False)
                finally:
                    test_settings["NAME"] = test_name
                self.connection.close()
                self.connection.settings_dict["NAME"] = original_name
                settings.DATABASES[self.connection.alias]["NAME"] = original_name
                marker.write_text(template)
            if verbosity >= 1:
                self.log(f"Copying test database {template} to {test_name}...")
            quoted = self.connection.ops.quote_name
            with self._nodb_cursor() as cursor:
                cursor.execute(f"DROP DATABASE IF EXISTS {quoted(test_name)}")
                cursor.execute(f"CREATE DATABASE {quoted(test_name)} WITH TEMPLATE {quoted(template)}")
        self.connection.close()
        settings.DATABASES[self.connection.alias]["NAME"] = test_name
        self.connection.settings_dict["NAME"] = test_name
        if serialize:
            self.connection._test_serialized_contents = self.serialize_db_to_string()
        call_command("createcachetable", database=self.connection.alias)
        self.connection.ensure_connection()
        return test_name

    create_test_db.copies_template = True
    DatabaseCreation.create_test_db = create_test_db


def drop_template_database(config) -> None:
    """In the run's controller, at the end: drop the template its processes copied, if one was made."""
    shared = os.environ.get(SHARED_DIR)
    marker = Path(shared) / TEMPLATE_NAME_FILE if shared else None
    if marker is None or not marker.exists():
        return
    from django.db import connection
    from pytest_django.plugin import blocking_manager_key

    with config.stash[blocking_manager_key].unblock(), connection.creation._nodb_cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(marker.read_text())}")
