"""jobs.api.plain: every serializer instance gets field objects of its own, as DRF's deep copy of the fields gives,
though the plain fields are copied shallowly: binding one instance's fields leaves another's and the class's
prototypes alone, and a field that holds fields, or a mutable default, is still copied deeply."""

from __future__ import annotations

from rest_framework import serializers

from jobs.api.plain import PlainFieldsMixin
from jobs.api.serializers import JobSerializer
from jobs.models import Job


def test_two_validating_serializers_share_no_field_object():
    first = JobSerializer(data={"name": "a"})
    second = JobSerializer(data={"name": "b"})
    assert set(first.fields) == set(second.fields)
    prototypes = JobSerializer.__dict__["_built_fields"]  # built with the first instance's fields
    for name in first.fields:
        one, other = first.fields[name], second.fields[name]
        assert one is not other and one is not prototypes[name], name
        assert one.parent is first and other.parent is second, name
        assert one.field_name == name == other.field_name
        assert getattr(prototypes[name], "parent", None) is None, f"{name}: the class's prototype was bound"
    # The fields that hold fields are deep copies: their children belong to this instance's field.
    command = first.fields["command"]
    assert command.child is not second.fields["command"].child
    assert command.child.parent is command


class _WithMutableDefault(PlainFieldsMixin, serializers.ModelSerializer):
    extra = serializers.JSONField(default={"seen": []}, write_only=True)
    tags = serializers.ListField(child=serializers.CharField(), default=list, write_only=True)

    class Meta:
        model = Job
        fields = ["name", "extra", "tags"]


def test_a_mutable_default_is_copied_for_each_serializer():
    first = _WithMutableDefault(data={"name": "one"})
    assert first.is_valid(), first.errors
    first.validated_data["extra"]["seen"].append("changed by a request")
    second = _WithMutableDefault(data={"name": "two"})
    assert second.is_valid(), second.errors
    assert second.validated_data["extra"] == {"seen": []}
    assert second.validated_data["tags"] == [] and second.validated_data["name"] == "two"
