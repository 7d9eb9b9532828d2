"""Inference services: long-running GPU deployments (issue 13). The spec every replica runs (image, command,
env, secrets, volumes, class, GPUs/CPU/memory per replica, priority) lives on the service's Job row (kind
``service``), so admission, quota and the job timeline treat the service's replicas as they treat any job; this
row holds what only a service has: its port, probes, replica bounds, autoscaling metric, the replicas the
portal has granted it within quota, rollout history and what the cluster last showed of it."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from jobs.choices import ServiceMetric, ServiceState


class InferenceService(models.Model):
    team = models.ForeignKey("portal.Team", on_delete=models.PROTECT, related_name="inference_services")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="inference_services")
    #: A DNS label: the Deployment, Service and HPA are named after it in the team's namespace.
    name = models.CharField(max_length=40)
    #: The Job row (kind=service) that holds the replica spec and goes through admission for min_replicas.
    job = models.OneToOneField("Job", on_delete=models.PROTECT, related_name="inference_service")
    state = models.CharField(max_length=10, choices=ServiceState.choices, default=ServiceState.ACTIVE)

    #: The container port the Service forwards to.
    port = models.PositiveIntegerField(default=8000)
    #: {"type": "http"|"tcp", "path": "/health" (http only), "port": int, "initial_delay_seconds": int,
    #: "period_seconds": int}; {} for none. The readiness probe gates traffic and rollouts.
    readiness = models.JSONField(default=dict, blank=True)
    #: Same shape; {} for none. A failing liveness probe restarts the container.
    liveness = models.JSONField(default=dict, blank=True)

    min_replicas = models.PositiveSmallIntegerField(default=1)
    max_replicas = models.PositiveSmallIntegerField(default=1)
    metric = models.CharField(max_length=10, choices=ServiceMetric.choices, default=ServiceMetric.CPU)
    #: The custom/external metric's name (blank for cpu).
    metric_name = models.CharField(max_length=253, blank=True)
    #: Target: CPU utilisation % for cpu, else the metric's target average value per replica.
    metric_target = models.FloatField(default=70.0)

    #: Replicas the portal has granted within quota and capacity: the HPA's maxReplicas (min_replicas once the
    #: minimum is admitted; raised and lowered by the cycle). 0 while the minimum waits for admission.
    granted_replicas = models.PositiveSmallIntegerField(default=0)
    #: Of the granted replicas, how many are above the team's guarantee (borrowed, reclaimable).
    borrowed_replicas = models.PositiveSmallIntegerField(default=0)
    #: The replicas granted above the minimum, one entry each, oldest first: {"node": the node whose capacity the
    #: portal reserved for it, "borrowed": above the team's guarantee (reclaimable), "at": ISO time granted}. The
    #: minimum's nodes are its job's node_name/node_names. granted_replicas = min_replicas + len(replica_slots)
    #: while the minimum is admitted (jobs.service.follow keeps them in step).
    replica_slots = models.JSONField(default=list, blank=True)

    #: The Deployment revision the portal last rolled out (1 at creation), and the spec it replaced (for
    #: rollback): {"image", "command", "args", "env", "secret_env", "count", "cpu_millicores", "memory_mb"}.
    revision = models.PositiveIntegerField(default=1)
    previous_spec = models.JSONField(default=dict, blank=True)

    #: What the cluster last showed: {"replicas", "updated", "ready", "available", "desired" (HPA), "restarts",
    #: "last_probe_failure", "conditions": [...], "replica_pods": [{"pod", "node", "ready", "restarts"}]}.
    observed = models.JSONField(default=dict, blank=True)
    observed_at = models.DateTimeField(null=True, blank=True)
    #: Set while every replica's GPUs have been under the idle threshold: since when (for the "lower the
    #: minimum" suggestion after a day; services are never culled).
    idle_since = models.DateTimeField(null=True, blank=True)

    created = models.DateTimeField(default=timezone.now)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["team", "name"], condition=~Q(state=ServiceState.STOPPED), name="unique_live_service_name"
            ),
            models.CheckConstraint(condition=Q(min_replicas__gte=1), name="service_min_replicas_gte_1"),
            models.CheckConstraint(condition=Q(max_replicas__gte=models.F("min_replicas")), name="service_max_gte_min"),
        ]
        indexes = [models.Index(fields=["state"])]

    def __str__(self) -> str:
        return f"service {self.name} ({self.team_id})"

    def get_absolute_url(self) -> str:
        try:
            return reverse("jobs:service-detail", args=[self.pk])
        except NoReverseMatch:  # the pages arrive with the service views
            return self.job.get_absolute_url()

    @property
    def is_live(self) -> bool:
        return self.state != ServiceState.STOPPED
