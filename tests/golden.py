"""Golden files (tests/unit/jobs/golden): rendered objects, as YAML, compared with the copy a person reviewed.
UPDATE_GOLDEN=1 writes the copy instead; review its diff before committing it."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

GOLDEN = Path(__file__).parent / "unit" / "jobs" / "golden"


def assert_golden(name: str, objects: list[dict]) -> None:
    """``objects`` dumped as YAML documents equal the golden file ``name``."""
    text = yaml.safe_dump_all(objects, sort_keys=True)
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"rendered objects differ from {path}"
