"""Utilisation telemetry: raw samples, rollups and the node agents' tokens.

The tables keep the names they had when these models lived in the ``gpus`` app (``gpus_gpusample`` …): the
re-floor moved the code, not the rows.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from accounts.models import hash_token, mint_token, token_matches, token_prefix
from gpus.models import settings_cluster_pk

from .choices import RollupPeriod, TelemetrySource


class GpuSample(models.Model):
    """One reading of one GPU (``gpu_instance_id`` null) or one MIG instance of it. Kept
    ``PORTAL_TELEMETRY_RAW_DAYS`` days; older data lives on in GpuRollup."""

    ts = models.DateTimeField()
    #: The cluster of ``node_name`` (node names are unique per cluster only): telemetry.samples.store always sets it
    #: (no per-row default: that would ask the database once per row). Kept, emptied, when the cluster is removed:
    #: its teams' history still counts.
    cluster = models.ForeignKey("gpus.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=64)
    gpu_index = models.PositiveSmallIntegerField(null=True, blank=True)
    gpu_instance_id = models.PositiveSmallIntegerField(null=True, blank=True)
    mig_profile = models.CharField(max_length=30, blank=True)
    #: Share of the physical GPU this reading covers: 1 for a whole GPU, compute slices / 7 for a MIG instance.
    weight = models.FloatField(default=1.0)
    #: The workload this reading belongs to, as the jobs layer attributed it (telemetry.attribution); an id, not
    #: a foreign key: telemetry sits below jobs and never imports it.
    job_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    team = models.ForeignKey("portal.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    util_pct = models.FloatField(null=True, blank=True)
    mem_used_mb = models.PositiveIntegerField(null=True, blank=True)
    mem_total_mb = models.PositiveIntegerField(null=True, blank=True)
    power_w = models.FloatField(null=True, blank=True)
    #: The GPU's energy counter as read (DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION or NVML's total energy: millijoules
    #: since the driver loaded); whole GPUs only.
    energy_mj = models.BigIntegerField(null=True, blank=True)
    #: Joules this row's GPU (or this MIG instance's share of its GPU) drew since the GPU's previous reading
    #: (telemetry.samples.fill_energy); None where that cannot be known.
    energy_j = models.FloatField(null=True, blank=True)
    temp_c = models.FloatField(null=True, blank=True)
    source = models.CharField(max_length=8, choices=TelemetrySource.choices)

    class Meta:
        db_table = "gpus_gpusample"
        indexes = [
            models.Index(fields=["gpu_uuid", "ts"], name="sample_gpu_ts"),
            models.Index(fields=["node_name", "ts"], name="sample_node_ts"),
            models.Index(fields=["job_id", "ts"], name="sample_job_ts"),
            models.Index(fields=["team", "ts"], name="sample_team_ts"),
            models.Index(fields=["ts"], name="sample_ts"),
        ]

    def __str__(self) -> str:
        return f"{self.node_name}/{self.gpu_uuid}@{self.ts:%Y-%m-%dT%H:%M:%S}"


class GpuRollup(models.Model):
    """Samples of one GPU or MIG instance (and the job on it) over one period: kept a year by default."""

    period = models.CharField(max_length=2, choices=RollupPeriod.choices)
    start = models.DateTimeField()
    #: As GpuSample.cluster (telemetry.samples.rollup copies it).
    cluster = models.ForeignKey("gpus.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    node_name = models.CharField(max_length=253)
    gpu_uuid = models.CharField(max_length=64)
    gpu_instance_id = models.PositiveSmallIntegerField(null=True, blank=True)
    mig_profile = models.CharField(max_length=30, blank=True)
    weight = models.FloatField(default=1.0)
    #: The workload this reading belongs to, as the jobs layer attributed it (telemetry.attribution); an id, not
    #: a foreign key: telemetry sits below jobs and never imports it.
    job_id = models.BigIntegerField(null=True, blank=True, db_index=True)
    team = models.ForeignKey("portal.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    samples = models.PositiveIntegerField()
    util_avg = models.FloatField(null=True, blank=True)
    util_max = models.FloatField(null=True, blank=True)
    mem_used_avg_mb = models.FloatField(null=True, blank=True)
    power_avg_w = models.FloatField(null=True, blank=True)
    #: Σ of the samples' ``energy_j``: joules drawn in the period (None: no sample knew).
    energy_j = models.FloatField(null=True, blank=True)

    class Meta:
        db_table = "gpus_gpurollup"
        indexes = [
            models.Index(fields=["period", "gpu_uuid", "start"], name="rollup_gpu_start"),
            models.Index(fields=["period", "node_name", "start"], name="rollup_node_start"),
            models.Index(fields=["period", "job_id", "start"], name="rollup_job_start"),
            models.Index(fields=["period", "team", "start"], name="rollup_team_start"),
            models.Index(fields=["period", "start"], name="rollup_start"),
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.gpu_uuid}@{self.start:%Y-%m-%dT%H:%M}"


class RollupWatermark(models.Model):
    """Rollups exist for every period that ends at or before ``done_until`` (one row per period)."""

    period = models.CharField(max_length=2, choices=RollupPeriod.choices, unique=True)
    done_until = models.DateTimeField()

    class Meta:
        db_table = "gpus_rollupwatermark"

    def __str__(self) -> str:
        return f"{self.period} rolled up until {self.done_until:%Y-%m-%dT%H:%M}"


class NodeAgentToken(models.Model):
    """The credential one node's agent posts samples with: ``gpa_<prefix>_<secret>``, stored hashed. It may
    write samples for node ``node_name`` of ``cluster`` only (node names are unique per cluster)."""

    PREFIX = "gpa"

    cluster = models.ForeignKey(
        "gpus.Cluster", on_delete=models.CASCADE, related_name="agent_tokens", default=settings_cluster_pk
    )
    node_name = models.CharField(max_length=253)
    key_prefix = models.CharField(max_length=12, unique=True, editable=False)
    key_hash = models.CharField(max_length=64, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "gpus_nodeagenttoken"
        ordering = ["cluster", "node_name", "-created_at"]

    def __str__(self) -> str:
        return f"{self.node_name} ({self.key_prefix}…)"

    @classmethod
    def issue(cls, node_name: str, user=None, cluster_id: int | None = None) -> tuple[NodeAgentToken, str]:
        """A new token for node ``node_name`` of cluster ``cluster_id`` (the cluster configured in settings when
        None)."""
        prefix, raw = mint_token(cls.PREFIX)
        token = cls.objects.create(
            cluster_id=cluster_id or settings_cluster_pk(), node_name=node_name, key_prefix=prefix,
            key_hash=hash_token(raw), created_by=user,
        )  # fmt: skip
        return token, raw

    @classmethod
    def find(cls, raw: str) -> NodeAgentToken | None:
        prefix = token_prefix(raw, cls.PREFIX)
        if prefix is None:
            return None
        token = cls.objects.filter(key_prefix=prefix, revoked_at__isnull=True).select_related("cluster").first()
        if token is None or not token_matches(token.key_hash, raw):
            return None
        return token
