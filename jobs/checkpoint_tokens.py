"""Checkpoint tokens: a job that declares ``"report": "token"`` reports its checkpoints with a token scoped to it.

The rule, in one place:
- When an attempt's workloads are created (``jobs.kinds.base.WorkloadKind.launch``), ``prepare`` mints a token for
  that job and that attempt (only its hash is stored: jobs.models.JobCheckpointToken, by the portal's one rule for
  bearer tokens) and puts it in a Secret of the team's namespace (``portal-checkpoint-<workload>``, key ``token``)
  before any workload exists, so no pod starts without it. Once the workloads exist, ``hand_over`` makes them the
  Secret's owners: Kubernetes' garbage collector deletes it with the last of them (a requeue, a cancel, the
  finished Job's TTL). The pods read the token through a secretKeyRef (jobs.render.checkpoint_spec); its value is
  never in the pod spec, the database, a log or a page.
- A token authenticates one request only: ``POST /api/v1/jobs/<its job>/checkpoint/`` (jobs.api.checkpoint_auth).
  ``find`` accepts it only while its job is active (admitted, running or being preempted), the attempt it was
  minted for is the job's current one and the job's owner may sign in: it stops the moment the job ends or is
  requeued, whether or not ``revoked_at`` has been written yet.
- ``revoked_at`` is the record: a new attempt's token revokes the job's earlier ones, and ``revoke`` (called by
  jobs.lifecycle when a job ends or is requeued) revokes the rest. A revoked token never works again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from jobs.choices import ACTIVE_STATES
from jobs.models import JobCheckpointToken
from jobs.render import (
    CHECKPOINT_SECRET_KEY,
    JOB_ID_LABEL,
    TEAM_LABEL,
    checkpoint_secret_name,
)

#: The value of ``checkpoint.report`` that asks for a token.
TOKEN = "token"
#: last_used_at is written at most this often per token.
LAST_USED_RESOLUTION = timedelta(minutes=1)


@dataclass(frozen=True)
class Prepared:
    """A minted token and the Secret it was put in (the plaintext lives only until the workloads own the Secret)."""

    token: JobCheckpointToken
    raw: str
    secret_name: str


def reports_by_token(job) -> bool:
    return (getattr(job, "checkpoint", None) or {}).get("report") == TOKEN


def _labels(job) -> dict[str, str]:
    return {TEAM_LABEL: job.team.slug, JOB_ID_LABEL: str(job.pk)}


def prepare(backend, job, now: datetime | None = None) -> Prepared | None:
    """For a job that reports by token: revoke its earlier attempts' tokens, mint one for this attempt and put it
    in the attempt's Secret (created or replaced). None for any other job. Raises what ``apply_secret`` raises."""
    if not reports_by_token(job):
        return None
    now = now or timezone.now()
    with transaction.atomic():
        JobCheckpointToken.objects.filter(job_id=job.pk, revoked_at__isnull=True).exclude(
            workload_name=job.workload_name
        ).update(revoked_at=now)
        token, raw = JobCheckpointToken.mint(job.pk, job.workload_name)
    name = checkpoint_secret_name(job.workload_name)
    backend.apply_secret(job.team.namespace, name, {CHECKPOINT_SECRET_KEY: raw}, labels=_labels(job))
    return Prepared(token, raw, name)


def owner_references(workloads: list[dict]) -> list[dict]:
    """The ownerReferences that make ``workloads`` (batch/v1 Jobs as the API server returned them) own an object."""
    return [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": w["metadata"]["name"],
            "uid": w["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
        for w in workloads
        if (w.get("metadata") or {}).get("uid")
    ]


def hand_over(backend, job, prepared: Prepared, workloads: list[dict]) -> None:
    """The attempt's workloads own its Secret from now on (deleted with the last of them)."""
    owners = owner_references(workloads)
    if owners:
        backend.apply_secret(job.team.namespace, prepared.secret_name, {CHECKPOINT_SECRET_KEY: prepared.raw},
                             labels=_labels(job), owners=owners)  # fmt: skip


def find(raw: str, now: datetime | None = None) -> JobCheckpointToken | None:
    """The token ``raw`` is, if it may report a checkpoint now (see the module's rule), with its job and owner;
    None otherwise. Notes its use (at most once a minute)."""
    token = JobCheckpointToken.matching(raw)
    if token is None:
        return None
    job = token.job
    if job.state not in ACTIVE_STATES or job.workload_name != token.workload_name or not job.owner.is_active:
        return None
    now = now or timezone.now()
    if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
        JobCheckpointToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now
    return token


def revoke(job, now: datetime | None = None) -> int:
    """Revoke every checkpoint token of ``job`` (it ended, or its attempt did); how many were still unrevoked.
    Nothing to do, and no query, for a job that does not report by token."""
    if not reports_by_token(job):
        return 0
    return JobCheckpointToken.objects.filter(job_id=job.pk, revoked_at__isnull=True).update(
        revoked_at=now or timezone.now()
    )
