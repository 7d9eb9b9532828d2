"""DRF serializers kept for the process, and the answers made with them: the API's performance code for DRF, in
one module, through DRF's public API only (issue 30, item 5). Each class says what it saves and how it was
measured; ``bench/api_cpu.py`` (``--profile KIND``, ``--against ROOT``) measures them.

- ``FieldsBuiltOnce``: a ModelSerializer's fields built from the model once per class, each instance deep copies.
- ``KeptAnswers``: a model's answers through one read-only serializer instance kept for the process.
- ``KeptChecks``: valid requests checked by kept instances (``run_validation``), one request at a time each.
- ``Representer``: a read-only serializer's answer for a row, the dict DRF's ``Serializer.to_representation``
  makes, for less CPU.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping

from django.core.exceptions import ObjectDoesNotExist
from rest_framework import serializers
from rest_framework.fields import Field, SkipField
from rest_framework.relations import PKOnlyObject
from rest_framework.reverse import reverse

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
    read-only use of ``serializer`` (one kept for the process: its fields are not changed after).

    Why it exists (issue 30, item 5): for a page of 20 jobs DRF's loop calls each of ~57 fields' ``get_attribute``
    (its source walk, a ``Mapping`` test, a callable test, its exception handling) and ``to_representation``: about
    40% of a job list's profiled CPU (``bench/api_cpu.py --profile list``). The release before the renovation
    (ffb770a) skipped those calls by copying DRF's fields with private constructors; without either, the mix's CPU
    a request relative to the bare-DRF ceiling's was worse than ffb770a's in the issue's bench. A page of 20 jobs
    alone, one process, DRF's loop and this one alternating 25 times: 2.99 → 1.53 ms of CPU (docs/benchmarks.md,
    section 0, has the sittings).

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
    - A serializer whose class overrides ``to_representation`` is answered by its own method.

    tests/unit/core/test_represent.py holds it equal to ``to_representation`` field class by field class, value kind
    by value kind; the job answers' tests hold it equal on jobs of every kind and state.
    """

    def __init__(self, serializer: serializers.Serializer):
        # A serializer that answers its own way (its class overrides to_representation) keeps doing so.
        own = type(serializer).to_representation is not serializers.Serializer.to_representation
        self.own = serializer.to_representation if own else None
        self.plan = []
        for name, field in serializer.fields.items():
            if field.write_only:
                continue
            source = field.source
            plain = source != "*" and "." not in source and type(field).get_attribute is Field.get_attribute
            self.plan.append((name, source if plain else None, field, _kept_types(field)))

    def __call__(self, instance) -> dict:
        if self.own is not None:
            return self.own(instance)
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


class FieldsBuiltOnce:
    """For a ModelSerializer: the fields are built from the model once per serializer class, and each instance gets
    deep copies of them, as DRF gives every instance deep copies of its declared fields. ModelSerializer builds
    them from the model's options on every instance: for a job ~2 of ~7 s profiled over 100 detail requests
    (bench/api_cpu.py --profile detail); with copies a detail took 11.7-12.5 ms of CPU instead of 15.4 (same
    sitting). What a class's fields are depends only on the class (its Meta and declared fields), never on the
    instance."""

    def get_fields(self):
        built = type(self).__dict__.get("_fields_built_once")
        if built is None:
            built = super().get_fields()
            type(self)._fields_built_once = built
        return copy.deepcopy(built)


class KeptAnswers:
    """A model's answers in the API through one read-only instance of its serializer, kept for the process.

    DRF gives every serializer instance deep copies of its fields (``Serializer.fields``); for a job's ~55 fields
    that was a quarter of a detail request's CPU (bench/api_cpu.py --profile detail). ``to_representation(instance)``
    reads the instance and the fields, and nothing the instance's own request set, which is how a ListSerializer
    answers every row of a page with one child: so one instance answers every request. The hyperlink is the one
    field that needs the request; the kept instance leaves it out (a declared field set to ``None``, as DRF's docs
    remove an inherited one) and it is made here with DRF's ``reverse``, as HyperlinkedIdentityField makes it, in
    the same first place. Each row is answered from the kept instance's fields by ``Representer``
    (DRF's answer, field by field, for less CPU). The serializer class stays the one definition of the answer and of
    the schema."""

    def __init__(self, serializer_class: type[serializers.ModelSerializer], view_name: str):
        if serializer_class.Meta.fields[0] != "url":
            raise ValueError(f"{serializer_class.__name__}: the hyperlink is the answer's first field")
        self.serializer_class = serializer_class
        self.view_name = view_name

    @functools.cached_property
    def kept(self) -> serializers.ModelSerializer:
        base = self.serializer_class
        kept = type(
            f"Kept{base.__name__}",
            (base,),
            {"url": None, "Meta": type("Meta", (base.Meta,), {"fields": base.Meta.fields[1:]}), "__module__": __name__},
        )()
        kept.fields  # noqa: B018 - built before it is shared
        return kept

    @functools.cached_property
    def represent(self) -> Representer:
        return Representer(self.kept)

    def one(self, instance, request) -> dict:
        url = reverse(self.view_name, kwargs={"pk": instance.pk}, request=request)
        return {"url": url, **self.represent(instance)}

    def many(self, instances, request) -> list[dict]:
        """The answers of a page. Its hyperlinks take one ``reverse``, not one a row (a tenth of a page's CPU): a
        row's link is the first row's with the id changed, as the router's detail path ends in the id and a slash,
        which the first row's own link confirms (else every row is reversed)."""
        rows = list(instances)
        if not rows:
            return []
        first = reverse(self.view_name, kwargs={"pk": rows[0].pk}, request=request)
        tail = f"/{rows[0].pk}/"
        if not first.endswith(tail):
            return [self.one(row, request) for row in rows]
        prefix, represent = first[: len(first) - len(tail) + 1], self.represent
        return [{"url": f"{prefix}{row.pk}/", **represent(row)} for row in rows]


class KeptChecks:
    """Requests that read well, checked by instances of a serializer kept for the process, so a valid request pays
    for no new instance: DRF gives every instance deep copies of its fields (for a job's ~60 fields about 1.8 ms of
    a submission's CPU, bench/api_cpu.py --profile submit).

    ``validated(data, context)`` runs the serializer's public ``run_validation`` (what ``is_valid`` runs; it keeps
    nothing on the instance) and returns the validated data, or None when the request has any problem: the caller
    then validates it with an instance of its own, whose ``errors`` say every problem as they always have. An
    instance serves one request at a time: it is taken from the free list (or made) and put back after, its
    context (the request: its user) set for that request and cleared after, so no request ever reads another's."""

    def __init__(self, serializer_class: type[serializers.Serializer]):
        self.serializer_class = serializer_class
        self.free: list[serializers.Serializer] = []

    def validated(self, data, context: dict) -> dict | None:
        try:
            checker = self.free.pop()  # atomic: never the same instance for two threads or greenlets
        except IndexError:
            checker = self.serializer_class(context={})
            checker.fields  # noqa: B018 - built (and copied) once, for every request this instance checks
        checker.context.update(context)
        try:
            return checker.run_validation(data)
        except serializers.ValidationError:
            return None
        finally:
            checker.context.clear()
            self.free.append(checker)
