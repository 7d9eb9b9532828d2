from django.db import models


class TelemetrySource(models.TextChoices):
    AGENT = "agent", "Node agent (NVML)"
    DCGM = "dcgm", "DCGM exporter"


class RollupPeriod(models.TextChoices):
    FIVE_MINUTES = "5m", "5 minutes"
    HOUR = "1h", "1 hour"


class TelemetryAuditAction(models.TextChoices):
    """Audit verbs of telemetry (registered with core.audit in TelemetryConfig.ready)."""

    AGENT_TOKEN_ISSUE = "agent_token.issue", "Node agent token issued"
    AGENT_TOKEN_REVOKE = "agent_token.revoke", "Node agent token revoked"
