from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    verbose_name = "Telemetry: GPU utilisation"

    def ready(self):
        from gpus import pages as inventory_pages  # noqa: PLC0415 - app registry must be ready first

        from . import pages, schema  # noqa: F401, PLC0415 - imports models; schema registers the agent token scheme

        inventory_pages.extend_node_list(pages.node_list_sparklines)
        inventory_pages.extend_node_detail(pages.node_detail_charts)
