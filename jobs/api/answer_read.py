"""One job as its API answer reads it, in one fixed SQL statement: the detail (GET /api/v1/jobs/{id}/) and the
long-poll (GET /api/v1/jobs/{id}/wait/), half and a quarter of a pipeline's requests (issue 30, item 5).

Why a statement of its own: through the ORM (``answered(visible_jobs(user)).get(pk=...)``), compiling the query,
73 columns over five tables and the membership join of the see rule, was about half a detail request's CPU
(``bench/api_cpu.py --profile detail``); running it and making the rows into instances were a tenth of that. The
statement here is the same read, built once per process from the models' ``_meta`` (tables, columns) and from what
the answer shows (``jobs.api.serializers.JOB_NOT_SHOWN`` and ``JOB_ANSWER_JOINS``, the lists the ORM read uses
too), so a column added to a model is read here without a change. Its row becomes model instances with
``Model.from_db``, as the ORM makes them (the columns the answer does not show are deferred, as ``.only()`` leaves
them), the joined rows are set through the foreign keys (``job.team = team``), and a field's own conversion
(``from_db_value``, the JSON columns') is applied. SQLite hands back datetimes without their zone; they get UTC,
the zone the ORM stores them in (as ``APIToken.find`` does).

Who may see the job stays the rule of ``jobs.access`` (``can_see_job_given``, on ``accounts.roles``): the
statement reads the requesting user's membership role in the job's team beside the job (a LEFT JOIN on the one
membership a user can hold in a team, no filter), and the rule decides on it; a job the user may not see is
answered as a missing one. Everything else, the list, the actions and a detail with a query string (the list's
filters apply to it), goes through the ORM as before.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.db import connection, connections, router
from django.db.models import Field, Model

from accounts.models import Membership
from jobs import access
from jobs.api.serializers import JOB_ANSWER_JOINS, JOB_NOT_SHOWN
from jobs.models import Job, JobEvent


@dataclass(frozen=True)
class _Part:
    """One model's columns in the statement's row: ``start``…``start + len(names)``, in its ``concrete_fields``
    order (``Model.from_db`` takes them so); ``relation``: the job's foreign key it is reached by (None: the job)."""

    model: type[Model]
    relation: str | None
    names: list[str]
    start: int


@dataclass(frozen=True)
class _Read:
    sql: str
    parts: list[_Part]
    #: (index in the row, field) for the fields that convert what the database gives (``from_db_value``).
    converted: list[tuple[int, Field]]
    #: Where the membership role and the newest event's id (when read) are in the row.
    role_at: int
    newest_at: int | None


@functools.cache
def _read(newest_event: bool) -> _Read:
    """The statement, its parameters the requesting user's id and the job's id; with ``newest_event``, also the id
    of the job's newest timeline event (what the long-poll compares ``after_event`` with)."""
    quote = connection.ops.quote_name
    joined: dict[str, set[str]] = {}
    for path in JOB_ANSWER_JOINS:
        relation, name = path.split("__")
        joined.setdefault(relation, set()).add(name)
    columns: list[str] = []
    parts: list[_Part] = []
    fields: list[Field] = []
    joins: list[str] = []

    def add(model, relation, alias, chosen):
        parts.append(_Part(model, relation, [f.attname for f in chosen], len(columns)))
        columns.extend(f"{alias}.{quote(f.column)}" for f in chosen)
        fields.extend(chosen)

    add(Job, None, "j", [f for f in Job._meta.concrete_fields if f.name not in JOB_NOT_SHOWN])
    for number, (relation, names) in enumerate(sorted(joined.items())):
        key = Job._meta.get_field(relation)
        model, alias = key.related_model, f"r{number}"
        add(model, relation, alias, [f for f in model._meta.concrete_fields if f.primary_key or f.name in names])
        joins.append(
            f"LEFT JOIN {quote(model._meta.db_table)} {alias} "
            f"ON {alias}.{quote(model._meta.pk.column)} = j.{quote(key.column)}"
        )
    member = Membership._meta
    role_at = len(columns)
    columns.append(f"m.{quote(member.get_field('role').column)}")
    joins.append(
        f"LEFT JOIN {quote(member.db_table)} m ON m.{quote(member.get_field('team').column)} = "
        f"j.{quote(Job._meta.get_field('team').column)} AND m.{quote(member.get_field('user').column)} = %s"
    )
    newest_at = None
    if newest_event:
        event, newest_at = JobEvent._meta, len(columns)
        columns.append(
            f"(SELECT e.{quote(event.pk.column)} FROM {quote(event.db_table)} e "  # noqa: S608 - the models' names
            f"WHERE e.{quote(event.get_field('job').column)} = j.{quote(Job._meta.pk.column)} "
            f"ORDER BY e.{quote(event.pk.column)} DESC LIMIT 1)"
        )
    # The identifiers are the models' own; the two values, the user's id and the job's, are parameters.
    sql = (
        f"SELECT {', '.join(columns)} FROM {quote(Job._meta.db_table)} j {' '.join(joins)} "  # noqa: S608
        f"WHERE j.{quote(Job._meta.pk.column)} = %s"
    )
    converted = [(index, field) for index, field in enumerate(fields) if hasattr(field, "from_db_value")]
    return _Read(sql, parts, converted, role_at, newest_at)


def visible_job(user, job_id: int, *, newest_event: bool = False) -> Job | None:
    """Job ``job_id`` as the answer reads it (the team, owner, class and cluster joined; with ``newest_event``, the
    id of its newest timeline event as ``job.newest_event``, None without one), or None when there is no such job
    or ``user`` may not see it."""
    read = _read(newest_event)
    database = router.db_for_read(Job)
    with connections[database].cursor() as cursor:
        cursor.execute(read.sql, [user.pk, job_id])
        row = cursor.fetchone()
    if row is None or not access.can_see_job_given(user, row[read.role_at]):
        return None
    values = list(row)
    for index, field in read.converted:
        values[index] = field.from_db_value(values[index], None, connections[database])
    if settings.USE_TZ:
        values = [
            value.replace(tzinfo=UTC) if isinstance(value, datetime) and value.tzinfo is None else value
            for value in values
        ]
    own, *related = read.parts
    job = Job.from_db(database, own.names, values[own.start : own.start + len(own.names)])
    for part in related:
        chunk = values[part.start : part.start + len(part.names)]
        if chunk[part.names.index(part.model._meta.pk.attname)] is not None:  # an empty key (no cluster yet)
            setattr(job, part.relation, part.model.from_db(database, part.names, chunk))
    if read.newest_at is not None:
        job.newest_event = values[read.newest_at]
    return job
