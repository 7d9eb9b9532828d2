"""Serialising many rows cheaply: the same answer as DRF's ``Serializer.to_representation``, without its
per-field machinery for the fields whose answer is the stored value itself.

A page of 50 jobs is 50 × ~60 fields; DRF spends about 10 µs on each (a generator over the fields, a
``get_attribute`` that checks for callables and dotted sources, a ``to_representation`` that returns what it was
given). ``PlainFieldsMixin`` works out once per serializer instance (a ``many=True`` list shares one) which
fields are *plain* (a model column read as is: text, numbers, booleans, JSON, string choices, a foreign key's
id) and reads those with one ``getattr``; every other field (dates, dotted sources, properties, custom
representations) goes through DRF exactly as before. ``tests/unit/jobs/test_api_queries.py`` checks the answer
is the same as DRF's own for every field.

The fields themselves are built from the model once per class, not once per request (``get_fields``), and a
serializer that only reads copies only the fields that are not plain, shallowly, from prototypes bound once per
class.
``DetailUrlField`` builds each row's ``url`` from one ``reverse()`` per serializer instance instead of one per
row.
"""

from __future__ import annotations

import copy

from django.core.exceptions import FieldDoesNotExist
from rest_framework import fields, relations, serializers

#: DRF field classes whose representation of a value read from these model columns is that value (``str`` of a
#: str, ``int`` of an int, a bool as True/False); exact classes: a subclass may represent otherwise. None: any
#: column (ReadOnlyField gives what it reads).
IDENTITY_FIELDS = {
    fields.CharField: {"CharField", "TextField", "SlugField", "EmailField", "URLField"},
    fields.IntegerField: {
        "IntegerField", "PositiveIntegerField", "PositiveSmallIntegerField", "PositiveBigIntegerField",
        "SmallIntegerField", "BigIntegerField", "AutoField", "BigAutoField",
    },
    fields.BooleanField: {"BooleanField"},
    fields.FloatField: {"FloatField"},
    fields.JSONField: {"JSONField"},
    fields.ChoiceField: {"CharField"},
    fields.ReadOnlyField: None,
}  # fmt: skip

#: Any id the router accepts, standing in for the row's in the one URL reversed per serializer.
_SENTINEL = 918273645546372819


def _plain_attname(serializer, field) -> str | None:
    """The model attribute a plain field reads (a concrete column or a foreign key's ``*_id``), else None."""
    if len(field.source_attrs) != 1:
        return None
    model = getattr(getattr(serializer, "Meta", None), "model", None)
    try:
        model_field = model._meta.get_field(field.source_attrs[0])
    except (AttributeError, FieldDoesNotExist):
        return None
    if not getattr(model_field, "concrete", False):
        return None
    kind = type(field)
    if kind is relations.PrimaryKeyRelatedField:
        plain = field.pk_field is None and model_field.is_relation
    elif model_field.is_relation:
        plain = False
    elif kind in getattr(serializer, "plain_field_classes", ()):
        plain = True
    elif kind in IDENTITY_FIELDS:
        columns = IDENTITY_FIELDS[kind]
        plain = columns is None or model_field.get_internal_type() in columns
        if kind is fields.JSONField:
            plain = plain and not field.binary
        elif kind is fields.ChoiceField:
            plain = plain and all(isinstance(key, str) for key in field.choices)
    else:
        plain = False
    return model_field.attname if plain else None


def _composite(field) -> bool:
    """Whether a field holds fields of its own (a serializer, a list's or a many-relation's child)."""
    return isinstance(field, serializers.BaseSerializer) or any(
        hasattr(field, attr) for attr in ("child", "child_relation")
    )


_MUTABLE = (list, dict, set, bytearray)


def _fresh_copy(field):
    """A copy of an unbound field prototype for one serializer instance (``PlainFieldsMixin.get_fields``)."""
    if (
        _composite(field)
        or isinstance(getattr(field, "default", None), _MUTABLE)
        or isinstance(getattr(field, "initial", None), _MUTABLE)
    ):
        return copy.deepcopy(field)
    fresh = object.__new__(type(field))  # a shallow copy, cheaper than copy.copy's reduce
    fresh.__dict__.update(field.__dict__)
    return fresh


class PlainFieldsMixin:
    """For a ModelSerializer: plain fields read with ``getattr``, the rest through DRF (module docstring)."""

    #: The serializer's own field classes whose ``to_representation`` returns the value unchanged.
    plain_field_classes: tuple = ()

    def get_fields(self):
        # ModelSerializer builds its fields from the model's meta on every instance (~1.5 ms for a job); they
        # depend only on the class, so build them once per class. Each instance still gets field objects of its
        # own, as DRF's deep copy gives: a shallow copy of a plain field (binding sets attributes of the copy's
        # own; validating reads but never changes what copies share: choices, validators, messages), and a deep
        # copy of a field that holds fields or a mutable default or initial value (no request may change what
        # another one reads). Deep copies of a job's 53 fields were ~1 ms of a submission's ~10 ms.
        built = type(self).__dict__.get("_built_fields")
        if built is None:
            built = super().get_fields()
            type(self)._built_fields = built
        return {name: _fresh_copy(field) for name, field in built.items()}

    def _plan(self) -> list[tuple[str, str | None, serializers.Field | None]]:
        """(name, attname of a plain field or None, the field for the others), in the serializer's order."""
        plan = self.__dict__.get("_plain_plan")
        if plan is not None:
            return plan
        cls = type(self)
        order = cls.__dict__.get("_plain_order")
        if order is None or hasattr(self, "initial_data") or "fields" in self.__dict__:
            # The first of its class, or one that validates: DRF's own fields, bound to this serializer.
            readable = list(self._readable_fields)
            if order is None:
                cls._plain_order = [(f.field_name, _plain_attname(self, f)) for f in readable]
            attnames = dict(cls._plain_order)
            plan = [(f.field_name, attnames[f.field_name], f) for f in readable]
        else:
            # Only reading: a plain field needs no object; each other one is a shallow copy of the class's bound
            # prototype, given this serializer as its parent (its context: the request). A deep copy rebuilds the
            # field from its arguments (about 15 µs a field, 14 fields of a job); reading never changes what the
            # copies share.
            # A field with fields of its own (a nested serializer, a list's child) is still deep-copied and bound, as
            # DRF does: its children would otherwise keep the prototype as their parent.
            built = cls.__dict__["_built_fields"]
            prototypes = cls.__dict__.get("_read_prototypes")
            if prototypes is None:
                prototypes = {}
                for name, attname in order:
                    if attname is None and not _composite(built[name]):
                        prototype = copy.deepcopy(built[name])
                        prototype.bind(field_name=name, parent=self)
                        prototype.parent = None
                        prototypes[name] = prototype
                cls._read_prototypes = prototypes
            plan = []
            for name, attname in order:
                field = None
                if attname is None and name in prototypes:
                    prototype = prototypes[name]
                    field = object.__new__(type(prototype))  # a shallow copy, cheaper than copy.copy's reduce
                    field.__dict__.update(prototype.__dict__)
                    field.parent = self
                elif attname is None:
                    field = copy.deepcopy(built[name])
                    field.bind(field_name=name, parent=self)
                plan.append((name, attname, field))
        self._plain_plan = plan
        return plan

    def to_representation(self, instance):
        ret = {}
        for name, attname, field in self._plan():
            if attname is not None:
                ret[name] = getattr(instance, attname)
                continue
            try:
                attribute = field.get_attribute(instance)
            except fields.SkipField:
                continue
            check = attribute.pk if isinstance(attribute, relations.PKOnlyObject) else attribute
            ret[name] = None if check is None else field.to_representation(attribute)
        return ret


class DetailUrlField(serializers.HyperlinkedIdentityField):
    """HyperlinkedIdentityField by ``pk``, with the URL reversed once per serializer and the id put in."""

    def get_url(self, obj, view_name, request, format):
        if obj.pk is None or format or self.lookup_field != "pk":
            return super().get_url(obj, view_name, request, format)
        cached = self.__dict__.get("_url_parts")
        if cached is None or cached[0] is not request:
            url = self.reverse(view_name, kwargs={self.lookup_url_kwarg: _SENTINEL}, request=request, format=None)
            parts = url.split(str(_SENTINEL))
            cached = self._url_parts = (request, parts if len(parts) == 2 else None)
        parts = cached[1]
        if parts is None:
            return super().get_url(obj, view_name, request, format)
        return f"{parts[0]}{obj.pk}{parts[1]}"
