"""The API's router (apart from bounds.py: DRF's settings import that module while rest_framework.views loads)."""

from rest_framework.routers import DefaultRouter

from .bounds import ID_PATTERN


class IdRouter(DefaultRouter):
    """A router whose detail URLs take ID_PATTERN unless a viewset sets ``lookup_value_regex``: "abc", "²" or
    a 20-digit id is a 404 at the URL, before any view or database sees it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._default_value_pattern = ID_PATTERN
