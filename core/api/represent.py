"""A read-only serializer's answer for many rows, the same dict DRF's ``Serializer.to_representation`` makes, for
less CPU.

Why it exists (issue 30, item 5): for a page of 20 jobs DRF calls each of ~57 fields' ``get_attribute`` (its
source walk, a ``Mapping`` test, a callable test, its exception handling) and ``to_representation`` 1,140 times;
that was about 40% of a job list's CPU (``bench/api_cpu.py --profile list``), and the list's CPU a request was
1.5× the release before this one's, whose answers skipped those calls by copying DRF's fields with private
constructors. A before/after run of ``bench/api_load.py`` in one sitting showed it was still needed
(docs/benchmarks.md, section 0).

What it does, through DRF's public field API only (``Serializer.fields``, ``Field.source``, ``write_only``,
``get_attribute``, ``to_representation``, ``choices``) and DRF's documented ``to_representation`` contract:

- A field whose value is one attribute of the row (its ``source`` has no dot and is not ``*``) and which keeps
  ``Field.get_attribute`` as DRF defines it is read with ``getattr``. Anything else (a dotted source, a related
  field's own ``get_attribute``, a method field) goes through the field's ``get_attribute`` as DRF's loop does.
- ``None`` answers ``None`` without ``to_representation``, as DRF's loop does.
- A value whose exact type the field's own ``to_representation`` returns unchanged is answered as it is: a ``str``
  for a ``CharField``, an ``int`` for an ``IntegerField``, a ``float`` for a ``FloatField``, a ``bool`` for a
  ``BooleanField``, a ``str`` for a ``ChoiceField`` whose choices are strings, a ``dict``, ``list``, ``str``,
  number or ``bool`` for a non-binary ``JSONField``. A field qualifies by its method being DRF's own for that
  class: a subclass that overrides ``to_representation`` gets it called. Every other value goes to the field's
  ``to_representation``.
- An attribute that raises AttributeError or ObjectDoesNotExist, or whose value is callable (DRF calls a method
  source), goes the whole DRF way; any other error is raised, as DRF raises it.

tests/unit/core/test_represent.py holds it equal to ``to_representation`` field class by field class, value kind
by value kind; the job answers' tests hold it equal on jobs of every kind and state.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ObjectDoesNotExist
from rest_framework import serializers
from rest_framework.fields import Field, SkipField
from rest_framework.relations import PKOnlyObject

#: Field classes whose own ``to_representation`` gives back a value of these exact types unchanged.
_SAME = {
    serializers.CharField.to_representation: frozenset({str}),
    serializers.IntegerField.to_representation: frozenset({int}),
    serializers.FloatField.to_representation: frozenset({float}),
    serializers.BooleanField.to_representation: frozenset({bool}),
}


#: What a JSON column holds.
_JSON = frozenset({dict, list, str, int, float, bool})


def _kept_types(field: Field) -> frozenset:
    """The exact value types ``field.to_representation`` returns unchanged (none: an empty set)."""
    method = type(field).to_representation
    if method is serializers.JSONField.to_representation:
        return frozenset() if field.binary else _JSON
    if method is serializers.ChoiceField.to_representation:
        return frozenset({str}) if all(type(key) is str for key in field.choices) else frozenset()
    return _SAME.get(method, frozenset())


class Representer:
    """``Representer(serializer)(instance)`` equals ``serializer.to_representation(instance)`` for a bound,
    read-only use of ``serializer`` (one kept for the process: its fields are not changed after)."""

    def __init__(self, serializer: serializers.Serializer):
        self.plan = []
        for name, field in serializer.fields.items():
            if field.write_only:
                continue
            source = field.source
            plain = source != "*" and "." not in source and type(field).get_attribute is Field.get_attribute
            self.plan.append((name, source if plain else None, field, _kept_types(field)))

    def __call__(self, instance) -> dict:
        answer = {}
        mapping = isinstance(instance, Mapping)  # DRF reads a mapping's keys, not its attributes
        for name, attribute, field, kept in self.plan:
            if attribute is None or mapping:
                self._field(answer, name, field, instance)
                continue
            try:
                value = getattr(instance, attribute)
            except (AttributeError, ObjectDoesNotExist):  # what the field's get_attribute decides about
                self._field(answer, name, field, instance)
                continue
            if value is None:
                answer[name] = None
            elif type(value) in kept:
                answer[name] = value
            elif callable(value):
                self._field(answer, name, field, instance)
            else:
                answer[name] = field.to_representation(value)
        return answer

    @staticmethod
    def _field(answer: dict, name: str, field: Field, instance) -> None:
        """One field the way DRF's ``Serializer.to_representation`` answers it."""
        try:
            value = field.get_attribute(instance)
        except SkipField:
            return
        check = value.pk if isinstance(value, PKOnlyObject) else value
        answer[name] = None if check is None else field.to_representation(value)
