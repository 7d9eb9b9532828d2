"""The portal's OpenAPI schema, generated once a test session: generating it walks every view and serializer of the
API (tens of seconds on a busy machine), and a dozen tests across the apps read it."""

from __future__ import annotations

import functools
import json
import tempfile
from pathlib import Path


@functools.cache
def _schema_json() -> str:
    from django.core.management import call_command

    with tempfile.TemporaryDirectory() as where:
        out = Path(where) / "schema.json"
        # What `manage.py spectacular --validate --fail-on-warn` checks: a warning or an invalid schema fails here.
        call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", "--file", str(out))
        return out.read_text()


def openapi_schema() -> dict:
    """The schema /api/schema/ serves (tests/unit/accounts/test_schema.py holds the two equal), as a fresh dict."""
    return json.loads(_schema_json())
