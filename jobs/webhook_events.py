"""What jobs, notebooks and services tell a team's webhooks (core.webhooks): the event types this app
declares, and one function per object that builds the event's data, so each transition emits in one line.

Every Job row is a job, whatever its kind (a notebook session and a service's replica spec are jobs too, and
``data.kind`` says which); notebook.* and service.* events describe the notebook or service itself. The data is
taken now (state, name) except the owner's name, read after commit and only when some webhook takes the event
(the admission cycle starts many jobs at once and must not pay a query per job for nobody).

A job's event names the cluster of the fleet the job was placed on (``cluster``; null until admission places it)
and the clusters its owner named, most preferred first (``clusters``; empty: wherever it can start soonest); the
cluster's name is read with the owner's, for the same reason.

A job's event carries the instant of its fact (``at``: the same instant as the job's timeline line, so a start or
an end is the cluster's time, not when the portal noticed it) and the job's ``started_at`` and ``finished_at`` as
the job's API shows them; the envelope's ``created`` is when the portal emitted the event."""

from __future__ import annotations

from datetime import datetime

from django.contrib.auth import get_user_model

from core import webhooks
from gpus.models import Cluster
from jobs.choices import StopReason
from jobs.models import Job

EVENTS = {
    "job.queued": "A job was submitted or requeued",
    "job.running": "A job started running",
    "job.succeeded": "A job succeeded",
    "job.failed": "A job failed",
    "job.lost": "A job's workload disappeared from the cluster",
    "job.cancelled": "A job was cancelled",
    "job.preempted": "A job was given a preemption notice",
    "notebook.started": "A notebook was launched or started",
    "notebook.stopped": "A notebook was stopped",
    "notebook.culled": "A notebook was stopped by its time or idle limit",
    "notebook.warning": "A notebook will soon be stopped by a limit",
    "service.created": "An inference service was created",
    "service.ready": "An inference service has all its minimum replicas ready",
    "service.degraded": "An inference service lost ready replicas",
    "service.stopped": "An inference service was stopped",
    "service.rolled_back": "An inference service was rolled back",
}


def _emit(obj, event_type: str, data: dict, actor, reason: str, late=dict) -> None:
    """``late()``: more of the data, read only when some webhook takes the event."""

    def facts() -> dict:
        return data | late() | {"owner": obj.owner.get_username()}

    webhooks.emit(obj.team_id, event_type, facts, actor=actor, reason=reason)


def _iso(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _times(job, at: datetime | None) -> dict:
    """When the fact happened, and the job's start and end as they stand (None until they happen)."""
    return {"at": _iso(at), "started_at": _iso(getattr(job, "started_at", None)),
            "finished_at": _iso(getattr(job, "finished_at", None))}  # fmt: skip


def job(job, event_type: str, *, at: datetime | None = None, actor=None, reason: str = "", **extra) -> None:
    """``at``: the instant of the fact (the job's timeline line for it)."""
    data = {"job": job.pk, "name": job.name, "kind": job.kind, "state": job.state, "clusters": list(job.clusters),
            "url": webhooks.absolute(job.get_absolute_url())} | _times(job, at)  # fmt: skip
    cluster_id = job.cluster_id

    def cluster() -> dict:
        name = Cluster.objects.filter(pk=cluster_id).values_list("name", flat=True).first() if cluster_id else None
        return {"cluster": name}

    _emit(job, event_type, data | extra, actor, reason, late=cluster)


def jobs(jobs: list, event_type: str, *, at: dict[int, datetime], **extra) -> None:
    """``job`` for many jobs in one go (a mass start): one fan-out, and the owners' and clusters' names in one query
    each, read only when some webhook takes one of the events. ``at``: job id → the instant of its fact."""
    owners: dict[int, str] = {}
    placed: dict[int, dict] = {}

    def owner(job) -> str:
        if not owners:
            model = get_user_model()
            ids = {j.owner_id for j in jobs}
            owners.update(model.objects.filter(pk__in=ids).values_list("pk", model.USERNAME_FIELD))
        return owners.get(job.owner_id, "")

    def where(job) -> dict:
        # Read from the rows (a mass start hands plain rows, jobs.lifecycle_bulk.StartingJob, that carry neither).
        if not placed:
            rows = Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", "cluster__name", "clusters")
            placed.update((pk, {"cluster": name, "clusters": list(names)}) for pk, name, names in rows)
        return placed.get(job.pk, {"cluster": None, "clusters": []})

    def facts(job, state: str) -> dict:
        # The state as it was at the transition (the times a transition sets stay); the URL (a reverse() per job)
        # and the times' text only for events someone takes.
        return ({"job": job.pk, "name": job.name, "kind": job.kind, "state": state,
                 "url": webhooks.absolute(job.get_absolute_url())}
                | _times(job, at.get(job.pk)) | extra | where(job) | {"owner": owner(job)})  # fmt: skip

    webhooks.emit_many([(job.team_id, event_type, lambda job=job, state=job.state: facts(job, state)) for job in jobs])


def notebook(notebook, event_type: str, *, actor=None, reason: str = "", **extra) -> None:
    data = {"notebook": notebook.pk, "name": notebook.name, "state": notebook.state,
            "url": webhooks.absolute(notebook.get_absolute_url())}  # fmt: skip
    _emit(notebook, event_type, data | extra, actor, reason)


def service(service, event_type: str, *, actor=None, reason: str = "", **extra) -> None:
    data = {"service": service.pk, "name": service.name, "state": service.state, "revision": service.revision,
            "url": webhooks.absolute(service.get_absolute_url())}  # fmt: skip
    _emit(service, event_type, data | extra, actor, reason)


def notebook_stopped(nb, stop_reason: str, *, actor=None, why: str = "") -> None:
    """notebook.culled when a limit stopped it (maximum age, idle), notebook.stopped otherwise; ``reason`` is the
    words of the person who stopped it (``why``), else the stop reason's words."""
    culled = stop_reason in (StopReason.TTL, StopReason.IDLE)
    notebook_event = "notebook.culled" if culled else "notebook.stopped"
    notebook(nb, notebook_event, actor=actor, reason=why or StopReason(stop_reason).label, stop_reason=stop_reason)


def service_health(svc, previous: dict, seen: dict) -> None:
    """service.ready when the ready replicas reach the minimum, service.degraded when they fall below it (edges
    only: the cycle observes every few seconds and a steady service says nothing)."""
    ready = int(seen.get("ready") or 0)
    was, now = int(previous.get("ready") or 0) >= svc.min_replicas, ready >= svc.min_replicas
    if was != now:
        service(svc, "service.ready" if now else "service.degraded", ready=ready, min_replicas=svc.min_replicas)
