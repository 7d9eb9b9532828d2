"""Request fields that take only the JSON type the schema says. DRF's ``CharField`` turns a number into its text
(``"alias": 5`` is saved as "5") where the schema promises a string; ``TextOnlyField`` refuses anything but a JSON
string with a 400 naming the field. A ``ModelSerializer`` takes it for every text column through its documented
``serializer_field_mapping`` (``TEXT_ONLY_MAPPING``)."""

from __future__ import annotations

from django.db import models
from rest_framework import serializers


class TextOnlyField(serializers.CharField):
    default_error_messages = {"invalid": "Give text: a JSON string, not a number, true/false or a list."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


#: ``ModelSerializer.serializer_field_mapping`` with text columns as ``TextOnlyField``.
TEXT_ONLY_MAPPING = {
    **serializers.ModelSerializer.serializer_field_mapping,
    models.CharField: TextOnlyField,
    models.TextField: TextOnlyField,
}


class NamedRelatedField(serializers.SlugRelatedField):
    """A related object by its name or slug, as ``SlugRelatedField``, where text holding a NUL byte names no object
    (PostgreSQL refuses NUL in text: the lookup would fail with a 500, not a 400)."""

    def to_internal_value(self, data):
        if isinstance(data, str) and "\x00" in data:
            self.fail("does_not_exist", slug_name=self.slug_field, value=data.replace("\x00", "\\x00"))
        return super().to_internal_value(data)
