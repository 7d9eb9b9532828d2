"""The /metrics endpoint for Prometheus and the facts it reads from the database at scrape time.

Two kinds of metric are served together:

- Events (``core.metrics``, ``cluster.kubernetes``): counters and histograms incremented where things happen,
  summed over the processes of this host (``portal.exposition.event_registry``).
- Levels (``DatabaseCollector``): queue depth, quota held/guaranteed/limit, idle allocated GPUs, node health, failed
  reconfigurations, reconcile lag. Computed from the database by a fixed handful of queries per scrape, so they
  cost nothing per request, are the same whichever web process answers, and survive restarts.

Who may read it: ``portal.exposition.allowed``. The metrics carry team slugs, class keys, node names and counts,
never job names, users or secrets. Names and labels: docs/operator-guide.md, "Metrics and alerts".
"""

from __future__ import annotations

from collections.abc import Iterator

from django.db.models import Count, F, FloatField, Max, Min, OuterRef, Q, Subquery, Sum, Value
from django.db.models.functions import Cast, Greatest
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from gpus.choices import NodeConfigState, NodeHealth
from gpus.models import Node, NodeConfigOperation
from jobs.choices import ACTIVE_STATES, JobState
from jobs.models import Job, Quota
from jobs.usage import held_units

from .exposition import REFUSAL, Both, allowed, event_registry


def metrics_view(request: HttpRequest) -> HttpResponse:
    if not allowed(request.META):
        return HttpResponse(REFUSAL, status=403, content_type="text/plain; charset=utf-8")
    body = generate_latest(Both(event_registry(), DatabaseCollector()))
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)


class DatabaseCollector:
    """Level facts read from the database when Prometheus scrapes (a constant number of queries)."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        team_class = ["team", "resource_class"]

        by_state = GaugeMetricFamily("gpuportal_jobs", "Jobs by state (terminal ones included).", labels=["state"])
        counts = dict(Job.objects.values_list("state").annotate(n=Count("id")).order_by())
        for state in JobState.values:
            by_state.add_metric([state], counts.get(state, 0))
        yield by_state

        queued = GaugeMetricFamily("gpuportal_queue_depth", "Queued jobs, by team and class.", labels=team_class)
        oldest = GaugeMetricFamily(
            "gpuportal_queue_oldest_wait_seconds",
            "How long the oldest queued job of a team and class has waited.",
            labels=team_class,
        )
        rows = (
            Job.objects.filter(state=JobState.QUEUED)
            .values("team__slug", "resource_class__key")
            .annotate(n=Count("id"), first=Min("submitted_at"))
            .order_by()
        )
        for row in rows:
            labels = [row["team__slug"], row["resource_class__key"]]
            queued.add_metric(labels, row["n"])
            oldest.add_metric(labels, max((now - row["first"]).total_seconds(), 0.0))
        yield queued
        yield oldest

        # What a team holds is jobs.usage.held_units, the number the quota bars, the quotas API and the wait reasons
        # show; the active jobs' rows here give the idle GPUs and the names of every (team, class) that holds any
        # (a service's granted replicas are held only while its job is active, so they are among them).
        held = held_units(now=now)
        gpus = Cast(F("count") * Greatest(F("workers"), Value(1)), FloatField()) * F("resource_class__gpu_fraction")
        active_rows = (
            Job.objects.filter(state__in=ACTIVE_STATES)
            .values("team_id", "resource_class_id", "team__slug", "resource_class__key")
            .annotate(idle=Sum(gpus, filter=Q(state=JobState.RUNNING, idle_since__isnull=False)))
            .order_by()
        )
        active = {(r["team_id"], r["resource_class_id"]): r for r in active_rows}
        quota_families = {
            name: GaugeMetricFamily(f"gpuportal_quota_{name}", help_text, labels=team_class)
            for name, help_text in (
                ("held", "Units of a class a team holds: its admitted, running and preempting jobs' units and the "
                 "replicas its services were granted above their minimum (what admission counts)."),
                ("guaranteed", "Units of a class guaranteed to a team."),
                ("limit", "Units of a class a team may hold at most (guaranteed plus borrowable)."),
            )
        }  # fmt: skip
        seen = set()
        quotas = Quota.objects.values(
            "team_id", "resource_class_id", "team__slug", "resource_class__key", "guaranteed", "limit"
        )
        for quota in quotas:
            ids = (quota["team_id"], quota["resource_class_id"])
            labels = [quota["team__slug"], quota["resource_class__key"]]
            seen.add(ids)
            quota_families["guaranteed"].add_metric(labels, quota["guaranteed"])
            quota_families["limit"].add_metric(labels, quota["limit"])
            quota_families["held"].add_metric(labels, held.get(ids, 0))
        for ids, row in active.items():
            if ids not in seen:  # held without a quota row (a quota removed while its jobs ran)
                quota_families["held"].add_metric([row["team__slug"], row["resource_class__key"]], held.get(ids, 0))
        yield from quota_families.values()

        idle = GaugeMetricFamily(
            "gpuportal_allocated_idle_gpus",
            "GPUs (MIG slices and shares as fractions of a GPU) held by running jobs flagged allocated-but-idle.",
            labels=team_class,
        )
        for row in active.values():
            idle.add_metric([row["team__slug"], row["resource_class__key"]], row["idle"] or 0.0)
        yield idle

        nodes = GaugeMetricFamily(
            "gpuportal_nodes", "Nodes present in the cluster, by health verdict.", labels=["verdict"]
        )
        present = Node.objects.filter(gone_at__isnull=True)
        verdicts = dict(present.values_list("health").annotate(n=Count("id")).order_by())
        for verdict in NodeHealth.values:
            if verdict != NodeHealth.GONE:
                nodes.add_metric([verdict], verdicts.get(verdict, 0))
        yield nodes

        latest_state = Subquery(
            NodeConfigOperation.objects.filter(node=OuterRef("pk")).order_by("-created", "-pk").values("state")[:1]
        )
        failed = GaugeMetricFamily(
            "gpuportal_node_reconfiguration_failed",
            "1 for each present node whose latest reconfiguration (MIG layout, time-slicing) failed.",
            labels=["node"],
        )
        for name in (
            present.annotate(latest=latest_state).filter(latest=NodeConfigState.FAILED).values_list("name", flat=True)
        ):
            failed.add_metric([name], 1)
        yield failed

        lag = GaugeMetricFamily(
            "gpuportal_inventory_reconcile_lag_seconds",
            "Seconds since the inventory reconcile last saw the cluster's nodes (absent while there are none).",
        )
        last_seen = present.aggregate(last=Max("last_seen"))["last"]
        if last_seen is not None:
            lag.add_metric([], max((now - last_seen).total_seconds(), 0.0))
        yield lag
