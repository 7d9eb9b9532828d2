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


def every_problem(serializer: serializers.Serializer, what: str, check) -> dict:
    """The 400 body of a serializer that did not validate. When its only problems are fields the request may not
    hold, the rest of the request is validated too and ``check(serializer_of_the_rest)`` adds what the portal checks
    once the fields read well (quota, placement, the drivers, secrets): an unknown field never puts those off to a
    second request (issue 31, item 15)."""
    errors = {field: list(messages) for field, messages in serializer.errors.items()}
    data = serializer.initial_data
    unknown = unknown_field_errors(serializer, data, what)
    if not unknown or set(errors) != set(unknown):
        return errors
    rest = type(serializer)(data={k: v for k, v in data.items() if k not in unknown}, context=serializer.context)
    if rest.is_valid():
        for field, messages in check(rest).items():
            errors.setdefault(field, []).extend(messages)
    return errors
