from django.apps import AppConfig


class GpusConfig(AppConfig):
    name = "gpus"
    verbose_name = "GPU inventory"

    def ready(self):
        from core import audit, webhooks  # noqa: PLC0415 - audit imports models, loaded once the registry is ready

        from . import webhook_events  # noqa: PLC0415 - same reason
        from .choices import InventoryAuditAction  # noqa: PLC0415 - same reason

        audit.register_verbs(InventoryAuditAction)
        webhooks.register_events(webhook_events.EVENTS)
