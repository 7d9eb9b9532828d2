"""The admission step of the job cycle: snapshot, decide, write — in a number of queries that does not grow with
the queue, and with as few Python objects per job as the decision needs.

- ``build_snapshot`` reads the queued and active jobs as plain rows (one query, ``values_list``: no model
  instances), the nodes likewise, and the quotas, shares, classes, teams and array caps; what each job asks
  of quota and placement is still its kind's answer (``kinds.for_job(row).demand(row)``).
- ``admit`` takes the admission lock, runs ``jobs.admission.decide`` on the snapshot and writes the decisions.
- ``_apply`` writes them set-based: every admission in one UPDATE, every changed wait in one UPDATE, every
  timeline event in one INSERT (on PostgreSQL the rows travel as one JSON document, ``jsonb_to_recordset``;
  elsewhere one ``executemany``). These are the bulk form of ``lifecycle.admit_batch`` and
  ``lifecycle.explain_waits``: the same fields, values and timeline lines, safe without a per-row condition
  because queued jobs change state only under the admission lock (held here). A waiting job is written only
  when what users see of its wait changed (reason, sentence or queue position), so a cycle that only explains
  waits that did not change writes nothing for them. Preemptions go through ``lifecycle.preempt`` one by one
  (notice, webhook, audit), on model instances read for just those jobs.
"""

from __future__ import annotations

import gc
import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import connection
from django.utils import timezone

from accounts.models import Team
from gpus.models import Node, ResourceClass
from gpus.nodeconfig import reconfiguring_node_names
from vocab.names import CPU_RESOURCE, MEMORY_RESOURCE, NVIDIA_PREFIX
from vocab.quantity import mebibytes, millicores

from . import admission, kinds, lifecycle, service_cycle
from .choices import ACTIVE_STATES, EventKind, JobState
from .models import FairShare, Job, JobArray, JobEvent, Quota
from .usage import month_gpu_hours
from .validation import version_tuple

if TYPE_CHECKING:
    from .cycle import CycleResult

#: The columns of a job admission reads (queued and active jobs alike): rows are named tuples of these.
JOB_COLUMNS = (
    "id", "team_id", "resource_class_id", "count", "cpu_millicores", "memory_mb", "priority", "preemptible",
    "submitted_at", "max_runtime_seconds", "state", "attempts", "kind", "array_id", "architecture", "workers",
    "topology_key", "topology_mode", "image_cuda", "node_name", "node_names", "borrowed", "wait_reason",
    "wait_message", "queue_position",
)  # fmt: skip
NODE_COLUMNS = (
    "name", "product_label", "team_id", "ready", "unschedulable", "blocked_reason", "allocatable",
    "external_requests", "cuda_version", "architecture", "labels",
)  # fmt: skip

#: What an admitted job shows while its workload is created (as lifecycle.admit_batch writes it).
ADMITTED_MESSAGE = "Admitted; waiting for its pod to start."


def _millicores(value) -> int:
    try:
        return millicores(value or 0)
    except ValueError:
        return 0


def _mebibytes(value) -> int:
    try:
        return mebibytes(value or 0)
    except ValueError:
        return 0


class _Memo(dict):
    """Parsed values by their text: thousands of nodes and jobs share a few quantities and versions."""

    def __init__(self, parse) -> None:
        super().__init__()
        self.parse = parse

    def __missing__(self, key):
        value = self[key] = self.parse(key)
        return value


def build_snapshot(now: datetime) -> tuple[admission.Snapshot, dict]:
    """Everything admission needs, in a constant number of queries. Returns the snapshot and the job rows read
    (id → named tuple of ``JOB_COLUMNS``)."""
    classes = {
        rc.id: admission.ClassView(rc.id, rc.resource_name, rc.product_label, rc.gpu_fraction, rc.display_name)
        for rc in ResourceClass.objects.all()
    }
    rows = list(Job.objects.filter(state__in=(JobState.QUEUED, *ACTIVE_STATES)).values_list(*JOB_COLUMNS, named=True))
    queued = [row for row in rows if row.state == JobState.QUEUED]
    active = [row for row in rows if row.state != JobState.QUEUED]
    # What each job asks of quota and placement is its kind's answer, never a guess from its fields.
    demands = {row.id: kinds.for_job(row).demand(row) for row in rows}
    portal_on_node: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in active:
        rc = classes.get(job.resource_class_id)
        demand = demands[job.id]
        # A gang holds one pod's worth on each rank's node; a job without per-rank nodes holds it all on one.
        if rc is not None and job.node_names:
            for name in job.node_names:
                held = portal_on_node[name]
                held[rc.resource_name] += demand.units
                held["cpu_m"] += demand.cpu_m
                held["memory_mb"] += demand.memory_mb
        elif rc is not None and job.node_name:
            held = portal_on_node[job.node_name]
            held[rc.resource_name] += demand.total_units
            held["cpu_m"] += demand.total_cpu_m
            held["memory_mb"] += demand.total_memory_mb
    # Inference services' replicas granted above their minimum hold capacity too (jobs.service_cycle).
    pool = service_cycle.pool_in_use()
    replicas = service_cycle.replica_views(now, classes, pool)
    for name, resource, units, cpu_m, memory_mb in replicas.holds:
        held = portal_on_node[name]
        held[resource] += units
        held["cpu_m"] += cpu_m
        held["memory_mb"] += memory_mb
    versions = _Memo(version_tuple)
    nodes = _node_views(portal_on_node, versions)
    budgeted = set(Quota.objects.filter(monthly_gpu_hours__isnull=False).values_list("team_id", "resource_class_id"))
    used_hours = month_gpu_hours({team for team, _ in budgeted}, now) if budgeted else {}
    quotas = {
        (q.team_id, q.resource_class_id): admission.QuotaView(
            q.guaranteed,
            q.limit,
            float(q.monthly_gpu_hours) if q.monthly_gpu_hours is not None else None,
            used_hours.get((q.team_id, q.resource_class_id), 0.0),
        )
        for q in Quota.objects.all()
    }
    shares = {fs.team_id: fs for fs in FairShare.objects.all()}
    half_life = settings.PORTAL_FAIR_SHARE_HALF_LIFE
    pool_kinds = {name: pool and kind.uses_service_pool for name, kind in kinds.registered().items()}

    def view(job) -> admission.JobView:
        demand = demands[job.id]
        active = job.state != JobState.QUEUED
        # Each pod is a worker on its own node; an active job admitted with several pods and no per-rank nodes
        # on record (before gangs were placed per rank) holds them all on its one node.
        together = active and demand.pods > 1 and not job.node_names
        return admission.JobView(
            id=job.id,
            team=job.team_id,
            class_id=demand.resource_class_id,
            count=demand.total_units if together else demand.units,
            cpu_m=demand.total_cpu_m if together else demand.cpu_m,
            memory_mb=demand.total_memory_mb if together else demand.memory_mb,
            priority=job.priority,
            preemptible=job.preemptible,
            submitted=job.submitted_at.timestamp(),
            max_runtime_s=job.max_runtime_seconds,
            node=job.node_name if active else "",
            borrowed=job.borrowed if active else False,
            preempting=job.state == JobState.PREEMPTING,
            cuda=versions[job.image_cuda] if job.image_cuda else (),
            group=job.array_id,
            architecture=job.architecture,
            workers=1 if together else demand.pods,
            topology_key=job.topology_key,
            topology_mode=job.topology_mode,
            nodes=tuple(job.node_names) if active else (),
            pool=pool_kinds.get(job.kind, False),
        )

    recent = {}
    for team_id, fs in shares.items():
        age = max(0.0, (now - fs.updated).total_seconds())
        recent[team_id] = fs.average_units * 0.5 ** (age / half_life)
    snap = admission.Snapshot(
        now=now.timestamp(),
        nodes=nodes,
        classes=classes,
        quotas=quotas,
        queued=[view(j) for j in queued] + replicas.queued,
        active=[view(j) for j in active] + replicas.active,
        recent_average=recent,
        team_names=dict(Team.objects.values_list("id", "name")),
        patience=settings.PORTAL_BACKFILL_PATIENCE,
        # A job array's parallelism is a cap on its group; admission knows only the number.
        group_caps=dict(
            JobArray.objects.filter(parallelism__isnull=False, tasks__state=JobState.QUEUED)
            .distinct()
            .values_list("id", "parallelism")
        ),
    )
    return snap, {row.id: row for row in rows}


def _node_views(portal_on_node: dict, versions: _Memo) -> dict[str, admission.NodeView]:
    """The present nodes with a product, as admission sees them (one query, plain rows)."""
    nodes = {}
    # A node whose GPUs are being reconfigured (MIG layout, time-slicing) takes no new work until it is done.
    reconfiguring = reconfiguring_node_names()
    topology_keys = settings.PORTAL_TOPOLOGY_KEYS
    cpus, memories = _Memo(_millicores), _Memo(_mebibytes)
    pool_of = service_cycle.on_pool
    empty: dict = {}
    for node in Node.objects.present().exclude(product_label="").values_list(*NODE_COLUMNS, named=True):
        external = node.external_requests or empty
        held = portal_on_node.get(node.name, empty)
        labels = node.labels or empty
        allocatable = {
            r: int(v) for r, v in node.allocatable.items() if r.startswith(NVIDIA_PREFIX) and str(v).isdigit()
        }
        cpu = cpus[node.allocatable.get(CPU_RESOURCE)] - int(external.get("cpu_m", 0))
        memory = memories[node.allocatable.get(MEMORY_RESOURCE)] - int(external.get("memory_mb", 0))
        nodes[node.name] = admission.NodeView(
            name=node.name,
            product_label=node.product_label,
            team=node.team_id,
            # ... nor does one whose GPU stack cannot run it (a driver upgrade, pressure, a switched-off plugin).
            schedulable=node.ready
            and not node.unschedulable
            and node.name not in reconfiguring
            and not node.blocked_reason,
            allocatable=allocatable,
            free={r: n - int(external.get(r, 0)) - held.get(r, 0) for r, n in allocatable.items()},
            cpu_free_m=cpu - held.get("cpu_m", 0),
            memory_free_mb=memory - held.get("memory_mb", 0),
            cpu_capacity_m=cpu,
            memory_capacity_mb=memory,
            cuda=versions[node.cuda_version] if node.cuda_version else (),
            architecture=node.architecture,
            kept_off=node.blocked_reason,
            topology={key: str(labels[key]) for key in topology_keys if key in labels},
            pool=pool_of(node.labels),
        )
    return nodes


@contextmanager
def _collector_paused() -> Iterator[None]:
    """No cyclic garbage collection while a cycle runs: a queue of 10,000 jobs allocates a few hundred thousand
    short-lived objects that form no cycles (rows, views, engine states), and their allocation keeps triggering
    the collector's passes over the whole heap (about a quarter of an explain-only cycle). Reference counting
    still frees them as they go; the collector resumes, and catches up on anything cyclic, when the cycle ends.
    (The reconcile pauses it the same way.)"""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def admit(result: CycleResult, now: datetime | None = None) -> admission.Decisions:
    now = now or timezone.now()
    # The lock serialises cycles with each other and with cancels and notebook stops.
    with _collector_paused(), lifecycle.admission_lock(now):
        snap, rows = build_snapshot(now)
        decisions = admission.decide(snap)
        service_cycle.take_decisions(decisions, now)  # the services' replica views: granted, reclaimed
        _apply(decisions, rows, now, result)
        _update_fair_share(snap, now)
    return decisions


def _apply(decisions: admission.Decisions, rows: dict, now: datetime, result: CycleResult) -> None:
    # Queued jobs change state only under the admission lock (held here): the set-based writes are safe.
    events = write_admissions(
        [(rows[job_id], decisions.ranks.get(job_id, (node,)), borrowed) for job_id, (node, borrowed) in
         decisions.admit.items()],
        now,
    )  # fmt: skip
    result.admitted += len(decisions.admit)
    grace = settings.PORTAL_PREEMPTION_GRACE
    victims = [job_id for job_id in decisions.preempt if rows[job_id].state != JobState.PREEMPTING]
    found = Job.objects.select_related("team").in_bulk(victims) if victims else {}
    for job in (found[job_id] for job_id in victims if job_id in found):
        job.state = rows[job.pk].state  # the move is conditional on the state the decision was made on
        for_job = decisions.preempt[job.pk]
        deadline = now + timedelta(seconds=grace)
        message = (
            f"Preemption notice: job #{for_job} of a team within its guarantee needs these GPUs back. This job "
            f"ran on borrowed capacity; it is stopped in {grace} s and requeued."
        )
        if lifecycle.preempt(job, now, deadline, message, {"for_job": for_job, "deadline": deadline.isoformat()}):
            result.preempted += 1
    result.waiting += len(decisions.wait)
    events += write_waits([(rows[job_id], wait) for job_id, wait in decisions.wait.items()])
    insert_events(events, now)


def _update_fair_share(snap: admission.Snapshot, now: datetime) -> None:
    """Fold what each team held into its decayed average (held is constant since the last update)."""
    held: dict[int, float] = defaultdict(float)
    for job in snap.active:
        rc = snap.classes.get(job.class_id)
        held[job.team] += job.total * (rc.gpu_fraction if rc else 1.0)
    existing = {fs.team_id: fs for fs in FairShare.objects.all()}
    half_life = settings.PORTAL_FAIR_SHARE_HALF_LIFE
    to_create, to_update = [], []
    for team_id in set(existing) | set(held):
        fs = existing.get(team_id)
        if fs is None:
            to_create.append(FairShare(team_id=team_id, average_units=0.0, updated=now))
            continue
        age = max(0.0, (now - fs.updated).total_seconds())
        keep = 0.5 ** (age / half_life)
        fs.average_units = fs.average_units * keep + held.get(team_id, 0.0) * (1 - keep)
        fs.updated = now
        to_update.append(fs)
    FairShare.objects.bulk_create(to_create, ignore_conflicts=True)
    FairShare.objects.bulk_update(to_update, ["average_units", "updated"])


# -- writing the decisions, set-based -------------------------------------------------------------------------

#: A timeline line of this cycle: (job id, kind, message, data); every one is stamped with the cycle's time.
EventRow = tuple[int, str, str, dict]


def _column(model, name: str) -> str:
    return connection.ops.quote_name(model._meta.get_field(name).column)


def _table(model) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def write_admissions(placements: list[tuple], now: datetime) -> list[EventRow]:
    """Queued → admitted for every (row, nodes, borrowed), in one write: ``nodes`` is the node of each rank, rank
    0 first; a gang (more than one) stores them all in ``node_names`` and rank 0's in ``node_name``, a one-pod
    job its node with ``node_names`` left empty (what ``lifecycle.admit_batch`` writes). Returns the timeline
    lines."""
    events, values = [], []
    for job, nodes, borrowed in placements:
        node = nodes[0]
        gang = len(nodes) > 1
        note = " on borrowed capacity (preemptible)" if borrowed else ""
        noun = kinds.for_job(job).pod_noun
        where = f"Admitted: {len(nodes)} {noun}s on {', '.join(nodes)}" if gang else f"Admitted and placed on {node}"
        data = {"node": node, "borrowed": borrowed} | ({"nodes": list(nodes)} if gang else {})
        events.append((job.id, EventKind.ADMITTED.value, f"{where}{note}.", data))
        values.append((job.id, node, list(nodes) if gang else [], borrowed, job.attempts + 1))
    if not values:
        return events
    col = lambda name: _column(Job, name)  # noqa: E731
    fixed = {"state": JobState.ADMITTED.value, "state_changed_at": now, "admitted_at": now, "wait_reason": "",
             "wait_message": ADMITTED_MESSAGE, "wait_detail": {}, "queue_position": None}  # fmt: skip
    per_row = ("id", "node_name", "node_names", "borrowed", "attempts")
    if connection.vendor == "postgresql":
        assignments = ", ".join(
            [f"{col(name)} = %s" for name in fixed] + [f"{col(name)} = v.{name}" for name in per_row[1:]]
        )
        sql = (
            f"UPDATE {_table(Job)} AS j SET {assignments} FROM jsonb_to_recordset(%s::jsonb) AS "  # noqa: S608
            "v(id bigint, node_name text, node_names jsonb, borrowed boolean, attempts integer) "
            f"WHERE j.{col('id')} = v.id"
        )
        document = json.dumps([dict(zip(per_row, row, strict=True)) for row in values])
        with connection.cursor() as cursor:
            cursor.execute(sql, [*_prepared(fixed), document])
        return events
    fields = [Job._meta.get_field(name) for name in per_row[1:]]
    _executemany_update(
        [*fixed, *per_row[1:]],
        [[*_prepared(fixed), *(f.get_db_prep_save(v, connection) for f, v in zip(fields, row[1:], strict=True)),
          row[0]] for row in values],
    )  # fmt: skip
    return events


def write_waits(waits: list[tuple]) -> list[EventRow]:
    """Queued jobs that wait: store why (reason, sentence, detail, queue position) when what users see of it
    changed, in one write of the wait fields only (a concurrent cancel's state change is never overwritten);
    a timeline line when the reason changed (what ``lifecycle.explain_waits`` writes). ``waits``: (row, wait)
    pairs, ``wait`` a jobs.admission.Wait."""
    events, values = [], []
    for job, wait in waits:
        if (job.wait_reason, job.wait_message, job.queue_position) == (wait.reason, wait.message, wait.position):
            continue
        if job.wait_reason != wait.reason:
            events.append((job.id, EventKind.WAITING.value, wait.message, {"reason": wait.reason, **wait.detail}))
        values.append((job.id, wait.reason, wait.message, wait.detail, wait.position))
    if not values:
        return events
    per_row = ("id", *lifecycle.WAIT_FIELDS)
    if connection.vendor == "postgresql":
        col = lambda name: _column(Job, name)  # noqa: E731
        assignments = ", ".join(f"{col(name)} = v.{name}" for name in per_row[1:])
        sql = (
            f"UPDATE {_table(Job)} AS j SET {assignments} FROM jsonb_to_recordset(%s::jsonb) AS "  # noqa: S608
            "v(id bigint, wait_reason text, wait_message text, wait_detail jsonb, queue_position integer) "
            f"WHERE j.{col('id')} = v.id"
        )
        document = json.dumps([dict(zip(per_row, row, strict=True)) for row in values])
        with connection.cursor() as cursor:
            cursor.execute(sql, [document])
        return events
    fields = [Job._meta.get_field(name) for name in per_row[1:]]
    _executemany_update(
        list(per_row[1:]),
        [
            [f.get_db_prep_save(v, connection) for f, v in zip(fields, row[1:], strict=True)] + [row[0]]
            for row in values
        ],
    )
    return events


def insert_events(events: list[EventRow], now: datetime) -> None:
    """Store the cycle's timeline lines in one INSERT, in order, all at ``now``."""
    if not events:
        return
    col = lambda name: _column(JobEvent, name)  # noqa: E731
    columns = ", ".join(col(name) for name in ("job", "at", "kind", "message", "data"))
    at = JobEvent._meta.get_field("at").get_db_prep_save(now, connection)
    if connection.vendor == "postgresql":
        sql = (
            f"INSERT INTO {_table(JobEvent)} ({columns}) SELECT v.job_id, %s, v.kind, v.message, v.data "  # noqa: S608
            "FROM ROWS FROM (jsonb_to_recordset(%s::jsonb) AS (job_id bigint, kind text, message text, data jsonb)) "
            "WITH ORDINALITY AS v(job_id, kind, message, data, n) ORDER BY v.n"
        )
        document = json.dumps([{"job_id": j, "kind": k, "message": m, "data": d} for j, k, m, d in events])
        with connection.cursor() as cursor:
            cursor.execute(sql, [at, document])
        return
    data = JobEvent._meta.get_field("data")
    sql = f"INSERT INTO {_table(JobEvent)} ({columns}) VALUES (%s, %s, %s, %s, %s)"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, [(j, at, k, m, data.get_db_prep_save(d, connection)) for j, k, m, d in events])


def _prepared(values: dict) -> list:
    return [Job._meta.get_field(name).get_db_prep_save(value, connection) for name, value in values.items()]


def _executemany_update(fields: list[str], rows: list[list]) -> None:
    """One prepared UPDATE of ``fields`` by primary key, run for every row (values first, the id last)."""
    assignments = ", ".join(f"{_column(Job, name)} = %s" for name in fields)
    sql = f"UPDATE {_table(Job)} SET {assignments} WHERE {_column(Job, 'id')} = %s"  # noqa: S608
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)
