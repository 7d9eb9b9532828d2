"""Strict request bodies: DRF ignores the keys a serializer does not take; the portal's API refuses them, each
named with what the request may hold, so a pipeline that sends "gpus": 4 hears about it instead of getting 1 GPU."""

from rest_framework import serializers


def unknown_field_errors(serializer: serializers.Serializer, data, what: str) -> dict[str, list[str]]:
    """Field → message for each key of ``data`` the serializer does not take (DRF ignores them silently): read-only
    ones are the portal's to set, others are unknown, with the fields ``what`` takes."""
    if not hasattr(data, "keys"):
        return {}
    writable = [name for name, field in serializer.fields.items() if not field.read_only]
    errors = {}
    for name in sorted(set(data) - set(writable)):
        if name in serializer.fields:
            errors[name] = ["Set by the portal; leave it out of the request."]
        else:
            errors[name] = [f"Unknown field. {what} takes: {', '.join(writable)}."]
    return errors
