from django.apps import AppConfig


class GpusConfig(AppConfig):
    name = "gpus"
    verbose_name = "GPU inventory"

    def ready(self):
        from accounts import audit  # noqa: PLC0415 - audit imports models, loaded once the registry is ready

        from .choices import InventoryAuditAction  # noqa: PLC0415 - same reason

        audit.register_verbs(InventoryAuditAction)
