"""Querysets of a fixed shape compiled to SQL once per process, run with new values on every call.

Django compiles a queryset to SQL on every evaluation: for a row with its ``select_related`` rows (a job with its
team, owner and class; a token with its user) that is about a millisecond of CPU, more than the database takes to
answer. The hottest reads of the API (the token behind a bearer header, one job by id) always have the same
shape and differ only in their values, so ``CompiledQuery`` builds the queryset once with marker values, keeps
Django's SQL, its parameters and its row-to-object plan, and on each call only swaps the markers for the real
values and turns the rows into model instances the way Django's ModelIterable does (related rows included).

The rule for a builder: the *shape* of the query must not depend on the arguments (no ``__in`` over a list of
varying length, no branch on a value), only the values it compares with; and no ``prefetch_related``. Every
marker must reach the SQL as a parameter (checked when compiling). The SQL runs through Django's cursor, so query
counting, execute wrappers and transactions see it like any other query.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import UTC, datetime

from django.db import connections
from django.db.models import QuerySet
from django.db.models.query import get_related_populators

#: Distinct values no real query compares with, one per argument kind; the n-th argument gets the n-th.
_TEXT_MARKER = "\x1fcompiled-query-marker-{}\x1f"
_INT_MARKER = -7_300_000_001
_TIME_MARKER = datetime(1901, 2, 3, 4, 5, 6, tzinfo=UTC)


def _marker(kind: type, n: int):
    if kind is str:
        return _TEXT_MARKER.format(n)
    if kind is int:
        return _INT_MARKER - n
    if kind is datetime:
        return _TIME_MARKER.replace(microsecond=n + 1)
    raise TypeError(f"CompiledQuery arguments are str, int or datetime, not {kind.__name__}")


class _Plan:
    """What Django worked out once: the SQL, where each argument goes, and how a row becomes objects."""

    def __init__(self, queryset: QuerySet, markers: list):
        if queryset._prefetch_related_lookups:
            raise ValueError("CompiledQuery does not run prefetch_related")
        self.db = queryset.db
        compiler = queryset.query.get_compiler(using=self.db)
        self.sql, params = compiler.as_sql()
        self.params = list(params)
        ops = connections[self.db].ops
        # (position in params, argument index, adapt): a datetime reaches some backends' SQL as text (SQLite).
        self.slots: list[tuple[int, int, bool]] = []
        for position, value in enumerate(self.params):
            for index, marker in enumerate(markers):
                if type(value) is type(marker) and value == marker:
                    self.slots.append((position, index, False))
                elif isinstance(marker, datetime) and value == ops.adapt_datetimefield_value(marker):
                    self.slots.append((position, index, True))
        self.ops = ops
        missing = set(range(len(markers))) - {index for _, index, _ in self.slots}
        if missing:
            raise ValueError(f"CompiledQuery: arguments {sorted(missing)} do not reach the SQL as parameters")
        select, klass_info = compiler.select, compiler.klass_info
        self.model = klass_info["model"]
        fields = klass_info["select_fields"]
        self.start, self.end = fields[0], fields[-1] + 1
        self.init_list = [f[0].target.attname for f in select[self.start : self.end]]
        self.populators = get_related_populators(klass_info, select, self.db)
        self.annotations = dict(compiler.annotation_col_map or {})
        # {column: ([converter], expression)}, run on each row with the calling thread's connection.
        self.converters = list(compiler.get_converters([s[0] for s in select[: compiler.col_count]]).items())


def _converted(row, converters, connection) -> list:
    """The row with Django's converters applied (SQLCompiler.apply_converters, for one row)."""
    row = list(row)
    for position, (functions, expression) in converters:
        value = row[position]
        for function in functions:
            value = function(value, expression, connection)
        row[position] = value
    return row


class CompiledQuery:
    """``CompiledQuery(build, str, datetime)``: ``build(*args)`` returns the queryset; calling the object with
    the arguments returns its rows as model instances (a list), compiled on the first call of the process."""

    def __init__(self, build: Callable[..., QuerySet], *kinds: type):
        self.build = build
        self.markers = [_marker(kind, n) for n, kind in enumerate(kinds)]
        self._plan: _Plan | None = None
        self._lock = threading.Lock()

    def plan(self) -> _Plan:
        if self._plan is None:
            with self._lock:
                if self._plan is None:
                    self._plan = _Plan(self.build(*self.markers), self.markers)
        return self._plan

    def __call__(self, *args) -> list:
        plan = self.plan()
        params = list(plan.params)
        for position, index, adapt in plan.slots:
            params[position] = plan.ops.adapt_datetimefield_value(args[index]) if adapt else args[index]
        connection = connections[plan.db]
        with connection.cursor() as cursor:
            cursor.execute(plan.sql, params)
            rows = cursor.fetchall()
        if plan.converters:
            rows = [_converted(row, plan.converters, connection) for row in rows]
        found = []
        for row in rows:
            obj = plan.model.from_db(plan.db, plan.init_list, row[plan.start : plan.end])
            for populator in plan.populators:
                populator.populate(row, obj)
            for name, column in plan.annotations.items():
                setattr(obj, name, row[column])
            found.append(obj)
        return found
