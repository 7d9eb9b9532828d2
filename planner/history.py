"""The planner's inputs, read from the database: a window of the portal's own job history as ``model.History``
and today's cluster as ``model.Cluster``.

The rule for the window [start, end): every job row (batch jobs, array tasks, distributed gangs, notebook
sessions, inference services) submitted inside it, plus the work that was still queued or running at ``start``
(submitted before it and not finished by then), so a replay does not begin on an empty cluster. Each becomes one
``PastJob`` with what it asked of quota and placement as its kind says (``jobs.kinds``: a gang is W pods of G
units, a service its minimum replicas), exactly as the admission cycle reads it.

Times, observed:

- ``started``: when the job started running, if that was before ``end``; else None (it did not run inside the
  window).
- ``run_s``: for work that started inside the window, started..finished, cut at ``end`` (work still running at
  ``end``, or still running now, counts until ``end``); for work that started only after ``end``, its observed
  length (started..finished, or..now); for work that never ran (still queued, cancelled or failed before it
  started), its requested maximum runtime.
- a job requeued after a preemption counts from the start of its last attempt (the lifecycle clears
  ``started_at`` when it requeues).

Work carried over from before ``start`` keeps its own submission and start times (both before ``start``), so a
replay can tell it from the window's arrivals.

Where, over a fleet: ``cluster`` is the cluster the job was placed on (``Job.cluster``); a row placed before the
fleet (no cluster) ran on the default cluster, and work that never ran belongs to the first cluster it may run on
(the default cluster when it named none). ``clusters`` is where admission lets it run, asked of the same rule
(jobs.cycle.admit's ``Reach.clusters_of``: where it asked, narrowed to the clusters holding its volumes and, when it
uses the team's secrets or registry credentials, to those where the team's presence is in step).

The reading streams plain rows (``values_list(...).iterator()``: no model instances) in a constant number of
queries, whatever the window holds. ``current_cluster`` reads nodes, classes and quotas through
``jobs.cycle.admit``'s own readers, so the planner sees the inventory exactly as admission does today.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from accounts.models import Team
from gpus.models import Node
from jobs import kinds
from jobs.choices import ACTIVE_STATES, JobState
from jobs.cycle.admit import NOWHERE, FleetKeys, Reach, class_views, node_views, pool_kinds, quota_views
from jobs.models import Job, JobArray
from jobs.pools import pool_in_use
from jobs.validation import version_tuple
from vocab.names import MIG_STRATEGY_MIXED

from . import model

log = logging.getLogger(__name__)

#: The columns of a job the history reads: what its kind's demand needs, and its observed times.
HISTORY_COLUMNS = (
    "id", "team_id", "resource_class_id", "count", "cpu_millicores", "memory_mb", "priority", "preemptible",
    "submitted_at", "started_at", "finished_at", "max_runtime_seconds", "state", "kind", "array_id",
    "architecture", "workers", "topology_key", "topology_mode", "image_cuda", "cluster_id", "clusters",
    "secret_env", "secret_files", "volumes",
)  # fmt: skip
#: Rows fetched per round trip while streaming (a server-side cursor on PostgreSQL).
CHUNK = 2000


def window_filter(start: datetime, end: datetime) -> Q:
    """The jobs of the window: submitted inside it, or before it and still queued or running at ``start``."""
    carried = Q(finished_at__gt=start) | Q(finished_at__isnull=True, state__in=(JobState.QUEUED, *ACTIVE_STATES))
    return Q(submitted_at__lt=end) & (Q(submitted_at__gte=start) | carried)


def window_history(start: datetime, end: datetime, *, now: datetime | None = None) -> model.History:
    """The window's work as plain data (see the module's docstring for what counts and how times are read).
    ``now`` (default: the clock) is where work that is still running stops being observed."""
    if start >= end:
        raise ValueError(f"The window must start before it ends ({start.isoformat()} is not before {end.isoformat()}).")
    now = now or timezone.now()
    end_ts, now_ts = end.timestamp(), now.timestamp()
    window = window_filter(start, end)
    on_pool = pool_kinds(pool_in_use())
    fleet = FleetKeys()
    reach = Reach.load(fleet)
    cuda: dict[str, tuple[int, ...]] = {}
    unknown: dict[str, int] = {}
    jobs: list[model.PastJob] = []
    rows = (
        Job.objects.filter(window)
        .order_by("submitted_at", "id")
        .values_list(*HISTORY_COLUMNS, named=True)
        .iterator(chunk_size=CHUNK)
    )
    for row in rows:
        try:
            kind = kinds.for_job(row)
        except LookupError:  # a kind no longer installed: its demand cannot be known
            unknown[row.kind] = unknown.get(row.kind, 0) + 1
            continue
        demand = kind.demand(row)
        started_ts = row.started_at.timestamp() if row.started_at else None
        finished_ts = row.finished_at.timestamp() if row.finished_at else None
        if started_ts is not None and started_ts < end_ts:
            started = started_ts
            run_s = min(finished_ts if finished_ts is not None else now_ts, end_ts) - started_ts
        elif started_ts is not None:
            started = None  # it ran, but only after the window: its observed length is the best estimate
            run_s = (finished_ts if finished_ts is not None else now_ts) - started_ts
        else:
            started, run_s = None, float(row.max_runtime_seconds)
        if row.image_cuda and row.image_cuda not in cuda:
            cuda[row.image_cuda] = version_tuple(row.image_cuda)
        may, _ = reach.clusters_of(row, fleet)
        ran_on = fleet.cluster_name(row.cluster_id) if row.cluster_id is not None else ""
        if not ran_on:
            ran_on = may[0] if may and may != NOWHERE and started_ts is None else fleet.home
        jobs.append(
            model.PastJob(
                id=row.id,
                team=row.team_id,
                class_id=demand.resource_class_id,
                count=demand.units,
                submitted=row.submitted_at.timestamp(),
                run_s=max(0.0, run_s),
                workers=demand.pods,
                cpu_m=demand.cpu_m,
                memory_mb=demand.memory_mb,
                priority=row.priority,
                preemptible=row.preemptible,
                kind=str(row.kind),
                started=started,
                max_runtime_s=row.max_runtime_seconds,
                group=row.array_id,
                architecture=row.architecture,
                cuda=cuda[row.image_cuda] if row.image_cuda else (),
                topology_key=row.topology_key,
                topology_mode=row.topology_mode,
                pool=on_pool.get(row.kind, False),
                cluster=ran_on,
                clusters=may,
            )
        )
    if unknown:
        log.warning("Planner history left out jobs of kinds no longer registered: %s", unknown)
    caps = dict(
        JobArray.objects.filter(parallelism__isnull=False, tasks__in=Job.objects.filter(window))
        .distinct()
        .values_list("id", "parallelism")
    )
    return model.History(start=start.timestamp(), end=end_ts, jobs=jobs, group_caps=caps)


#: The node columns a shape needs (gpus.models.Node: ``product`` is GFD's product, before MIG or sharing renames).
SHAPE_COLUMNS = ("cluster_id", "name", "product", "gpu_count", "mig_capable", "mig_strategy")


def cluster_names() -> tuple[str, list[str]]:
    """The default cluster's name, and every cluster of the fleet a replay may be limited to or a proposal may
    name (the default cluster first, then by name). One query."""
    fleet = FleetKeys()
    return fleet.home, sorted(fleet.ids, key=lambda name: (name != fleet.home, name))


def current_cluster() -> model.Cluster:
    """Today's fleet and quotas as admission sees them: its node, class and quota views (jobs.cycle.admit's
    readers: every reachable cluster's nodes, keyed "<cluster>/<node>", plain names for the default cluster, the
    nodes whose taints the portal's pods do not tolerate kept off) with every unit free of the portal's own work (a
    replay places the window's work itself; what runs outside the portal stays subtracted), each node's shape under
    the same key, the team names and admission's patience. A monthly budget's use is 0 (the replay leaves budgets
    out: planner.engine_replay). planner.engine.scope narrows it to one cluster."""
    fleet = FleetKeys()
    nodes = node_views(fleet=fleet)
    shapes = {}
    for cluster_id, name, product, gpus, mig, strategy in (
        Node.objects.present().exclude(product_label="").values_list(*SHAPE_COLUMNS)
    ):
        key = fleet.key(cluster_id, name)
        if key in nodes:
            shapes[key] = model.NodeShape(
                name=key, product=product, gpu_count=gpus, mig_capable=mig, mig_strategy=strategy or MIG_STRATEGY_MIXED
            )
    return model.Cluster(
        nodes=nodes,
        shapes=shapes,
        classes=class_views(),
        quotas=quota_views(None),
        team_names=dict(Team.objects.values_list("id", "name")),
        patience=settings.PORTAL_BACKFILL_PATIENCE,
        home=fleet.home,
        clusters=tuple(sorted(fleet.ids, key=lambda name: (name != fleet.home, name))),
    )
