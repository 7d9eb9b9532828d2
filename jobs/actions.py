"""The actions people take on jobs and quotas. Views and API call these; each one validates, writes, records
a timeline event and an audit event in one transaction, and kicks the admission cycle after commit."""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from decimal import Decimal

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from accounts.models import Team
from accounts.roles import roles_remembered
from core import audit
from gpus.models import Cluster, ResourceClass
from jobs import lifecycle, notices
from jobs.access import can_manage_array, can_manage_job, can_submit
from jobs.checkpoints import checkpoint_problems, normalised
from jobs.choices import TERMINAL_STATES, JobAuditAction, JobKind, JobState
from jobs.kick import kick_after_commit
from jobs.models import Job, JobArray, Quota, QuotaClusterCap
from jobs.storage.mounts import mount_errors
from jobs.storage.secrets import check_secret_refs
from jobs.validation import (
    array_problems,
    check_request,
    cluster_problems,
    gang_problems,
    image_cuda_version,
    priority_problem,
)

log = logging.getLogger(__name__)

#: Idempotency keys the portal makes itself (resubmissions); refused from clients so they cannot collide.
INTERNAL_KEY_PREFIX = "portal:"

#: A job's spec: what a submission says and what a resubmission copies (the API's resubmit, the form's
#: "Resubmit with changes"). A new spec field is added here, and every copy includes it.
SUBMIT_FIELDS = [
    "name", "image", "command", "args", "env", "count", "cpu_millicores", "memory_mb", "priority", "preemptible",
    "max_runtime_seconds",
]  # fmt: skip
#: Fields a submission may leave out (older clients, resubmissions of jobs from before they existed); leaving
#: one out means the model's default (spec_defaults). Left out or empty, they are not part of the request's
#: fingerprint either, so a request that never used them keeps the fingerprint it always had.
OPTIONAL_SUBMIT_FIELDS = (
    "volumes", "shm_mb", "secret_env", "secret_files", "labels", "working_dir", "architecture", "clusters",
    "checkpoint",
)  # fmt: skip
#: Distributed training's fields, optional the same way: at their default (a one-pod batch job) they are left out
#: of the fingerprint, so a batch request keeps the fingerprint it had before distributed jobs existed.
GANG_FIELD_DEFAULTS = {"kind": JobKind.BATCH, "workers": 1, "topology_key": "", "topology_mode": "", "max_retries": 0}
SUBMIT_FIELDS += [*OPTIONAL_SUBMIT_FIELDS, *GANG_FIELD_DEFAULTS]


def spec_defaults() -> dict:
    """The model's default of every spec field (a caller that leaves a field out gets its default)."""
    return {f: Job._meta.get_field(f).get_default() for f in SUBMIT_FIELDS}


def request_text(fields: dict, resource_class) -> str:
    """'2 × H100' for one pod, '2 workers × 4 × H100' for a distributed job."""
    if fields.get("kind") == JobKind.DISTRIBUTED:
        return f"{fields['workers']} workers × {fields['count']} × {resource_class.display_name}"
    return f"{fields['count']} × {resource_class.display_name}"


def spec_of(job: Job) -> dict:
    """The spec of ``job``, as submit_job takes it (SUBMIT_FIELDS)."""
    return {f: getattr(job, f) for f in SUBMIT_FIELDS}


# -- submit, cancel, resubmit -------------------------------------------------------------------------------


@dataclass
class Submission:
    job: Job
    created: bool


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before with a different request."""


def request_fingerprint(team: Team, resource_class, fields: dict) -> str:
    payload = {"team": team.slug, "resource_class": resource_class.pk, **{f: fields.get(f) for f in SUBMIT_FIELDS}}
    for name in OPTIONAL_SUBMIT_FIELDS:
        if not payload[name]:
            del payload[name]  # so a request that leaves them out keeps the fingerprint it always had
    for name, default in GANG_FIELD_DEFAULTS.items():
        if payload[name] in (default, None):
            del payload[name]
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()


def spec_errors(user, team: Team, resource_class, fields: dict, *, array: bool = False) -> dict[str, list[str]]:
    """Every problem of a spec (all SUBMIT_FIELDS present) for ``team``: the request against the portal's
    rules (a distributed job's workers, topology and retries included), its mounts, its secret references.
    ``array``: the spec is a job array's. Field → messages, empty when it may be queued."""
    errors = gang_problems(
        kind=fields["kind"],
        topology_key=fields["topology_key"],
        topology_mode=fields["topology_mode"],
        max_retries=fields["max_retries"],
        array=array,
        env=fields["env"],
        secret_env=fields["secret_env"],
    )
    for field, messages in check_request(
        team=team,
        resource_class=resource_class,
        count=fields["count"],
        cpu_millicores=fields["cpu_millicores"],
        memory_mb=fields["memory_mb"],
        image=fields["image"],
        user=user,
        priority=fields["priority"],
        architecture=fields["architecture"],
        kind=fields["kind"],
        workers=fields["workers"],
        env=fields["env"],
        clusters=fields.get("clusters"),
    ).items():
        errors.setdefault(field, []).extend(messages)
    for field, messages in mount_errors(team, fields).items():
        errors.setdefault(field, []).extend(messages)
    if problems := cluster_problems(team, fields.get("clusters"), fields):
        errors.setdefault("clusters", []).extend(problems)
    if problems := checkpoint_problems(fields.get("checkpoint")):
        errors.setdefault("checkpoint", []).extend(problems)
    if fields["secret_env"] or fields["secret_files"]:  # naming no secret, a spec has nothing to look up
        for field, messages in check_secret_refs(team, fields["secret_env"], fields["secret_files"]).items():
            errors.setdefault(field, []).extend(messages)
    return errors


def submit_job(
    user, team: Team, resource_class, fields: dict, idempotency_key: str = "", resubmitted_from: Job | None = None
) -> Submission:
    """Queue a job. ``fields`` holds SUBMIT_FIELDS, already checked for shape by the form or serializer.

    Raises PermissionDenied (not a member), ValidationError (field → messages; nothing is stored) or
    IdempotencyConflict. With an ``idempotency_key`` seen before for this user and the same request, the
    earlier job is returned and nothing new is stored.
    """
    with roles_remembered():  # the role is checked here and again for the priority: one read
        return _submit_job(user, team, resource_class, fields, idempotency_key, resubmitted_from)


def _submit_job(
    user, team: Team, resource_class, fields: dict, idempotency_key: str, resubmitted_from: Job | None
) -> Submission:
    if not can_submit(user, team):
        raise PermissionDenied(f"You are not a member of team {team.name}.")
    if idempotency_key.startswith(INTERNAL_KEY_PREFIX) and resubmitted_from is None:
        raise ValidationError(
            {"idempotency_key": [f"Idempotency keys starting with '{INTERNAL_KEY_PREFIX}' are the portal's own."]}
        )
    fields = spec_defaults() | fields
    fingerprint = request_fingerprint(team, resource_class, fields)
    if idempotency_key:
        earlier = Job.objects.filter(owner=user, idempotency_key=idempotency_key).first()
        if earlier is not None:
            if earlier.request_hash != fingerprint:
                raise IdempotencyConflict(
                    f"Idempotency-Key '{idempotency_key}' was already used for job #{earlier.pk} with a different "
                    "request; use a new key for a new job."
                )
            return Submission(earlier, created=False)
    errors = spec_errors(user, team, resource_class, fields)
    if errors:
        raise ValidationError(errors)
    fields["checkpoint"] = normalised(fields.get("checkpoint"))
    try:
        with transaction.atomic():
            job = lifecycle.submit(
                user,
                f"Submitted by {user.get_username()}: {request_text(fields, resource_class)}.",
                verb=JobAuditAction.JOB_RESUBMIT if resubmitted_from else JobAuditAction.JOB_SUBMIT,
                audit_after={"resource_class": resource_class.key},
                data={"count": fields["count"], "resource_class": resource_class.key}
                | ({"workers": fields["workers"]} if fields["kind"] == JobKind.DISTRIBUTED else {}),
                team=team,
                owner=user,
                resource_class=resource_class,
                image_cuda=image_cuda_version(fields["image"]) or "",
                idempotency_key=idempotency_key,
                request_hash=fingerprint,
                resubmitted_from=resubmitted_from,
                wait_reason="",
                **{f: fields[f] for f in SUBMIT_FIELDS},
            )
            if resubmitted_from is not None:
                lifecycle.resubmitted(resubmitted_from, job, user)
    except IntegrityError:
        # Two retries with the same key raced; the other one stored the job.
        earlier = Job.objects.filter(owner=user, idempotency_key=idempotency_key).first()
        if earlier is None or not idempotency_key:
            raise
        if earlier.request_hash != fingerprint:
            raise IdempotencyConflict(
                f"Idempotency-Key '{idempotency_key}' was already used for job #{earlier.pk} with a different "
                "request; use a new key for a new job."
            ) from None
        return Submission(earlier, created=False)
    return Submission(job, created=True)


def cancel_job(user, job: Job, reason: str = "") -> Job:
    """Stop a job: a queued one leaves the queue, an active one has its workload deleted (by the next cycle,
    outside this transaction). Frees its quota immediately. Cancelling someone else's job takes a ``reason``:
    it goes into the timeline and the audit record, and the owner is told (jobs.notices)."""
    if not can_manage_job(user, job):
        raise PermissionDenied("Only the job's owner, a lead of its team or an admin can cancel it.")
    reason = (reason or "").strip()
    problem = notices.reason_problem(user, job.owner_id, reason, "job")
    if problem:
        raise ValidationError({"reason": [problem]})
    now = timezone.now()
    # The admission cycle writes queued jobs in bulk under this lock; taking it here means a cycle never admits
    # a job this call is cancelling.
    with lifecycle.admission_lock(now):
        job = Job.objects.select_for_update().get(pk=job.pk)
        if not job.is_cancellable:
            raise ValidationError(f"Job #{job.pk} is {job.get_state_display().lower()}; there is nothing to cancel.")
        message = f"Cancelled {notices.by_whom(user, reason)}" + ("" if reason else ".")
        lifecycle.cancel(job, now, message, actor=user, reason=reason)
    words, url = job.owner_words()
    notices.tell_owner(job.owner, user, reason, f"cancelled your {words}", url=url)
    return job


def resubmit_job(user, job: Job, changes: dict | None = None, resource_class=None) -> Job:
    """A new job with the request of ``job`` (which must have ended), with ``changes`` (SUBMIT_FIELDS, already
    checked for shape by the serializer, exactly as a new job's) and perhaps another ``resource_class``. The new
    request is checked like any submission."""
    if not can_manage_job(user, job):
        raise PermissionDenied("Only the job's owner, a lead of its team or an admin can resubmit it.")
    if job.notebook_id is not None:
        raise ValidationError(f"Job #{job.pk} is a notebook session; start the notebook again from its page instead.")
    if job.state not in TERMINAL_STATES:
        raise ValidationError(f"Job #{job.pk} is still {job.get_state_display().lower()}; cancel it first.")
    changes = {f: v for f, v in (changes or {}).items() if f in SUBMIT_FIELDS and v != getattr(job, f)}
    # The class it asked for, not an alternative that served its last attempt (jobs.scheduling.decide rule 6).
    asked_id = lifecycle.asked_class_id(job)
    asked = job.resource_class if asked_id == job.resource_class_id else ResourceClass.objects.get(pk=asked_id)
    resource_class = resource_class or asked
    fields = spec_of(job) | changes
    owner = user if can_submit(user, job.team) else job.owner
    # One resubmission per ended job, person and set of changes: a double-clicked Resubmit returns the same job.
    key = f"{INTERNAL_KEY_PREFIX}resubmit-of-{job.pk}"
    if changes or resource_class != asked:
        key += "-" + request_fingerprint(job.team, resource_class, fields)[:16]
    return submit_job(owner, job.team, resource_class, fields, idempotency_key=key, resubmitted_from=job).job


def require_manage(user, job: Job, doing: str) -> None:
    """Refuse (PermissionDenied) anyone but the job's owner, a lead of its team or an admin; API views call it
    before reading a body, so the caller hears "not yours" before "this field is required"."""
    if not can_manage_job(user, job):
        raise PermissionDenied(f"Only the job's owner, a lead of its team or an admin can {doing}.")


def change_priority(user, job: Job, priority: int) -> Job:
    """Give a queued job another priority: its owner, a lead or an admin, up to what their role allows
    (jobs.access.max_priority). The next admission cycle orders the queue by it (a cycle is kicked)."""
    require_manage(user, job, "change its priority")
    problem = priority_problem(user, job.team, priority)
    if problem:
        raise ValidationError({"priority": [problem]})
    now = timezone.now()
    with lifecycle.admission_lock(now):
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.state != JobState.QUEUED:
            raise ValidationError(
                {"priority": [f"Job #{job.pk} is {job.get_state_display().lower()}; only a queued job's priority "
                              "can change. Resubmit it with changes instead."]}
            )  # fmt: skip
        lifecycle.reprioritise(job, now, priority, actor=user)
    return job


# -- job arrays -----------------------------------------------------------------------------------------------


@dataclass
class ArraySubmission:
    array: JobArray
    created: bool


def submit_array(
    user, team: Team, resource_class, fields: dict, size: int, parallelism: int | None = None, idempotency_key=""
) -> ArraySubmission:
    """Queue ``size`` tasks of the same spec as one job array. Every task is checked and counted like a job of
    its own (quota, placement); ``parallelism`` caps how many are admitted at once. Raises what submit_job
    raises; with an ``idempotency_key`` seen before for the same request, the earlier array is returned."""
    if not can_submit(user, team):
        raise PermissionDenied(f"You are not a member of team {team.name}.")
    if idempotency_key.startswith(INTERNAL_KEY_PREFIX):
        raise ValidationError(
            {"idempotency_key": [f"Idempotency keys starting with '{INTERNAL_KEY_PREFIX}' are the portal's own."]}
        )
    fields = spec_defaults() | fields
    fingerprint = request_fingerprint(team, resource_class, fields | {"array": [size, parallelism]})
    if idempotency_key:
        earlier = JobArray.objects.filter(owner=user, idempotency_key=idempotency_key).first()
        if earlier is not None:
            if earlier.request_hash != fingerprint:
                raise IdempotencyConflict(
                    f"Idempotency-Key '{idempotency_key}' was already used for job array #{earlier.pk} with a "
                    "different request; use a new key for a new array."
                )
            return ArraySubmission(earlier, created=False)
    errors = array_problems(size, parallelism)
    for field, messages in spec_errors(user, team, resource_class, fields, array=True).items():
        errors.setdefault(field, []).extend(messages)
    if errors:
        raise ValidationError(errors)
    fields["checkpoint"] = normalised(fields.get("checkpoint"))
    array = lifecycle.submit_array(
        user,
        {"size": size, "parallelism": parallelism, "idempotency_key": idempotency_key, "request_hash": fingerprint},
        f"Submitted by {user.get_username()}: {fields['count']} × {resource_class.display_name}.",
        data={"count": fields["count"], "resource_class": resource_class.key},
        team=team,
        owner=user,
        resource_class=resource_class,
        image_cuda=image_cuda_version(fields["image"]) or "",
        wait_reason="",
        **{f: fields[f] for f in SUBMIT_FIELDS},
    )
    return ArraySubmission(array, created=True)


def cancel_array(user, array: JobArray) -> list[Job]:
    """Cancel every task of the array that has not ended (owner, lead or admin); one audit record for the
    group, a timeline line on each task."""
    if not can_manage_array(user, array):
        raise PermissionDenied("Only the array's owner, a lead of its team or an admin can cancel it.")
    now = timezone.now()
    with lifecycle.admission_lock(now):
        cancelled = lifecycle.cancel_array(array, now, user)
    if not cancelled:
        raise ValidationError(f"Every task of job array #{array.pk} has ended; there is nothing to cancel.")
    return cancelled


# -- quotas ---------------------------------------------------------------------------------------------------


QUOTA_FIELDS = ["guaranteed", "limit", "monthly_gpu_hours"]


def set_quota(
    user,
    team: Team,
    resource_class,
    guaranteed: int,
    limit: int,
    monthly_gpu_hours=None,
    *,
    quota_id: int | None = None,
    cluster_caps: dict[str, int] | None = None,
) -> Quota:
    """Create or change a quota (admins only). Lowering it never stops running work; new admissions follow it.

    ``quota_id``: change that quota only (a PATCH): raises ``Quota.DoesNotExist`` when it was removed meanwhile,
    rather than creating it again under a new id (audit finding 5). ``cluster_caps``: cluster name → the most units
    the team may hold on that cluster (the quota's caps become exactly these; None keeps them as they are). Every
    problem is reported at once and nothing is stored when there is one."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can change quotas.")
    errors = {}
    if guaranteed < 0:
        errors["guaranteed"] = ["Must be 0 or more."]
    if limit < guaranteed:
        errors["limit"] = [f"The limit ({limit}) must be at least the guaranteed amount ({guaranteed})."]
    if monthly_gpu_hours is not None and Decimal(monthly_gpu_hours) < 0:
        errors["monthly_gpu_hours"] = ["Must be 0 or more, or empty for no budget."]
    clusters = {}
    if cluster_caps is not None:
        names = list(cluster_caps) if isinstance(cluster_caps, dict) else []
        clusters = {c.name: c for c in Cluster.objects.filter(name__in=names)}
        if problems := cap_problems(cluster_caps, limit, resource_class, clusters):
            errors["cluster_caps"] = problems
    else:  # the caps stay: a lowered limit must not leave one above it
        kept = QuotaClusterCap.objects.filter(
            **(
                {"quota_id": quota_id}
                if quota_id is not None
                else {"quota__team": team, "quota__resource_class": resource_class}
            )
        )
        over = [
            f"The cap on {name} ({cap}) would be above the limit ({limit}); lower the cap too."
            for name, cap in kept.filter(limit__gt=limit).values_list("cluster__name", "limit")
        ]
        if over:
            errors["cluster_caps"] = over
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        if quota_id is not None:
            quota = Quota.objects.select_for_update().filter(pk=quota_id).first()
            if quota is None:
                raise Quota.DoesNotExist(f"Quota #{quota_id} no longer exists: it was removed.")
        else:
            quota = Quota.objects.select_for_update().filter(team=team, resource_class=resource_class).first()
        before = _quota_snapshot(quota) if quota else None
        if quota is None:
            quota = Quota(team=team, resource_class=resource_class)
        quota.guaranteed, quota.limit = guaranteed, limit
        quota.monthly_gpu_hours = Decimal(monthly_gpu_hours) if monthly_gpu_hours is not None else None
        quota.updated_by = user
        quota.save()
        if cluster_caps is not None:
            _write_caps(quota, {clusters[name]: cap for name, cap in cluster_caps.items()})
        after = _quota_snapshot(quota)
        if before != after:
            audit.record(
                user,
                JobAuditAction.QUOTA_SET,
                quota,
                before=before,
                after=after | {"resource_class": resource_class.key},
                team=team,
            )
        kick_after_commit()
    return quota


def cap_problems(cluster_caps: dict, limit: int, resource_class, clusters: dict) -> list[str]:
    """What is wrong with a quota's per-cluster caps (cluster name → cap), every problem at once: unknown
    clusters, caps that are not whole numbers from 0 to the quota's limit, caps on a cluster a scoped class does
    not count. ``clusters``: the named clusters that exist, by name."""
    problems = []
    if not isinstance(cluster_caps, dict):
        return ['Give the caps as cluster name → units, e.g. {"cloud": 4}.']
    unknown = sorted(name for name in cluster_caps if name not in clusters)
    if unknown:
        known = ", ".join(Cluster.objects.order_by("name").values_list("name", flat=True))
        problems.append(f"No cluster {', '.join(map(repr, unknown))}; the fleet has {known}.")
    for name, cap in cluster_caps.items():
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 0:
            problems.append(f"The cap on {name} must be a whole number of units, 0 or more (got {cap!r}).")
        elif cap > limit:
            problems.append(
                f"The cap on {name} ({cap}) is above the quota's limit ({limit}); a cap only narrows the fleet-wide "
                "limit: lower it, or raise the limit."
            )
    scope = getattr(resource_class, "cluster", None)
    if scope is not None:
        elsewhere = sorted(name for name in cluster_caps if name in clusters and name != scope.name)
        if elsewhere:
            problems.append(
                f"{resource_class.display_name} counts the nodes of cluster {scope.name} only; a cap on "
                f"{', '.join(elsewhere)} would mean nothing: remove it."
            )
    return problems


def _quota_snapshot(quota: Quota) -> dict:
    """A quota's fields and caps as its audit records show them."""
    caps = dict(quota.cluster_caps.values_list("cluster__name", "limit")) if quota.pk else {}
    return audit.snapshot(quota, QUOTA_FIELDS) | {"cluster_caps": dict(sorted(caps.items()))}


def _write_caps(quota: Quota, caps: dict) -> None:
    """Make the quota's caps exactly ``caps`` (Cluster → units): set-based, three statements at most."""
    existing = {cap.cluster_id: cap for cap in quota.cluster_caps.all()}
    quota.cluster_caps.exclude(cluster__in=[cluster.pk for cluster in caps]).delete()
    changed, new = [], []
    for cluster, limit in caps.items():
        cap = existing.get(cluster.pk)
        if cap is None:
            new.append(QuotaClusterCap(quota=quota, cluster=cluster, limit=limit))
        elif cap.limit != limit:
            cap.limit = limit
            changed.append(cap)
    QuotaClusterCap.objects.bulk_create(new)
    QuotaClusterCap.objects.bulk_update(changed, ["limit"])


def delete_quota(user, quota: Quota) -> bool:
    """Remove a quota (admins only); False when it was removed meanwhile (a racing delete), so only one removal
    is audited. The row lock serialises it with a racing change (``set_quota(quota_id=...)``)."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can change quotas.")
    with transaction.atomic():
        locked = Quota.objects.select_for_update(of=("self",)).filter(pk=quota.pk).select_related("team").first()
        if locked is None:
            return False
        audit.record(user, JobAuditAction.QUOTA_DELETE, locked, before=_quota_snapshot(locked), team=locked.team)
        locked.delete()
        kick_after_commit()  # queued jobs of that class now wait for a reason worth saying
    return True
