from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "jobs"
    verbose_name = "Jobs and notebooks"

    def ready(self):
        # Fill the seams the floors below leave for jobs (they never import this app).
        from telemetry import seams  # noqa: PLC0415 - app registry must be ready before models load

        from . import attribution  # noqa: PLC0415 - imports models

        seams.register(owners=attribution.owners_on, visible=attribution.visible)
