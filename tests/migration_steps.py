"""Moving the test database along the migration graph, for the tests that migrate forward from an older state:
``migrate_to`` a target and get its historical models; the ``restores_schema`` fixture (tests/conftest.py) brings every
app back to its newest migration afterwards, as the rest of the suite needs."""

from __future__ import annotations

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(target):
    """Migrate to ``target`` ([(app, migration)], or the graph's leaves) and return the apps as they were there."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(target)
    return executor.loader.project_state(target).apps


def migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
