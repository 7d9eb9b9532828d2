"""Strict query strings for the API's lists: a parameter a list does not take, or an ordering by a field it does
not offer, is a 400 that names every allowed one, instead of being ignored (``GET /api/v1/jobs/?status=running``,
a typo for ``state``, used to return every job).

The first of the default filter backends. What a list takes is derived from the view: its filterset's filters,
``ordering`` when it orders, the pagination's ``limit``/``offset``, ``format``, and the names a view reads by
itself (``extra_query_params``). Only lists are checked; a detail action's own parameters (``tail``, ``rank``, …)
are the action's business."""

from __future__ import annotations

from rest_framework.exceptions import ValidationError
from rest_framework.filters import BaseFilterBackend, OrderingFilter

ALWAYS = ("limit", "offset", "format")


def allowed_params(view) -> set[str]:
    allowed = set(ALWAYS) | set(getattr(view, "extra_query_params", ()))
    filterset = getattr(view, "filterset_class", None)
    if filterset is not None:
        allowed |= set(filterset.base_filters)
    allowed |= set(getattr(view, "filterset_fields", None) or ())
    if any(issubclass(backend, OrderingFilter) for backend in getattr(view, "filter_backends", ())):
        allowed.add(OrderingFilter.ordering_param)
    return allowed


class StrictQueryParams(BaseFilterBackend):
    def filter_queryset(self, request, queryset, view):
        if getattr(view, "action", None) != "list":
            return queryset
        allowed = allowed_params(view)
        errors: dict[str, list[str]] = {}
        takes = ", ".join(sorted(allowed))
        for name in sorted(set(request.query_params) - allowed):
            errors[name] = [f"This list has no parameter '{name}'. It takes: {takes}."]
        ordering = OrderingFilter.ordering_param
        if ordering in allowed and request.query_params.get(ordering):
            valid = {name for name, _ in OrderingFilter().get_valid_fields(queryset, view, {"request": request})}
            asked = [term.strip().lstrip("-") for term in request.query_params[ordering].split(",") if term.strip()]
            wrong = [term for term in asked if term not in valid]
            if wrong:
                errors[ordering] = [
                    f"This list cannot be ordered by {', '.join(wrong)}. It orders by: {', '.join(sorted(valid))} "
                    "(a leading '-' for descending)."
                ]
        if errors:
            raise ValidationError(errors)
        return queryset
