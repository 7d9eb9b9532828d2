"""bench/api_load.py's server settings: the production settings (portal.settings, unchanged) with the URLconf
bench/api_ceiling_urls.py, which adds one bench-only route (``GET /bench/ceiling/``) to the portal's own; the
product has no such route.

gunicorn loads it as ``DJANGO_SETTINGS_MODULE=api_ceiling`` with bench/ on PYTHONPATH, so the same two files
also serve an older checkout (``bench/api_load.py --root``).
"""

from portal.settings import *  # noqa: F403 - the production settings, as they are

ROOT_URLCONF = "api_ceiling_urls"
