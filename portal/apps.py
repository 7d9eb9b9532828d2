import os

from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal: teams, tokens and audit"

    def ready(self):
        # The embedded default keeps its SQLite file, broker queue and cluster state under DATA_DIR.
        from django.conf import settings

        from . import schema  # noqa: F401  (registers the bearer-token scheme with drf-spectacular)

        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        # WhiteNoise warns on every start when STATIC_ROOT is missing (the demo serves from the finders).
        os.makedirs(settings.STATIC_ROOT, exist_ok=True)
        if settings.CELERY_BROKER_URL.startswith("filesystem://"):
            for folder in settings.CELERY_BROKER_TRANSPORT_OPTIONS.values():
                if isinstance(folder, str):
                    os.makedirs(folder, exist_ok=True)
