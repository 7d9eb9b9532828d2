import os

from django.apps import AppConfig


class PortalConfig(AppConfig):
    """The roof: settings, URLs, the Celery app, the overview page and the demo seed compose the apps below it
    and own no models. Its label is ``shell`` because ``portal`` names the accounts app's tables (see
    accounts/apps.py)."""

    name = "portal"
    label = "shell"
    verbose_name = "Portal shell"

    def ready(self):
        # The embedded default keeps its SQLite file, broker queue and cluster state under DATA_DIR.
        from django.conf import settings  # noqa: PLC0415 - settings are read once the apps are loaded

        settings.DATA_DIR.mkdir(parents=True, exist_ok=True)
        # WhiteNoise warns on every start when STATIC_ROOT is missing (the demo serves from the finders).
        os.makedirs(settings.STATIC_ROOT, exist_ok=True)
        if settings.CELERY_BROKER_URL.startswith("filesystem://"):
            for folder in settings.CELERY_BROKER_TRANSPORT_OPTIONS.values():
                if isinstance(folder, str):
                    os.makedirs(folder, exist_ok=True)
