"""Rows made once for all the tests of a module, for modules whose many tests each read the same seeded database
(the demo inventory, the people) and change it only inside their own test: seeding it for each test cost more than
the tests themselves.

``seeded_once`` opens a transaction around the module's tests and rolls it back when they are done; each test's own
transaction (pytest-django's ``db``) is a savepoint inside it, rolled back after the test as before, so every test
still starts from the seeded rows and none sees another's changes. Between the tests database access is blocked again,
as pytest-django blocks it anywhere else, so a test without ``db`` cannot reach the seeded rows. Only for tests on
``db`` (or on no database): a transactional test (``transactional_db``, ``live_server``) would flush the module's
rows."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

MD5 = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@contextmanager
def seeded_once(django_db_blocker, seed: Callable[[], Any]) -> Iterator[Any]:
    """Run ``seed`` in a transaction that stays open (yielding what it returns) and is rolled back on exit."""
    from django.db import transaction
    from django.test.utils import override_settings

    with django_db_blocker.unblock(), transaction.atomic():
        with override_settings(PASSWORD_HASHERS=MD5):  # as tests/conftest.py's _fast_password_hashing
            made = seed()
        try:
            with django_db_blocker.block():  # between the tests as anywhere: only a test's own ``db`` reaches it
                yield made
        finally:
            transaction.set_rollback(True)
