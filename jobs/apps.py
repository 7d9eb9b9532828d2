from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs and notebooks"

    def ready(self):
        # Fill the seams the floors below leave for jobs (they never import this app).
        from accounts import audit, webhooks  # noqa: PLC0415 - these import models: loaded once the registry is ready
        from gpus import seams as inventory_seams  # noqa: PLC0415
        from telemetry import seams  # noqa: PLC0415

        from . import access, attribution, checks, inventory, webhook_events  # noqa: F401, PLC0415 - checks registers
        from .choices import JobAuditAction  # noqa: PLC0415

        audit.register_verbs(JobAuditAction)
        webhooks.register_events(webhook_events.EVENTS)
        seams.register(owners=attribution.owners_on, visible=access.job_visible)
        inventory_seams.register(claims=inventory.claims, describe_pods=inventory.describe_pods)
