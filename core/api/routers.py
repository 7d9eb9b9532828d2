"""The API's router (apart from bounds.py: DRF's settings import that module while rest_framework.views loads)."""

from rest_framework.routers import DefaultRouter


class IdRouter(DefaultRouter):
    """A router whose detail URLs take Django's ``int`` path converter (ASCII digits) unless a viewset names its
    own ``lookup_value_converter``: "abc" or "²" is a 404 at the URL, before any view or database sees it, and the
    schema types every id as an integer. No ``.json`` suffix routes: ``?format=`` picks a format, and the
    suffix twins would each be a second operation in the schema."""

    include_format_suffixes = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, use_regex_path=False, **kwargs)
        self._default_value_pattern = "int"
