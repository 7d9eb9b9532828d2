"""Checkpoint-aware, protected preemption (issue 34, item 3): what a job declares about its checkpoints, the
checkpoints it reports, a team's minimum runtime, and the GPU-hours preemption loses.

- A job may declare ``checkpoint`` = {"signal": one of ``SIGNALS``, "grace_seconds": 30 to
  PORTAL_CHECKPOINT_GRACE_MAX, "report": one of ``REPORTS``}. Its pod then gets ``terminationGracePeriodSeconds`` =
  the grace and, for a signal other than SIGTERM, a preStop hook that sends it to the container's main process
  (jobs.render.checkpoint_lifecycle). Preempting it deletes its workload at once (Kubernetes runs the hook, then
  SIGTERM, then SIGKILL when the grace ends) and requeues it once the grace passed.
- The job reports a checkpoint with ``POST /api/v1/jobs/<id>/checkpoint/`` (``report_checkpoint``); the time is
  stored on the job and a timeline line written. With "report": "api" (the default) it calls with its owner's (or a
  lead's) API token, which it must be given; with "token" the portal gives each attempt a token that may do that and
  nothing else, for that job only, in PORTAL_CHECKPOINT_TOKEN, and the address in PORTAL_CHECKPOINT_URL
  (jobs.checkpoint_tokens). "annotation" (the portal reading a pod annotation) is not built: a pod cannot annotate
  itself without RBAC the portal does not grant.
- A team's leads and admins set a minimum runtime (``set_min_runtime``): admission never picks a job of the team
  that ran less than that as a victim.
- Each preemption adds to ``Job.preemption_lost_gpu_seconds`` the GPU-seconds since the later of the attempt's start
  and the last checkpoint (``lost_gpu_seconds``); showback sums it per team (jobs.usage).
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from accounts import teams as team_services
from core import audit
from jobs.access import can_manage_job
from jobs.choices import ACTIVE_STATES, EventKind, JobAuditAction
from jobs.models import Job, JobCheckpointToken, JobEvent, TeamPreemption

#: The signals a job may ask for (sent by the preStop hook; SIGTERM is what Kubernetes sends anyway).
SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2")
#: How a job reports its checkpoints: with an API token it is given ("api"), or with the token the portal gives each
#: attempt ("token", jobs.checkpoint_tokens).
REPORTS = ("api", "token")
#: What each way means, for error messages and pages.
REPORT_WORDS = {
    "api": "POST /api/v1/jobs/<id>/checkpoint/ with its owner's API token",
    "token": "`gpuportal checkpoint` (or a POST to $PORTAL_CHECKPOINT_URL) with the token the portal puts in "
    "$PORTAL_CHECKPOINT_TOKEN",
}
MIN_GRACE = 30
KEYS = ("signal", "grace_seconds", "report")


def checkpoint_problems(value) -> list[str]:
    """Every problem of a ``checkpoint`` declaration at once ([] when right; {} or None declares nothing)."""
    if value in (None, {}):
        return []
    if not isinstance(value, dict):
        return ['Give an object like {"signal": "SIGUSR1", "grace_seconds": 300, "report": "api"}, or leave it out.']
    unknown = sorted(set(value) - set(KEYS), key=str)
    problems = [f"Unknown key {key!r}; the keys are {', '.join(KEYS)}." for key in unknown]
    signal = value.get("signal", "SIGTERM")
    if signal not in SIGNALS:
        problems.append(f"signal {signal!r} is not one of {', '.join(SIGNALS)}.")
    grace = value.get("grace_seconds")
    top = settings.PORTAL_CHECKPOINT_GRACE_MAX
    if grace is None:
        problems.append(f"grace_seconds is required: how long the job needs to checkpoint ({MIN_GRACE} to {top}).")
    elif isinstance(grace, bool) or not isinstance(grace, int) or not MIN_GRACE <= grace <= top:
        problems.append(f"grace_seconds must be a whole number from {MIN_GRACE} to {top}, not {grace!r}.")
    report = value.get("report", "api")
    if report not in REPORTS:
        ways = "; ".join(f'"{name}": {words}' for name, words in REPORT_WORDS.items())
        problems.append(f"report {report!r} is not offered: use one of {', '.join(REPORTS)} ({ways}).")
    return problems


def normalised(value) -> dict:
    """A valid declaration with its defaults filled in ({} for none)."""
    if not value:
        return {}
    return {"signal": value.get("signal", "SIGTERM"), "grace_seconds": value["grace_seconds"],
            "report": value.get("report", "api")}  # fmt: skip


def grace_of(job: Job) -> int:
    """The seconds a preempted ``job`` keeps its GPUs after its notice: its declared grace, else the portal's."""
    return int((job.checkpoint or {}).get("grace_seconds") or settings.PORTAL_PREEMPTION_GRACE)


def lost_gpu_seconds(job: Job, now: datetime) -> float:
    """Normalised GPU-seconds the current attempt loses if stopped at ``now``: since the later of its start and its
    last checkpoint."""
    if job.started_at is None:
        return 0.0
    since = max(job.started_at, job.last_checkpoint_at or job.started_at)
    return max(0.0, (now - since).total_seconds()) * job.gpu_units


def report_checkpoint(
    user, job: Job, at: datetime | None = None, *, now: datetime | None = None, credential=None
) -> Job:
    """The job says it has just written a checkpoint: stored with a timeline line. Only while it runs (or is being
    preempted), by someone who may manage it (its owner, the team's leads, admins), or with the job's own checkpoint
    token (``credential``: what the request authenticated with; jobs.checkpoint_tokens), which speaks for no one
    else."""
    token = credential if isinstance(credential, JobCheckpointToken) else None
    if token is not None:
        if token.job_id != job.pk:
            raise PermissionDenied(f"This checkpoint token reports checkpoints of job #{token.job_id} only.")
    elif not can_manage_job(user, job):
        raise PermissionDenied("Only the job's owner, a lead of its team or an admin can report its checkpoints.")
    if job.state not in ACTIVE_STATES:
        raise ValidationError(f"Job #{job.pk} is {job.state_label.lower()}; only a running job reports checkpoints.")
    now = now or timezone.now()
    at = at or now
    if at > now:
        raise ValidationError({"at": ["A checkpoint cannot be in the future."]})
    if job.started_at is not None and at < job.started_at:
        raise ValidationError({"at": ["The checkpoint is older than the job's current attempt."]})
    with transaction.atomic():
        Job.objects.filter(pk=job.pk).update(last_checkpoint_at=at)
        job.last_checkpoint_at = at
        if token is not None:
            message = f"Checkpoint reported from inside the job, with its checkpoint token ({token.key_prefix}…)."
            data = {"at": at.isoformat(), "via": "token", "token": token.key_prefix}
        else:
            message = f"Checkpoint reported by {user.get_username()}."
            data = {"at": at.isoformat()}
        JobEvent.objects.create(job_id=job.pk, at=now, kind=EventKind.CHECKPOINT, message=message, data=data)
    return job


def min_runtime(team) -> int:
    return TeamPreemption.objects.filter(team=team).values_list("min_runtime_seconds", flat=True).first() or 0


def set_min_runtime(user, team, seconds) -> int:
    """A team's minimum runtime before any of its jobs may be preempted (leads and admins; 0: none). Audited."""
    if not team_services.can_manage_members(user, team):
        raise PermissionDenied("Only the team's leads and admins set its minimum runtime.")
    top = settings.PORTAL_MIN_RUNTIME_MAX
    if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= top:
        raise ValidationError({"min_runtime_seconds": [f"A whole number of seconds from 0 (none) to {top}."]})
    with transaction.atomic():
        row, _ = TeamPreemption.objects.select_for_update().get_or_create(team=team)
        before = row.min_runtime_seconds
        if before != seconds:
            row.min_runtime_seconds, row.updated_by = seconds, user
            row.save()
            audit.record(user, JobAuditAction.MIN_RUNTIME, team, object_repr=f"minimum runtime of {team.slug}",
                         before={"min_runtime_seconds": before}, after={"min_runtime_seconds": seconds},
                         team=team)  # fmt: skip
    return seconds
