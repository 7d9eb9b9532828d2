"""States and kinds of the inventory, declared once with the labels and badge colours the UI shows."""

from django.db import models


class NodeHealth(models.TextChoices):
    HEALTHY = "healthy", "Healthy"
    WARNING = "warning", "Needs attention"
    ERROR = "error", "Broken"
    NO_GPU = "no-gpu", "No GPUs"
    GONE = "gone", "Gone"


NODE_HEALTH_BADGE = {
    NodeHealth.HEALTHY: "green",
    NodeHealth.WARNING: "amber",
    NodeHealth.ERROR: "red",
    NodeHealth.NO_GPU: "grey",
    NodeHealth.GONE: "grey",
}


class ResourceKind(models.TextChoices):
    GPU = "gpu", "Whole GPU"
    MIG = "mig", "MIG partition"
    SHARED = "shared", "Time-sliced share"


RESOURCE_KIND_BADGE = {ResourceKind.GPU: "blue", ResourceKind.MIG: "violet", ResourceKind.SHARED: "teal"}


class SharingMode(models.TextChoices):
    EXCLUSIVE = "exclusive", "Whole GPU"
    MIG = "mig", "MIG partitioned"
    TIME_SLICED = "time-sliced", "Time-sliced"


class MigStrategy(models.TextChoices):
    NONE = "none", "None"
    SINGLE = "single", "Single"
    MIXED = "mixed", "Mixed"
