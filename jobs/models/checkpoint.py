"""The token a job reports its checkpoints with (jobs.checkpoint_tokens): scoped to one job, one attempt and one
action, stored as a hash by the portal's one rule for bearer tokens (accounts.models.mint_token, token_matches)."""

from __future__ import annotations

from django.db import models
from django.utils import timezone

from accounts.models import hash_token, mint_token, token_matches, token_prefix


class JobCheckpointToken(models.Model):
    """``Authorization: Bearer gpc_<prefix>_<secret>`` reports a checkpoint of ``job`` and does nothing else.

    Minted when an attempt's workload is created (``workload_name`` names the attempt) and handed to its pods
    through a Kubernetes Secret; it works only while ``job`` is active and that attempt is its current one
    (jobs.checkpoint_tokens.find), so it stops the moment the job ends or is requeued. ``revoked_at`` records when
    the portal noted that (or replaced it); a revoked token never works again."""

    PREFIX = "gpc"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="checkpoint_tokens")
    workload_name = models.CharField(max_length=63, help_text="The attempt the token belongs to.")
    key_prefix = models.CharField(max_length=12, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["job", "revoked_at"], name="jobs_ckpt_token_job")]

    def __str__(self) -> str:
        return f"checkpoint token of job #{self.job_id} ({self.key_prefix}…)"

    @classmethod
    def mint(cls, job_id: int, workload_name: str) -> tuple[JobCheckpointToken, str]:
        """A new token for the attempt ``workload_name`` of job ``job_id``, with its plaintext (never stored)."""
        prefix, raw = mint_token(cls.PREFIX)
        token = cls.objects.create(
            job_id=job_id, workload_name=workload_name, key_prefix=prefix, key_hash=hash_token(raw)
        )
        return token, raw

    @classmethod
    def matching(cls, raw: str) -> JobCheckpointToken | None:
        """The unrevoked token ``raw`` is, with its job, its team and its owner; None for anything else (whether
        its job may still use it is jobs.checkpoint_tokens.find's question)."""
        prefix = token_prefix(raw, cls.PREFIX)
        if prefix is None:
            return None
        token = (
            cls.objects.filter(key_prefix=prefix, revoked_at__isnull=True)
            .select_related("job", "job__owner", "job__team")
            .first()
        )
        if token is None or not token_matches(token.key_hash, raw):
            return None
        return token
