"""/api/schema/: the OpenAPI document, generated once a process and kept as the bytes each format is sent as.

Generating walks every view and serializer of the API (about 5 s of CPU, more under load), and the document depends
only on the code and the settings, never on who asks or on anything in the database (drf-spectacular's
SERVE_PUBLIC: every operation, whoever asks). So the first request in a process generates it, under a lock so that
a burst of first requests waits for one generation, and every later request is sent the bytes rendered then: JSON
without indentation (what Swagger UI and generators ask for), YAML (the default). A browser that accepts gzip
(Swagger UI's does) gets it compressed; the document holds no secret, so compressing it leaks nothing.

A deploy starts new processes, and with them a new document; ``forget()`` drops it (tests that change the
settings the document reads)."""

from __future__ import annotations

import threading

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.renderers import OpenApiYamlRenderer
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView
from rest_framework.renderers import JSONRenderer

_lock = threading.Lock()
#: "document": the generated schema; "json", "yaml": its bytes as sent.
_held: dict = {}


def rendered(format_name: str) -> bytes:
    """The document as sent for ``format_name`` ("json" or "yaml"), generated and rendered on first use."""
    with _lock:
        if format_name not in _held:
            if "document" not in _held:
                _held["document"] = SchemaGenerator().get_schema(request=None, public=True)
            if format_name == "json":
                # No renderer context: compact JSON, without the indentation drf-spectacular's JSON renderer adds.
                _held[format_name] = JSONRenderer().render(_held["document"])
            else:
                _held[format_name] = OpenApiYamlRenderer().render(_held["document"])
        return _held[format_name]


def forget() -> None:
    """Drop the document this process holds; the next request generates it again."""
    with _lock:
        _held.clear()


class SchemaView(SpectacularAPIView):
    """drf-spectacular's schema view (its formats, content negotiation, authentication and permissions) sending the
    document this process generated once."""

    @extend_schema(exclude=True)
    def get(self, request, *args, **kwargs):
        renderer = request.accepted_renderer
        content_type = renderer.media_type + (f"; charset={renderer.charset}" if renderer.charset else "")
        response = HttpResponse(rendered(renderer.format), content_type=content_type)
        response["Content-Disposition"] = (
            f'inline; filename="{settings.SPECTACULAR_SETTINGS["TITLE"]}.{renderer.format}"'
        )
        return response
