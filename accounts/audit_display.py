"""How the audit log page shows an event: its object as a link to the object's page, and its change as the fields
that changed, each "before → after" in words, instead of the stored JSON.

* **Links.** An object links to its page when its model has one (``get_absolute_url``, Django's convention, which
  the admin's "View on site" uses too) and the object still exists. The page is for admins, who may open every
  object's page; the objects of a page of events are read with one query per kind of object.
* **Changes.** Before and after are flattened into fields; a nested object's fields are named by their path
  ("labels › nvidia.com/mig.config"). When both sides are there, only the fields that differ are listed; when only
  one is (something made, or removed), its fields are. The first ``SHOWN_FIELDS`` are shown, the rest fold.
  Values read as people write them: yes/no, — for none, lists joined by commas, long text cut (the full value in
  the title, and in the CSV export, which keeps the JSON).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.core.exceptions import ValidationError

#: Fields of a change shown before the rest fold away.
SHOWN_FIELDS = 4
#: Characters of a value shown; the full value is in the title.
VALUE_CHARS = 120
PATH_SEPARATOR = " › "
_ABSENT = object()


@dataclass(frozen=True)
class FieldChange:
    field: str
    before: str | None  # None: the field was not there
    after: str | None
    before_full: str = ""
    after_full: str = ""


@dataclass(frozen=True)
class Change:
    shown: list[FieldChange]
    folded: list[FieldChange]
    unchanged: bool  # both sides recorded, and no field differs


def _flat(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, inner in value.items():
            out |= _flat(inner, f"{path}{PATH_SEPARATOR}{key}" if path else str(key))
        return out
    return {path or "value": value}


def words(value: Any) -> str:
    """A stored value as a person reads it."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if value == "":
        return "(blank)"
    if isinstance(value, dict | list) and not value:
        return "(none)"
    if isinstance(value, list) and all(not isinstance(item, dict | list) for item in value):
        return ", ".join(words(item) for item in value)
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return str(value)


def _cut(text: str) -> str:
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


def change(before: Any, after: Any) -> Change:
    """The fields an event changed, before → after."""
    old = _flat(before) if before is not None else {}
    new = _flat(after) if after is not None else {}
    both = before is not None and after is not None
    lines = []
    for field in [*old, *(key for key in new if key not in old)]:
        was, now = old.get(field, _ABSENT), new.get(field, _ABSENT)
        if both and was == now and type(was) is type(now):
            continue
        was_text = None if was is _ABSENT else words(was)
        now_text = None if now is _ABSENT else words(now)
        lines.append(
            FieldChange(
                field=field,
                before=None if was_text is None else _cut(was_text),
                after=None if now_text is None else _cut(now_text),
                before_full=was_text or "",
                after_full=now_text or "",
            )
        )
    return Change(shown=lines[:SHOWN_FIELDS], folded=lines[SHOWN_FIELDS:], unchanged=both and not lines)


def object_links(events) -> dict[int, str]:
    """Event id -> the URL of its object's page, for the events whose object has a page and still exists."""
    wanted: dict[str, dict[int, Any]] = defaultdict(dict)
    models = {}
    for event in events:
        if event.object_type not in models:
            try:
                models[event.object_type] = apps.get_model(event.object_type)
            except (LookupError, ValueError):
                models[event.object_type] = None
        model = models[event.object_type]
        if model is None or not hasattr(model, "get_absolute_url"):
            continue
        try:
            wanted[event.object_type][event.pk] = model._meta.pk.to_python(event.object_id)
        except ValidationError:
            continue  # an id that cannot be this model's (a row recorded by hand, or of a retired kind)
    links = {}
    for label, pks in wanted.items():
        # select_related(): a page's URL may name a related object (a quota's team), read in the same query.
        found = models[label]._default_manager.select_related().in_bulk(set(pks.values()))
        for event_id, pk in pks.items():
            if pk in found:
                links[event_id] = found[pk].get_absolute_url()
    return links
