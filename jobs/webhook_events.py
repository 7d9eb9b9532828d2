"""What jobs, notebooks and services tell a team's webhooks (core.webhooks): the event types this app
declares, and one function per object that builds the event's data, so each transition emits in one line.

Every Job row is a job, whatever its kind (a notebook session and a service's replica spec are jobs too, and
``data.kind`` says which); notebook.* and service.* events describe the notebook or service itself. The data is
taken now (state, name) except the owner's name, read after commit and only when some webhook takes the event
(the admission cycle starts many jobs at once and must not pay a query per job for nobody)."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from core import webhooks
from jobs.choices import StopReason

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


def _emit(obj, event_type: str, data: dict, actor, reason: str) -> None:
    def facts() -> dict:
        return data | {"owner": obj.owner.get_username()}

    webhooks.emit(obj.team_id, event_type, facts, actor=actor, reason=reason)


def job(job, event_type: str, *, actor=None, reason: str = "", **extra) -> None:
    data = {"job": job.pk, "name": job.name, "kind": job.kind, "state": job.state,
            "url": webhooks.absolute(job.get_absolute_url())}  # fmt: skip
    _emit(job, event_type, data | extra, actor, reason)


def jobs(jobs: list, event_type: str, **extra) -> None:
    """``job`` for many jobs in one go (a mass start): one fan-out, and the owners' names in one query, read
    only when some webhook takes one of the events."""
    owners: dict[int, str] = {}

    def owner(job) -> str:
        if not owners:
            model = get_user_model()
            ids = {j.owner_id for j in jobs}
            owners.update(model.objects.filter(pk__in=ids).values_list("pk", model.USERNAME_FIELD))
        return owners.get(job.owner_id, "")

    def facts(job, state: str) -> dict:
        # The state as it was at the transition; the URL (a reverse() per job) only for events someone takes.
        return {"job": job.pk, "name": job.name, "kind": job.kind, "state": state,
                "url": webhooks.absolute(job.get_absolute_url())} | extra | {"owner": owner(job)}  # fmt: skip

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
