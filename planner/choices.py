"""The planner's states and audit verbs, declared once (the models, the API, the pages and the client read them)."""

from django.db import models


class PlanState(models.TextChoices):
    """A plan run, in the order it happens (planner.tasks advances it)."""

    #: Saved and handed to a worker.
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    #: An admin asked it to stop; the worker stopped at its next check.
    CANCELLED = "cancelled", "Cancelled"


#: States a run can still leave (cancel applies to these).
ACTIVE_PLAN_STATES = (PlanState.QUEUED, PlanState.RUNNING)
TERMINAL_PLAN_STATES = (PlanState.SUCCEEDED, PlanState.FAILED, PlanState.CANCELLED)

#: The badge each state shows with (portal.css's badge colours).
PLAN_STATE_BADGES = {
    PlanState.QUEUED: "grey",
    PlanState.RUNNING: "blue",
    PlanState.SUCCEEDED: "green",
    PlanState.FAILED: "red",
    PlanState.CANCELLED: "amber",
}


class PlannerAuditAction(models.TextChoices):
    """Audit verbs of the planner (registered with core.audit in PlannerConfig.ready)."""

    PLAN_CREATE = "plan.create", "Capacity plan run started"
    PLAN_CANCEL = "plan.cancel", "Capacity plan run cancelled"
