"""The bulk form of jobs.lifecycle: the transitions the job cycle writes for many jobs at once, in a number of
round trips that does not grow with the number of jobs. Callers import them from here (the job cycle's
admission and reconcile); jobs.lifecycle keeps the transitions of one job.

- ``write_admissions`` (queued → admitted) and ``write_waits`` (why a queued job waits) are written from plain
  rows, set-based: on PostgreSQL the rows travel as one JSON document (``jsonb_to_recordset``), elsewhere one
  ``executemany``. They need no per-row condition because queued jobs change state only under the admission lock
  (``lifecycle.admission_lock``), held by their caller (jobs.cycle.admit); ``write_waits`` writes the wait fields
  only, so a concurrent cancel's state change is never overwritten.
- ``start_many`` (admitted → running) runs outside that lock, so each chunk is one conditional ``UPDATE … WHERE
  state = 'admitted' RETURNING id``: a job cancelled after it was read stays cancelled. It starts full models and
  ``StartingJob`` rows alike (a plain row class: a mass start of 20,000 jobs builds no models).
- ``insert_events`` stores their timeline lines in one INSERT.

``cluster_instant`` is where a start or an end the cluster reported is kept within what the portal knows; every
start and end, one job's (jobs.lifecycle) or many's, goes through it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from django.db import connection, transaction
from django.urls import reverse

from jobs import kinds, webhook_events
from jobs.choices import EventKind, JobState
from jobs.models import Job, JobEvent

#: What an admitted job shows while its workload is created.
ADMITTED_MESSAGE = "Admitted; waiting for its pod to start."


#: A timeline line of this cycle: (job id, kind, message, data); stamped with the cycle's time unless the caller
#: gives ``insert_events`` the instant of each line.
EventRow = tuple[int, str, str, dict]


@dataclass(slots=True)
class StartingJob:
    """An admitted one-pod job as ``start_many`` reads and writes it and its ``job.running`` webhook event tells
    it: a plain row (jobs.cycle.follow.quick_start fills it from the reconcile's ``values_list`` row), not a model,
    so a mass start of 20,000 jobs builds none."""

    id: int
    state: str
    state_changed_at: datetime | None
    workload_name: str
    node_names: list
    kind: str
    name: str
    team_id: int
    owner_id: int
    node_name: str
    pod_name: str
    workload_created_at: datetime | None = None
    started_at: datetime | None = None
    wait_reason: str = ""
    wait_message: str = ""
    queue_position: int | None = None

    @property
    def pk(self) -> int:
        return self.id

    def get_absolute_url(self) -> str:
        return reverse("jobs:job-detail", args=[self.id])


def _column(model, name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


@dataclass(frozen=True, slots=True)
class ServedBy:
    """An admitted job that an alternative of its class serves (jobs.scheduling.decide rule 6): the class it asked
    for and the one it got (its position in the prioritized list: 2 for the second choice; 0 when unknown)."""

    asked_id: int
    asked: str
    got_id: int
    got: str
    position: int

    @property
    def sentence(self) -> str:
        """What its owner reads: which class it runs on, and whose quota it counts against."""
        choice = f", the {ordinal(self.position)} choice" if self.position else ""
        return (
            f"It runs on {self.got}{choice}: {self.asked} could not take it now (room or quota), so "
            f"{self.got}'s quota and devices are charged."
        )

    @property
    def data(self) -> dict:
        return {
            "requested_class": self.asked_id,
            "requested": self.asked,
            "served_by": self.got_id,
            "choice": self.position,
        }


def served_words(data: dict, got: str) -> str:
    """The job page's line for an attempt an alternative serves (``data``: its admission's timeline data, ``got``:
    the class it runs on); "" for one its own class serves."""
    if not data.get("served_by") or not data.get("requested"):
        return ""
    choice = f", the {ordinal(data['choice'])} choice" if data.get("choice") else ""
    return f"Runs on {got}{choice}: {data['requested']} could not take it then; {got}'s quota is charged."


def ordinal(position: int) -> str:
    """ "second", "third"… for a choice's position in a prioritized list (1-based)."""
    words = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
    return words[position - 1] if 0 < position <= len(words) else f"#{position}"


def write_admissions(
    placements: list[tuple], now: datetime, served: dict[int, ServedBy] | None = None
) -> list[EventRow]:
    """Queued → admitted for every (row, nodes, borrowed, cluster id, cluster shown), in one write: ``nodes`` is
    the node of each rank, rank 0 first, all in one cluster; a gang (more than one) stores them all in
    ``node_names`` and rank 0's in ``node_name``, a one-pod job its node with ``node_names`` left empty. ``cluster
    shown``: the cluster's name for the timeline ("" for the cluster configured in settings). ``row``: anything with
    the job's ``id``, ``attempts`` and what its kind reads (admission's plain rows). Returns the timeline lines,
    for the caller to store with the cycle's other lines in one ``insert_events``."""
    events, values = [], []
    served = served or {}
    for job, nodes, borrowed, cluster_id, cluster_shown in placements:
        node = nodes[0]
        gang = len(nodes) > 1
        note = " on borrowed capacity (preemptible)" if borrowed else ""
        noun = kinds.for_job(job).pod_noun
        where = f"Admitted: {len(nodes)} {noun}s on {', '.join(nodes)}" if gang else f"Admitted and placed on {node}"
        if cluster_shown:
            where += f" in cluster {cluster_shown}"
        data = {"node": node, "borrowed": borrowed} | ({"nodes": list(nodes)} if gang else {})
        data |= {"cluster": cluster_shown} if cluster_shown else {}
        alternative = served.get(job.id)
        sentence = f"{where}{note}." + (f" {alternative.sentence}" if alternative else "")
        events.append((job.id, EventKind.ADMITTED.value, sentence, data | (alternative.data if alternative else {})))
        row = (job.id, node, list(nodes) if gang else [], borrowed, job.attempts + 1, cluster_id)
        # A job an alternative serves becomes a job of that class: its quota, usage and claim are that class's.
        values.append((*row, alternative.got_id if alternative else job.resource_class_id) if served else row)
    if not values:
        return events
    fixed = {"state": JobState.ADMITTED.value, "state_changed_at": now, "admitted_at": now, "wait_reason": "",
             "wait_message": ADMITTED_MESSAGE, "wait_detail": {}, "queue_position": None}  # fmt: skip
    per_row = {
        "node_name": "text", "node_names": "jsonb", "borrowed": "boolean", "attempts": "integer", "cluster": "bigint",
    }  # fmt: skip
    if served:
        per_row["resource_class"] = "bigint"
    _update_by_id(fixed, per_row, values)
    return events


def write_waits(waits: list[tuple]) -> list[EventRow]:
    """Queued jobs that wait: store why (reason, sentence, detail, queue position) when what users see of it
    changed, in one write of the wait fields only (a concurrent cancel's state change is never overwritten);
    a timeline line when the reason changed. ``waits``: (row, wait)
    pairs, ``wait`` a jobs.scheduling.snapshot.Wait."""
    events, values = [], []
    for job, wait in waits:
        if (job.wait_reason, job.wait_message, job.queue_position) == (wait.reason, wait.message, wait.position):
            continue
        if job.wait_reason != wait.reason:
            events.append((job.id, EventKind.WAITING.value, wait.message, {"reason": wait.reason, **wait.detail}))
        values.append((job.id, wait.reason, wait.message, wait.detail, wait.position))
    if not values:
        return events
    per_row = {"wait_reason": "text", "wait_message": "text", "wait_detail": "jsonb", "queue_position": "integer"}
    _update_by_id({}, per_row, values)
    return events


def insert_events(events: list[EventRow], now: datetime, times: list[datetime] | None = None) -> None:
    """Store the cycle's timeline lines in one INSERT, in order, all at ``now`` or each at its instant in
    ``times`` (one per line, in the same order)."""
    if not events:
        return
    col = lambda name: _column(JobEvent, name)  # noqa: E731
    columns = ", ".join(col(name) for name in ("job", "at", "kind", "message", "data"))
    times = times if times is not None else [now] * len(events)
    if connection.vendor == "postgresql":
        sql = (
            f"INSERT INTO {_table(JobEvent)} ({columns}) SELECT v.job_id, v.at, v.kind, v.message, v.data "  # noqa: S608
            "FROM ROWS FROM (jsonb_to_recordset(%s::jsonb) AS "
            "(job_id bigint, at timestamptz, kind text, message text, data jsonb)) "
            "WITH ORDINALITY AS v(job_id, at, kind, message, data, n) ORDER BY v.n"
        )
        document = json.dumps([{"job_id": j, "at": at.isoformat(), "kind": k, "message": m, "data": d}
                               for (j, k, m, d), at in zip(events, times, strict=True)])  # fmt: skip
        with connection.cursor() as cursor:
            cursor.execute(sql, [document])
        return
    data, at_field = JobEvent._meta.get_field("data"), JobEvent._meta.get_field("at")
    prepared: dict = {}  # lines of one cycle share a handful of instants
    for at in times:
        if at not in prepared:
            prepared[at] = at_field.get_db_prep_save(at, connection)
    sql = f"INSERT INTO {_table(JobEvent)} ({columns}) VALUES (%s, %s, %s, %s, %s)"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(j, prepared[at], k, m, data.get_db_prep_save(d, connection))
                                 for (j, k, m, d), at in zip(events, times, strict=True)])  # fmt: skip


def _prepared(values: dict) -> list:
    return [Job._meta.get_field(name).get_db_prep_save(value, connection) for name, value in values.items()]


def _update_by_id(fixed: dict, per_row: dict[str, str], rows: list[tuple]) -> None:
    """One round trip: every job of ``rows`` ((id, *its values of ``per_row``'s fields)) gets the ``fixed`` values
    and its own. On PostgreSQL the rows travel as one JSON document (``jsonb_to_recordset``, typed by ``per_row``:
    field → SQL type), elsewhere as one prepared UPDATE by primary key run for every row (``executemany``)."""
    names = list(per_row)
    if connection.vendor == "postgresql":
        col = lambda name: _column(Job, name)  # noqa: E731
        assignments = ", ".join([f"{col(name)} = %s" for name in fixed] + [f"{col(name)} = v.{name}" for name in names])
        record = ", ".join(["id bigint", *(f"{name} {kind}" for name, kind in per_row.items())])
        sql = (
            f"UPDATE {_table(Job)} AS j SET {assignments} FROM jsonb_to_recordset(%s::jsonb) AS v({record}) "  # noqa: S608
            f"WHERE j.{col('id')} = v.id"
        )
        document = json.dumps([dict(zip(["id", *names], row, strict=True)) for row in rows])
        with connection.cursor() as cursor:
            cursor.execute(sql, [*_prepared(fixed), document])
        return
    fields, constant = [Job._meta.get_field(name) for name in names], _prepared(fixed)
    assignments = ", ".join(f"{_column(Job, name)} = %s" for name in [*fixed, *names])
    sql = f"UPDATE {_table(Job)} SET {assignments} WHERE {_column(Job, 'id')} = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(
            sql,
            [[*constant, *(f.get_db_prep_save(v, connection) for f, v in zip(fields, row[1:], strict=True)), row[0]]
             for row in rows],
        )  # fmt: skip


# -- starts ---------------------------------------------------------------------------------------------------


def cluster_instant(reported: datetime | None, *, not_before: datetime | None, now: datetime) -> datetime:
    """The instant the cluster reported for a start or an end, kept within what the portal knows: never before
    ``not_before`` (the workload's creation, the start) nor after ``now`` (the cycle that saw it), so a cluster
    clock a little behind or ahead of the portal's never reorders the timeline; ``now`` when none was reported."""
    if reported is None:
        return now
    if not_before is not None and reported < not_before:
        reported = not_before
    return min(reported, now)


def started_text(job: Job | StartingJob, pod_name: str) -> str:
    if job.node_names:
        noun = kinds.for_job(job).pod_noun
        return f"All {len(job.node_names)} {noun}s running on {', '.join(job.node_names)} (first: pod {pod_name})."
    return f"Started on {job.node_name} (pod {pod_name})."


#: Jobs per statement of a batched transition: a mass start's round trips grow with the number of chunks only.
BATCH_SIZE = 500


@transaction.atomic
def start_many(starts: list[tuple[Job | StartingJob, datetime, str]], now: datetime) -> list[Job | StartingJob]:
    """Admitted → running for many jobs at once (the cycle's mass start), the batched form of ``start``.

    ``starts``: (job, started, pod_name) triples. Per chunk of ``BATCH_SIZE`` jobs, one conditional
    ``UPDATE … WHERE id IN (…) AND state = 'admitted' RETURNING id``: a job cancelled (or started by another
    cycle) after it was read is not among the rows that come back, and is left as it is. The jobs that moved get
    exactly what ``start`` gives one job: the cluster's start instant (``lifecycle.cluster_instant``) on the row,
    on their timeline events (one insert per chunk) and in their ``job.running`` webhooks (one fan-out for all
    after commit), and their kinds' ``on_start`` (one call per kind). Returns the jobs that moved, their instances
    updated."""
    moved: list[Job | StartingJob] = []
    starts = [(job, cluster_instant(started, not_before=job.workload_created_at, now=now), pod_name)
              for job, started, pod_name in starts]  # fmt: skip
    for first in range(0, len(starts), BATCH_SIZE):
        chunk = starts[first : first + BATCH_SIZE]
        won = _start_chunk(chunk, now)
        events, times = [], []
        for job, started, pod_name in chunk:
            if job.pk not in won:
                continue
            job.state, job.state_changed_at, job.started_at = JobState.RUNNING, now, started
            job.wait_reason, job.wait_message, job.queue_position = "", "", None
            job.pod_name = pod_name or job.pod_name
            events.append((job.pk, EventKind.STARTED, started_text(job, pod_name), {"pod": pod_name}))
            times.append(started)
            moved.append(job)
        insert_events(events, now, times)
    webhook_events.jobs(moved, "job.running", at={job.pk: job.started_at for job in moved})
    by_kind: dict[str, list[Job | StartingJob]] = {}
    for job in moved:
        by_kind.setdefault(job.kind, []).append(job)
    for name, started in by_kind.items():  # each kind's bookkeeping (a notebook's limits start counting)
        kinds.get(name).on_start(started)
    return moved


def _start_chunk(chunk: list[tuple[Job | StartingJob, datetime, str]], now: datetime) -> set[int]:
    """One statement: the conditional UPDATE of a chunk of starts; the ids of the rows it moved."""
    if not chunk:
        return set()
    quote = connection.ops.quote_name
    table, pk = quote(Job._meta.db_table), quote(Job._meta.pk.column)
    field = Job._meta.get_field

    def column(name: str) -> str:
        return quote(field(name).column)

    def prep(name: str, value):
        return field(name).get_db_prep_save(value, connection)

    # The per-job values (start time, pod name) come in a VALUES list (on PostgreSQL one JSON document) joined on
    # the id (UPDATE … FROM: each row found by its primary key); everything else is the same for every row. Table
    # and column names come from the model, never from input; values are parameters.
    if connection.vendor == "postgresql":
        document = json.dumps([{"id": job.pk, "started": started.isoformat(), "pod": pod_name or job.pod_name}
                               for job, started, pod_name in chunk])  # fmt: skip
        values, params = (
            "SELECT * FROM jsonb_to_recordset(%s::jsonb) AS r(id bigint, started timestamptz, pod text)",
            [document],
        )
    else:
        values = "VALUES " + ", ".join(["(%s, %s, %s)"] * len(chunk))
        params = []
        started_at, prepared = field("started_at"), {}  # pods started in the same second share their start time
        for job, started, pod_name in chunk:
            if started not in prepared:
                prepared[started] = started_at.get_db_prep_save(started, connection)
            params += [job.pk, prepared[started], pod_name or job.pod_name]
    sql = (
        f"WITH v (id, started, pod) AS ({values}) "  # noqa: S608
        f"UPDATE {table} SET {column('state')} = %s, {column('state_changed_at')} = %s, "
        f"{column('started_at')} = v.started, {column('pod_name')} = v.pod, "
        f"{column('wait_reason')} = %s, {column('wait_message')} = %s, {column('queue_position')} = NULL "
        f"FROM v WHERE {table}.{pk} = v.id AND {table}.{column('state')} = %s RETURNING {table}.{pk}"
    )
    params += [JobState.RUNNING, prep("state_changed_at", now), "", "", JobState.ADMITTED]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return {row[0] for row in cursor.fetchall()}
