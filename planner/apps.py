from django.apps import AppConfig


class PlannerConfig(AppConfig):
    name = "planner"
    verbose_name = "Capacity planner"

    def ready(self):
        from core import audit  # noqa: PLC0415 - imports models: loaded once the registry is ready

        from .choices import PlannerAuditAction  # noqa: PLC0415

        audit.register_verbs(PlannerAuditAction)
