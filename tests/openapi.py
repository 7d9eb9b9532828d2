"""The portal's OpenAPI schema, generated once a test run: generating it walks every view and serializer of the
API (tens of seconds on a busy machine), and a dozen tests across the apps read it. Under pytest-xdist the first
worker to need it generates it and the others read its copy (tests/conftest.py names the run's shared folder in
``SHARED_DIR``; the folder goes with the run)."""

from __future__ import annotations

import fcntl
import functools
import json
import os
import tempfile
from pathlib import Path

#: The environment variable naming a folder the test processes of one run share (set by the controller).
SHARED_DIR = "GPU_PORTAL_TESTS_SHARED"


def _generate() -> str:
    from django.core.management import call_command

    with tempfile.TemporaryDirectory() as where:
        out = Path(where) / "schema.json"
        # What `manage.py spectacular --validate --fail-on-warn` checks: a warning or an invalid schema fails here.
        call_command("spectacular", "--validate", "--fail-on-warn", "--format", "openapi-json", "--file", str(out))
        return out.read_text()


@functools.cache
def _schema_json() -> str:
    shared = os.environ.get(SHARED_DIR)
    if not shared or not Path(shared).is_dir():
        return _generate()
    path = Path(shared) / "openapi.json"
    with open(Path(shared) / "openapi.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the others wait while one generates
        if not path.exists():
            path.write_text(_generate())
        return path.read_text()


def openapi_schema() -> dict:
    """The schema /api/schema/ serves (tests/unit/accounts/test_schema.py holds the two equal), as a fresh dict."""
    return json.loads(_schema_json())
