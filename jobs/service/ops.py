"""The actions people take on inference services (issue 13): the one home for service changes. Views and the API
call these; each one checks who may act, validates every field at once, writes in one transaction, records a line
on the service's job timeline and an audit event, and kicks the cycle after commit. Job state changes go through
jobs.lifecycle (the service's Job row is queued for its minimum, and cancelled when the service stops); the
cluster's objects are changed by the next cycle (jobs.service.follow), never here.

- create: a queued Job of kind ``service`` (the replica spec; admission admits ``min_replicas`` replicas) and its
  InferenceService.
- update: image/command/args/env/secrets/volumes/CPU/memory/probes/port roll the Deployment (a new revision, the
  spec it replaces kept for rollback); replica bounds and the metric change the HPA only (no rollout).
- scale, pause, resume, rollback, stop.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from cluster import get_backend
from cluster.base import CUSTOM_METRICS_API, EXTERNAL_METRICS_API, RESOURCE_METRICS_API, ClusterError
from core import audit
from gpus.choices import SETTINGS_CLUSTER, ClusterConnection
from gpus.models import Cluster
from jobs import lifecycle, notices, webhook_events
from jobs.access import can_manage_job, can_submit
from jobs.actions import SUBMIT_FIELDS, request_text, spec_defaults, spec_errors
from jobs.choices import EventKind, JobAuditAction, JobKind, JobState, ServiceMetric, ServiceState
from jobs.dra_claims import shares_devices
from jobs.kick import kick_after_commit
from jobs.models import Job
from jobs.models.service import InferenceService
from jobs.service.launch import granted
from jobs.validation import image_cuda_version, is_dns1123_label

#: The service's own fields (service_fields of create_service).
SERVICE_FIELDS = ["port", "readiness", "liveness", "min_replicas", "max_replicas", "metric", "metric_name",
                  "metric_target"]  # fmt: skip
#: Replica-spec fields (on the Job row) whose change rolls the Deployment out; rollback restores them.
ROLLOUT_JOB_FIELDS = ["image", "command", "args", "env", "secret_env", "secret_files", "volumes", "cpu_millicores",
                      "memory_mb", "shm_mb", "working_dir"]  # fmt: skip
#: Service fields whose change rolls the Deployment out (they are in the pod template).
ROLLOUT_SERVICE_FIELDS = ["port", "readiness", "liveness"]
#: Service fields whose change touches the HPA only.
HPA_FIELDS = ["min_replicas", "max_replicas", "metric", "metric_name", "metric_target"]
#: Replica-spec fields a running service cannot change (they change what quota admitted): stop and create anew.
FIXED_FIELDS = ["name", "count", "priority", "labels", "architecture", "preemptible", "resource_class", "clusters"]
#: What the audit records keep of a service.
AUDIT_FIELDS = ["name", "state", "port", "min_replicas", "max_replicas", "metric", "metric_name", "metric_target",
                "granted_replicas", "revision"]  # fmt: skip
#: The most replicas one service may ask for.
MAX_REPLICAS = 64
PROBE_KEYS = {"type", "path", "port", "initial_delay_seconds", "period_seconds", "failure_threshold"}


# -- validation ---------------------------------------------------------------------------------------------


def _probe_problems(probe, port: int | None) -> list[str]:
    if probe in (None, {}):
        return []
    if not isinstance(probe, dict):
        return ['Give a probe as {"type": "http", "path": "/health"} or {"type": "tcp"}, or leave it empty.']
    problems = []
    unknown = set(probe) - PROBE_KEYS
    if unknown:
        problems.append(f"Unknown probe settings: {', '.join(sorted(unknown))}; use {', '.join(sorted(PROBE_KEYS))}.")
    kind = probe.get("type", "http")
    if kind not in ("http", "tcp"):
        problems.append("The probe type is 'http' (a GET on a path) or 'tcp' (a connection to the port).")
    path = probe.get("path", "")
    if kind == "http" and (not isinstance(path, str) or not path.startswith("/") or len(path) > 1024):
        problems.append("An http probe needs a path starting with '/' (at most 1024 characters), e.g. /health.")
    if kind == "tcp" and path:
        problems.append("A tcp probe has no path; remove it or use type 'http'.")
    if "port" in probe and not (isinstance(probe["port"], int) and 1 <= probe["port"] <= 65535):
        problems.append("The probe's port is a number from 1 to 65535 (leave it out to probe the service's port).")
    for key, low, high in (
        ("initial_delay_seconds", 0, 3600),
        ("period_seconds", 1, 300),
        ("failure_threshold", 1, 30),
    ):
        if key in probe and not (isinstance(probe[key], int) and low <= probe[key] <= high):
            problems.append(f"{key} is a whole number from {low} to {high}.")
    return problems


def service_errors(fields: dict, resource_class, team) -> dict[str, list[str]]:
    """Field → messages for a service's own fields (SERVICE_FIELDS; a missing one is its default): the port, the
    probes, the replica bounds (the minimum must fit the team's quota limit of ``resource_class``) and the
    metric. Empty when they are fine. Forms and the API call it as create_service and update_service do."""
    from jobs.models import Quota  # noqa: PLC0415 - keep the module's import list to what the actions need

    errors: dict[str, list[str]] = {}

    def add(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    port = fields.get("port", 8000)
    if not (isinstance(port, int) and not isinstance(port, bool) and 1 <= port <= 65535):
        add("port", "The container port is a number from 1 to 65535.")
        port = None
    for name in ("readiness", "liveness"):
        for problem in _probe_problems(fields.get(name) or {}, port):
            add(name, problem)
    low, high = fields.get("min_replicas", 1), fields.get("max_replicas", fields.get("min_replicas", 1))
    bounds_ok = True
    if not (isinstance(low, int) and 1 <= low <= MAX_REPLICAS):
        add("min_replicas", f"The minimum is a whole number from 1 to {MAX_REPLICAS}.")
        bounds_ok = False
    if not (isinstance(high, int) and 1 <= high <= MAX_REPLICAS):
        add("max_replicas", f"The maximum is a whole number from 1 to {MAX_REPLICAS}.")
        bounds_ok = False
    if bounds_ok and high < low:
        add("max_replicas", f"The maximum ({high}) must be at least the minimum ({low}).")
    if bounds_ok and resource_class is not None and shares_devices(resource_class) and high > resource_class.replicas:
        add(
            "max_replicas",
            f"The replicas of a service on {resource_class.display_name} share one device through one claim, which "
            f"{resource_class.replicas} users share: ask for at most {resource_class.replicas} replicas, or pick a "
            "whole-GPU class.",
        )
    count = fields.get("count")
    if bounds_ok and isinstance(count, int) and resource_class is not None and team is not None:
        quota = Quota.objects.filter(team=team, resource_class=resource_class).first()
        limit = quota.limit if quota else 0
        if low * count > limit:
            add(
                "min_replicas",
                f"{low} replicas × {count} GPUs is more than team {team.name}'s limit of {limit} "
                f"{resource_class.display_name}; lower the minimum or the GPUs per replica.",
            )
    metric = fields.get("metric", ServiceMetric.CPU)
    if metric not in ServiceMetric.values:
        add("metric", f"Choose one of: {', '.join(ServiceMetric.values)}.")
    name = fields.get("metric_name", "")
    if metric in (ServiceMetric.PODS, ServiceMetric.EXTERNAL):
        if not (isinstance(name, str) and name and len(name) <= 253 and all(c.isalnum() or c in "_-.:/" for c in name)):
            add("metric_name", "Name the metric the adapter serves (letters, digits, '_', '-', '.', ':', '/'), "
                               "e.g. requests_per_second.")  # fmt: skip
    elif name:
        add("metric_name", "The CPU metric has no name; leave it empty or choose a custom metric.")
    target = fields.get("metric_target", 70.0)
    if not isinstance(target, int | float) or isinstance(target, bool) or target <= 0:
        add("metric_target", "The target is a number above 0.")
    elif metric == ServiceMetric.CPU and not 1 <= target <= 100:
        add("metric_target", "The CPU target is a percentage of the CPU request, from 1 to 100.")
    missing = _missing_metrics_api(metric, fields.get("clusters") or ())
    if missing:
        add("metric", missing)
    return errors


#: Which metrics API an HPA on each kind of metric reads, and what serves it.
METRIC_APIS = {
    ServiceMetric.CPU: (RESOURCE_METRICS_API, "metrics server"),
    ServiceMetric.PODS: (CUSTOM_METRICS_API, "custom metrics adapter (e.g. prometheus-adapter)"),
    ServiceMetric.EXTERNAL: (EXTERNAL_METRICS_API, "external metrics adapter"),
}


def _missing_metrics_api(metric: str, clusters=()) -> str:
    """Why the clusters the service may run on cannot scale on ``metric`` ("" when they can, or when a cluster
    cannot be asked now: the HPA then says so itself). The cluster configured in settings is asked; a registered
    cluster named in ``clusters`` is judged by what its last check found it serving (Cluster.capabilities)."""
    if metric not in METRIC_APIS:
        return ""
    group, what = METRIC_APIS[metric]
    named = [name for name in clusters if isinstance(name, str)]
    registered = Cluster.objects.filter(name__in=named).exclude(connection=ClusterConnection.SETTINGS)
    lacking = sorted(
        cluster.name
        for cluster in registered
        if "metrics_apis" in cluster.capabilities and group not in cluster.capabilities["metrics_apis"]
    )
    if lacking:
        which = f"Cluster {lacking[0]} has" if len(lacking) == 1 else f"Clusters {', '.join(lacking)} have"
        return (f"{which} no {what}: nothing serves {group} there, so an autoscaler could not read this metric. "
                "Leave it out of the service's clusters, or scale on another metric.")  # fmt: skip
    if named and SETTINGS_CLUSTER not in named:
        return ""
    try:
        served = get_backend().metrics_apis()
    except ClusterError:
        return ""
    if group in served:
        return ""
    offered = [ServiceMetric(m).label for m, (g, _) in METRIC_APIS.items() if g in served]
    instead = f" Scale on: {', '.join(offered)}." if offered else " Ask an admin to install one."
    return f"This cluster has no {what}: nothing serves {group}, so an autoscaler could not read this metric.{instead}"


def _name_problem(team, name: str, exclude: int | None = None) -> str:
    if not isinstance(name, str) or not name or len(name) > 40 or not is_dns1123_label(name):
        return ("Use 1 to 40 lowercase letters, digits and '-', starting and ending with a letter or digit (it names "
                "the Deployment, Service and HPA).")  # fmt: skip
    live = InferenceService.objects.filter(team=team, name=name).exclude(state=ServiceState.STOPPED)
    if live.exclude(pk=exclude).exists():
        return f"Team {team.name} already has a service called {name}; update it, or pick another name."
    return ""


# -- helpers -----------------------------------------------------------------------------------------------------


def may_manage(actor, service: InferenceService) -> None:
    """Refuse anyone but the service's owner, a lead of its team or an admin (API views call it before a body)."""
    if not can_manage_job(actor, service.job):
        raise PermissionDenied("Only the service's owner, a lead of its team or an admin can change it.")


def _record(actor, action: str, service: InferenceService, message: str, before=None, **data) -> None:
    """The timeline line on the service's job and the audit event, in the caller's transaction."""
    lifecycle.event(service.job_id, EventKind.SERVICE, message, action=action, **data)
    after = audit.snapshot(service, AUDIT_FIELDS) | data
    audit.record(actor, action, service, before=before, after=after, team=service.team)
    kick_after_commit()


def _locked(service: InferenceService) -> InferenceService:
    service = InferenceService.objects.select_for_update().select_related("job", "team").get(pk=service.pk)
    if service.state == ServiceState.STOPPED:
        raise ValidationError(f"Service {service.name} is stopped; create it again instead.")
    return service


def _who(actor) -> str:
    return actor.get_username() if actor is not None else "the portal"


def replica_spec(service: InferenceService) -> dict:
    """The spec the replicas run now (what rollback restores): the rollout fields of the job and the service."""
    return {f: getattr(service.job, f) for f in ROLLOUT_JOB_FIELDS} | {
        f: getattr(service, f) for f in ROLLOUT_SERVICE_FIELDS
    }


# -- create ------------------------------------------------------------------------------------------------------


def _replica_fields(spec: dict) -> dict:
    """A service's replica spec as jobs.actions checks a job's: one pod, no gang settings."""
    return spec_defaults() | dict(spec) | {"kind": JobKind.BATCH, "workers": 1, "topology_key": "",
                                           "topology_mode": "", "max_retries": 0}  # fmt: skip


def create_problems(actor, team, resource_class, spec: dict, service_fields: dict) -> dict[str, list[str]]:
    """Field → messages for a new service by a member of ``team`` (create_service's arguments): the replica spec
    as a job's is checked, the service's own fields, and its name. Empty when it may be created; the API also asks
    it beside an unknown field."""
    fields = _replica_fields(spec)
    unknown = sorted(set(spec) - set(SUBMIT_FIELDS))
    extra = {f: service_fields[f] for f in SERVICE_FIELDS if f in service_fields}
    errors = spec_errors(actor, team, resource_class, fields)
    if unknown:
        errors.setdefault("spec", []).append(f"Unknown replica settings: {', '.join(unknown)}.")
    for field in set(service_fields) - set(SERVICE_FIELDS):
        errors.setdefault(field, []).append(f"A service has no setting {field}; use {', '.join(SERVICE_FIELDS)}.")
    for field, messages in service_errors(extra | {"count": fields["count"]}, resource_class, team).items():
        errors.setdefault(field, []).extend(messages)
    if problem := _name_problem(team, fields["name"]):
        errors["name"] = [problem] + [m for m in errors.get("name", []) if m != problem]
    return errors


def create_service(actor, team, resource_class, spec: dict, service_fields: dict) -> InferenceService:
    """A new service: its Job (kind ``service``, queued; admission admits ``min_replicas`` replicas of ``spec``
    against the team's quota) and its InferenceService. ``spec``: the replica spec as jobs.actions.submit_job
    takes it; ``service_fields``: SERVICE_FIELDS. Raises PermissionDenied (not a member) or ValidationError with
    every problem of both."""
    if not can_submit(actor, team):
        raise PermissionDenied(f"You are not a member of team {team.name}.")
    if errors := create_problems(actor, team, resource_class, spec, service_fields):
        raise ValidationError(errors)
    fields = _replica_fields(spec)
    extra = {f: service_fields[f] for f in SERVICE_FIELDS if f in service_fields}
    extra.setdefault("max_replicas", max(extra.get("min_replicas", 1), 1))
    # The job is admitted for the minimum: min_replicas pods of ``count`` units (jobs.service.kind).
    fields["kind"], fields["workers"] = JobKind.SERVICE, extra.get("min_replicas", 1)
    try:
        with transaction.atomic():
            low = extra.get("min_replicas", 1)
            job = lifecycle.submit(
                actor,
                f"Service {fields['name']} created by {actor.get_username()}: {low} to {extra['max_replicas']} "
                f"replicas of {request_text(fields, resource_class)}.",
                data={"count": fields["count"], "resource_class": resource_class.key, "min_replicas": low},
                team=team,
                owner=actor,
                resource_class=resource_class,
                image_cuda=image_cuda_version(fields["image"]) or "",
                wait_reason="",
                **{f: fields[f] for f in SUBMIT_FIELDS},
            )
            service = InferenceService.objects.create(team=team, owner=actor, name=fields["name"], job=job, **extra)
            audit.record(actor, JobAuditAction.SERVICE_CREATE, service,
                         after=audit.snapshot(service, AUDIT_FIELDS) | {"resource_class": resource_class.key,
                                                                        "image": job.image, "count": job.count},
                         team=team)  # fmt: skip
            webhook_events.service(service, "service.created", actor=actor)
    except IntegrityError:  # a concurrent create took the name between the check and the insert
        raise ValidationError({"name": [_name_problem(team, fields["name"]) or "That name was just taken."]}) from None
    return service


# -- update and rollout ------------------------------------------------------------------------------------------


def update_service(actor, service: InferenceService, changes: dict) -> InferenceService:
    """Change a service. Rollout fields (ROLLOUT_JOB_FIELDS, ROLLOUT_SERVICE_FIELDS) make a new revision: the
    spec they replace is kept in ``previous_spec`` for rollback and the next cycle rolls the Deployment; HPA
    fields (HPA_FIELDS) only change the autoscaler's bounds and target. FIXED_FIELDS are refused (what quota
    admitted cannot change under a running service)."""
    may_manage(actor, service)
    errors: dict[str, list[str]] = {}
    for field in sorted(set(changes) - set(ROLLOUT_JOB_FIELDS) - set(ROLLOUT_SERVICE_FIELDS) - set(HPA_FIELDS)):
        if field in FIXED_FIELDS:
            errors.setdefault(field, []).append(
                f"A service's {field} cannot change while it runs; stop it and create it again with the new value."
            )
        else:
            errors.setdefault(field, []).append(f"A service has no setting {field}.")
    with transaction.atomic():
        service = _locked(service)
        job = service.job
        job_changes = {f: v for f, v in changes.items() if f in ROLLOUT_JOB_FIELDS and v != getattr(job, f)}
        svc_changes = {f: v for f, v in changes.items() if f in ROLLOUT_SERVICE_FIELDS + HPA_FIELDS
                       and v != getattr(service, f)}  # fmt: skip
        if job_changes:
            from jobs.actions import spec_of  # noqa: PLC0415

            fields = spec_of(job) | job_changes | {"kind": JobKind.BATCH, "workers": 1}
            for field, messages in spec_errors(actor, service.team, job.resource_class, fields).items():
                if field in job_changes or field not in SUBMIT_FIELDS:
                    errors.setdefault(field, []).extend(messages)
        if svc_changes:
            current = {f: getattr(service, f) for f in SERVICE_FIELDS} | svc_changes | {"count": job.count}
            for field, messages in service_errors(current, job.resource_class, service.team).items():
                if (
                    field in svc_changes
                    or field in ("min_replicas", "max_replicas")
                    and ({"min_replicas", "max_replicas"} & set(svc_changes))
                ):
                    errors.setdefault(field, []).extend(messages)
        if errors:
            raise ValidationError(errors)
        if not job_changes and not svc_changes:
            return service
        before = audit.snapshot(service, AUDIT_FIELDS)
        rollout = bool(job_changes) or bool(set(svc_changes) & set(ROLLOUT_SERVICE_FIELDS))
        if rollout:
            service.previous_spec = replica_spec(service)
            service.revision += 1
            for field, value in job_changes.items():
                setattr(job, field, value)
            if "image" in job_changes:
                job.image_cuda = image_cuda_version(job.image) or ""
            job.save(update_fields=[*job_changes, *(["image_cuda"] if "image" in job_changes else [])])
        for field, value in svc_changes.items():
            setattr(service, field, value)
        _fit_granted(service)
        service.save()
        changed = sorted([*job_changes, *svc_changes])
        what = f"rolled out revision {service.revision}" if rollout else "autoscaling changed"
        _record(actor, JobAuditAction.SERVICE_UPDATE, service,
                f"Service {service.name} {what} by {_who(actor)}: {', '.join(changed)}.", before=before,
                changed=changed, rollout=rollout)  # fmt: skip
    return service


def _fit_granted(service: InferenceService) -> None:
    """After the bounds changed. A queued service is admitted for its new minimum (the job's ``workers``, changed
    only while it is still queued). An admitted one keeps the minimum it was admitted with: a higher minimum is
    granted replica by replica by the cycle, and the grants above a lower maximum go back (newest first)."""
    job = service.job
    if job.state == JobState.QUEUED:
        if Job.objects.filter(pk=job.pk, state=JobState.QUEUED).update(workers=service.min_replicas):
            job.workers = service.min_replicas
        return
    extras = max(service.max_replicas - max(job.workers, 1), 0)
    service.replica_slots = list(service.replica_slots)[:extras]
    service.granted_replicas = granted(service, job)
    service.borrowed_replicas = sum(1 for slot in service.replica_slots if slot.get("borrowed"))


def scale_service(actor, service: InferenceService, min_replicas: int, max_replicas: int) -> InferenceService:
    """New replica bounds (the HPA only; no rollout)."""
    return update_service(actor, service, {"min_replicas": min_replicas, "max_replicas": max_replicas})


def rollback_service(actor, service: InferenceService) -> InferenceService:
    """Roll out the spec the last rollout replaced (a new revision; the current spec becomes the previous)."""
    may_manage(actor, service)
    with transaction.atomic():
        service = _locked(service)
        if not service.previous_spec:
            raise ValidationError(f"Service {service.name} has no earlier revision to roll back to.")
        before = audit.snapshot(service, AUDIT_FIELDS)
        job, previous = service.job, dict(service.previous_spec)
        service.previous_spec = replica_spec(service)
        service.revision += 1
        job_fields = [f for f in ROLLOUT_JOB_FIELDS if f in previous]
        for field in job_fields:
            setattr(job, field, previous[field])
        job.image_cuda = image_cuda_version(job.image) or ""
        job.save(update_fields=[*job_fields, "image_cuda"])
        for field in ROLLOUT_SERVICE_FIELDS:
            if field in previous:
                setattr(service, field, previous[field])
        service.save()
        message = (
            f"Service {service.name} rolled back by {_who(actor)} to the spec before revision "
            f"{service.revision - 1} (now revision {service.revision}, image {job.image})."
        )
        _record(actor, JobAuditAction.SERVICE_ROLLBACK, service, message, before=before)
        webhook_events.service(service, "service.rolled_back", actor=actor, message=message)
    return service


# -- pause, resume, stop -------------------------------------------------------------------------------------------


def _set_state(actor, service: InferenceService, state: str, expected: str, action: str, words: str):
    may_manage(actor, service)
    with transaction.atomic():
        service = _locked(service)
        if service.state != expected:
            raise ValidationError(f"Service {service.name} is {service.get_state_display().lower()}; {words}.")
        before = audit.snapshot(service, AUDIT_FIELDS)
        service.state = state
        service.save(update_fields=["state"])
        verb = "paused (rollouts held; replicas keep serving)" if state == ServiceState.PAUSED else "resumed"
        _record(actor, action, service, f"Service {service.name} {verb} by {_who(actor)}.", before=before)
    return service


def pause_service(actor, service: InferenceService) -> InferenceService:
    """Hold rollouts (the Deployment's spec.paused); the replicas keep serving and autoscaling goes on."""
    return _set_state(actor, service, ServiceState.PAUSED, ServiceState.ACTIVE, JobAuditAction.SERVICE_PAUSE,
                      "only an active service can be paused")  # fmt: skip


def resume_service(actor, service: InferenceService) -> InferenceService:
    """Let rollouts go on again (a change made while paused rolls out now)."""
    return _set_state(actor, service, ServiceState.ACTIVE, ServiceState.PAUSED, JobAuditAction.SERVICE_RESUME,
                      "only a paused service can be resumed")  # fmt: skip


def stop_service(actor, service: InferenceService, reason: str = "") -> InferenceService:
    """Stop the service: its job is cancelled (every granted replica's quota is free at once) and the next cycle
    deletes its Deployment, Service, HPA (and Ingress). Stopping someone else's service takes a ``reason``: it
    goes into the timeline and the audit record, and the owner is told (jobs.notices)."""
    may_manage(actor, service)
    reason = (reason or "").strip()
    problem = notices.reason_problem(actor, service.job.owner_id, reason, "service")
    if problem:
        raise ValidationError({"reason": [problem]})
    now = timezone.now()
    said = notices.by_whom(actor, reason)
    with lifecycle.admission_lock(now):
        service = _locked(service)
        before = audit.snapshot(service, AUDIT_FIELDS)
        service.state, service.stopped_at = ServiceState.STOPPED, now
        service.granted_replicas = service.borrowed_replicas = 0
        service.replica_slots = []
        service.save()
        job = service.job
        if job.state in (JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING, JobState.PREEMPTING):
            lifecycle.cancel(job, now, f"Service {service.name} stopped {said}.", actor=actor,
                             kind=EventKind.SERVICE, audited=False, reason=reason)  # fmt: skip
        extra = {"reason": reason} if reason else {}
        _record(actor, JobAuditAction.SERVICE_STOP, service, f"Service {service.name} stopped {said}; "
                "its Deployment, Service and autoscaler are removed.", before=before, **extra)  # fmt: skip
        webhook_events.service(service, "service.stopped", actor=actor, reason=reason)
    notices.tell_owner(job.owner, actor, reason, f"stopped your service {service.name}",
                       url=service.get_absolute_url())  # fmt: skip
    return service
