"""A plan run: one replay of a window of history against proposals, done in the background (planner.tasks) and
kept with its results. The row is the run's whole lifecycle: queued → running → succeeded / failed / cancelled,
with progress and a message the page polls, and the engine's result dict kept as it came."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse

from .choices import ACTIVE_PLAN_STATES, PLAN_STATE_BADGES, PlanState


class PlanRun(models.Model):
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    #: The cluster of the fleet the replay is limited to (its name, kept as text so a run outlives the cluster's
    #: registration); "" for the whole fleet.
    cluster = models.CharField(max_length=63, blank=True, default="")
    #: The proposals as submitted (validated): [{"name": ..., "cluster": ..., "changes": [{"type": ..., ...}, ...]},
    #: ...]; a proposal stored without "cluster" (before the fleet) is for the default cluster.
    proposals = models.JSONField(default=list)
    #: The engine's options as submitted: {"preemption": bool, "borrowing": bool, "suggest": int}.
    options = models.JSONField(default=dict)
    state = models.CharField(max_length=20, choices=PlanState.choices, default=PlanState.QUEUED, db_index=True)
    #: 0..1, with what the engine is doing now (written throttled by the task).
    progress = models.FloatField(default=0.0)
    message = models.CharField(max_length=300, blank=True)
    #: An admin asked it to stop; the task reads this now and then and stops the engine.
    cancel_requested = models.BooleanField(default=False)
    #: The engine's result dict, as it returned it (planner.engine.run_plan).
    results = models.JSONField(null=True, blank=True)
    #: Why it failed, in a sentence for people.
    error = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"Plan run #{self.pk}"

    def get_absolute_url(self) -> str:
        return reverse("planner:run-detail", args=[self.pk])

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_PLAN_STATES

    @property
    def badge(self) -> str:
        return PLAN_STATE_BADGES.get(self.state, "grey")

    @property
    def scope(self) -> str:
        """What the run replays, in words."""
        return f"cluster {self.cluster}" if self.cluster else "the whole fleet"

    @property
    def proposal_names(self) -> list[str]:
        return [str(p.get("name", "")) for p in self.proposals or [] if isinstance(p, dict)]
