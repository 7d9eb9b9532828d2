from django.db import models


class TelemetrySource(models.TextChoices):
    AGENT = "agent", "Node agent (NVML)"
    DCGM = "dcgm", "DCGM exporter"


class RollupPeriod(models.TextChoices):
    FIVE_MINUTES = "5m", "5 minutes"
    HOUR = "1h", "1 hour"
