"""Reading a job or notebook spec from a YAML or JSON file, every problem with the file reported at once. The
fields themselves are checked by the portal (its 400 names each field); the file only has to be an object."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError


def load_spec(path: str | Path) -> dict[str, Any]:
    """The spec in ``path`` (``-`` is standard input is handled by the CLI): JSON for *.json, else YAML (which
    reads JSON too)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(str(path), ["no such file"]) from None
    except (OSError, UnicodeDecodeError) as error:
        raise SpecError(str(path), [f"cannot be read: {error}"]) from None
    return parse_spec(text, str(path), as_json=path.suffix.lower() == ".json")


def parse_spec(text: str, name: str = "<spec>", *, as_json: bool = False) -> dict[str, Any]:
    try:
        data = json.loads(text) if as_json else yaml.safe_load(text)
    except json.JSONDecodeError as error:
        raise SpecError(name, [f"not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}"]) from None
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise SpecError(name, [f"not valid YAML{where}: {problem}"]) from None
    if not isinstance(data, dict):
        found = "nothing" if data is None else type(data).__name__
        raise SpecError(name, [f"must hold an object of the job's fields (name: ..., image: ...), not {found}"])
    problems = [f"field names must be text, not {key!r}" for key in data if not isinstance(key, str)]
    if problems:
        raise SpecError(name, problems)
    return data
