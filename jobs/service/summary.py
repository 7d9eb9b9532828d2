"""What an inference service's pages and API show of it, worked out once: its address (in-cluster DNS name and the
external URL from the operator's template), its size in words ("2–6 × 1 H100"), health (ready replicas of desired,
restarts, the last probe failure), rollout progress (updated / ready / available of desired at a revision), the
autoscaling numbers (minimum, maximum, granted within quota, borrowed, what the HPA wants), and one row per
replica pod with its node and the mean utilisation of its GPUs.

Everything here reads ``InferenceService.observed`` (kept current by the cycle) and the telemetry samples
attributed to the service's job (jobs.attribution): nothing is asked of the cluster while a page renders.
A replica's utilisation is the mean of the samples of the service's job on that replica's node over the idle
window; two replicas on one node share their node's figure (their GPUs are told apart by node only)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db.models import Avg
from django.utils import timezone

from jobs.choices import ServiceMetric, ServiceState
from jobs.models.service import InferenceService
from telemetry.models import GpuSample

#: After this long with every replica idle, the page suggests lowering the minimum.
IDLE_SUGGESTION_AFTER = timedelta(days=1)


def dns_name(service: InferenceService) -> str:
    """``<name>.<namespace>.svc.cluster.local:<port>``: where pods of the cluster reach the service."""
    return f"{service.name}.{service.team.namespace}.svc.cluster.local:{service.port}"


def external_url(service: InferenceService) -> str:
    """The URL outside the cluster from the admin's PORTAL_SERVICE_URL_TEMPLATE (``{name}``, ``{team}`` and
    ``{namespace}`` filled in); "" when the operator set none."""
    template = settings.PORTAL_SERVICE_URL_TEMPLATE
    if not template:
        return ""
    try:
        return template.format(name=service.name, team=service.team.slug, namespace=service.team.namespace)
    except (KeyError, IndexError, ValueError):  # a template naming something else: show no URL rather than fail
        return ""


def size_text(service: InferenceService) -> str:
    """ "2–6 × 1 H100": replica bounds × units per replica of the class."""
    job = service.job
    bounds = (
        str(service.min_replicas)
        if service.min_replicas == service.max_replicas
        else f"{service.min_replicas}–{service.max_replicas}"
    )
    return f"{bounds} × {job.count} {job.resource_class.display_name}"


def metric_text(service: InferenceService) -> str:
    if service.metric == ServiceMetric.CPU:
        return f"CPU utilisation, target {service.metric_target:g}%"
    where = "external metric" if service.metric == ServiceMetric.EXTERNAL else "per-replica metric"
    return f"{where} {service.metric_name}, target {service.metric_target:g} per replica"


def dns_name_parts(service: InferenceService) -> list[str]:
    """The in-cluster address in the pieces a narrow column may wrap between ("chat.", "team-vision.", …,
    ":8000"), so it breaks after a dot rather than inside a word or the port."""
    host, _, port = dns_name(service).rpartition(":")
    labels = host.split(".")
    return [f"{label}." for label in labels[:-1]] + [labels[-1], f":{port}"]


def probe_text(probe: dict, service_port: int | None = None) -> str:
    """A probe in words; a probe without its own port checks the service's port."""
    if not probe:
        return "none"
    port = probe.get("port") or service_port or ""
    if probe.get("type") == "tcp" or not probe.get("path"):
        text = f"TCP connect to port {port}"
    else:
        text = f"HTTP GET {probe.get('path')} on port {port}"
    if probe.get("initial_delay_seconds"):
        text += f", after {probe['initial_delay_seconds']} s"
    return text


def _int(observed: dict, key: str) -> int:
    try:
        return int(observed.get(key) or 0)
    except (TypeError, ValueError):
        return 0


@dataclass
class Health:
    ready: int
    desired: int
    restarts: int
    last_probe_failure: str

    @property
    def all_ready(self) -> bool:
        return self.desired > 0 and self.ready >= self.desired


@dataclass
class Rollout:
    """The rollout of the service's current revision. ``updated`` counts replicas running that revision: none
    while the Deployment last seen still carried an earlier one (the cycle observes before it applies a change).
    ``replicas`` is every replica pod the Deployment has, old revisions' included."""

    revision: int
    updated: int
    ready: int
    available: int
    desired: int
    replicas: int = 0

    @property
    def complete(self) -> bool:
        """Like ``kubectl rollout status``: every desired replica runs this revision and is available, and no
        replica of an earlier revision is left."""
        return (
            self.desired > 0
            and self.updated >= self.desired
            and self.available >= self.desired
            and self.replicas <= self.updated
        )

    @property
    def progress_text(self) -> str:
        """A rollout under way in replicas, not a percentage ("in progress (100%)" read as done while one replica
        was not ready yet): "3 of 4 replicas ready", and while old replicas remain ", 2 of 4 on revision 5"."""
        text = f"{min(self.ready, self.desired)} of {self.desired} replica{'s' if self.desired != 1 else ''} ready"
        if self.updated < self.desired:
            text += f", {self.updated} of {self.desired} on revision {self.revision}"
        return text


def desired_replicas(service: InferenceService) -> int:
    """The replicas the Deployment should have now: the HPA's wish within what is granted, else the minimum."""
    observed = service.observed or {}
    desired = _int(observed, "desired") or _int(observed, "replicas") or service.min_replicas
    if service.granted_replicas:
        desired = min(desired, service.granted_replicas)
    return desired


def health(service: InferenceService) -> Health:
    observed = service.observed or {}
    return Health(
        ready=_int(observed, "ready"),
        desired=desired_replicas(service),
        restarts=_int(observed, "restarts"),
        last_probe_failure=str(observed.get("last_probe_failure") or ""),
    )


def rollout(service: InferenceService) -> Rollout:
    observed = service.observed or {}
    current = _int(observed, "revision") == service.revision  # the Deployment seen carried this revision
    return Rollout(
        revision=service.revision,
        updated=_int(observed, "updated") if current else 0,
        ready=_int(observed, "ready"),
        available=_int(observed, "available"),
        desired=desired_replicas(service),
        replicas=_int(observed, "replicas"),
    )


@dataclass
class ReplicaRow:
    pod: str
    node: str
    ready: bool
    restarts: int
    util: float | None = None
    node_visible: bool = False


def replica_rows(service: InferenceService) -> list[ReplicaRow]:
    """One row per replica pod the cluster last showed, by pod name."""
    rows = []
    for item in (service.observed or {}).get("replica_pods") or []:
        if not isinstance(item, dict) or not item.get("pod"):
            continue
        rows.append(
            ReplicaRow(
                pod=str(item["pod"]),
                node=str(item.get("node") or ""),
                ready=bool(item.get("ready")),
                restarts=_int(item, "restarts"),
            )
        )
    return sorted(rows, key=lambda row: row.pod)


def with_utilisation(service: InferenceService, rows: list[ReplicaRow], now=None) -> list[ReplicaRow]:
    """Each row's mean GPU utilisation (%) over the idle window from the samples attributed to the service's job
    on the row's node; None where there is none. One query."""
    nodes = {row.node for row in rows if row.node}
    if not nodes:
        return rows
    since = (now or timezone.now()) - timedelta(seconds=settings.PORTAL_IDLE_WINDOW_SECONDS)
    means = dict(
        GpuSample.objects.filter(job_id=service.job_id, node_name__in=nodes, ts__gte=since)
        .exclude(util_pct__isnull=True)
        .values("node_name")
        .annotate(mean=Avg("util_pct"))
        .values_list("node_name", "mean")
        .order_by()
    )
    for row in rows:
        row.util = means.get(row.node)
    return rows


def idle_for_a_day(service: InferenceService, now=None) -> bool:
    """Every replica idle for a day or more: the page suggests lowering the minimum (services are never culled)."""
    if service.idle_since is None or service.state == ServiceState.STOPPED:
        return False
    return (now or timezone.now()) - service.idle_since >= IDLE_SUGGESTION_AFTER


def borrowed_text(service: InferenceService) -> str:
    """What borrowed replicas mean, in words ("" when none)."""
    borrowed = service.borrowed_replicas
    if not borrowed:
        return ""
    replicas = "replica runs" if borrowed == 1 else "replicas run"
    return (
        f"{borrowed} {replicas} above team {service.team.name}'s guarantee on idle capacity. When a team with "
        f"guaranteed quota needs those GPUs, the portal takes {'it' if borrowed == 1 else 'them'} back with notice "
        f"and the service scales down to what is granted (never below its minimum of {service.min_replicas})."
    )
