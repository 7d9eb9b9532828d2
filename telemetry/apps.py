from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry: GPU utilisation"

    def ready(self):
        from core import audit  # noqa: PLC0415 - these import models: loaded once the registry is ready
        from gpus import pages as inventory_pages  # noqa: PLC0415

        from . import pages, schema  # noqa: F401, PLC0415 - imports models; schema registers the agent token scheme
        from .choices import TelemetryAuditAction  # noqa: PLC0415

        audit.register_verbs(TelemetryAuditAction)
        inventory_pages.extend_node_list(pages.node_list_sparklines)
        inventory_pages.extend_node_detail(pages.node_detail_charts)
        inventory_pages.extend_cluster_detail(pages.cluster_chart)
