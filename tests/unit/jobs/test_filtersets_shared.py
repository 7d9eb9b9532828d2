"""jobs.filtersets.SharedFormFilterSet gives the answers django-filter's own FilterSet gives: the same filtered SQL,
the same errors, the same form (field names, labels, kinds), request after request, with nothing of one request's
filtering left in the next."""

from __future__ import annotations

import copy

import django_filters
import pytest
from django.http import QueryDict

from jobs.filtersets import JobFilterSet
from jobs.models import Job

pytestmark = pytest.mark.django_db

#: The job list's FilterSet as django-filter sets it up for every request (deep copies, a new form class).
Reference = type(
    "Reference",
    (django_filters.FilterSet,),
    {**copy.deepcopy(JobFilterSet.declared_filters), "Meta": JobFilterSet.Meta, "search": JobFilterSet.search},
)

QUERIES = [
    "",
    "q=train",
    "q=%2342",
    "team=vision&state=queued&state=running",
    "state=queued&label=pipeline=p1&label=git-sha",
    "owner=alice&kind=batch&resource_class=3",
    "submitted__after=2026-01-01T00:00:00Z&submitted__before=2026-02-01T00:00:00Z",
    "array=7&node_name=gpu-node-1&team_id=2",
    # Wrong values: the same errors, every one named.
    "state=sleeping&kind=nope&resource_class=x&submitted__after=yesterday&label==abc",
    "team_id=-1&array=1.5",
]


def answer(filterset_class, query: str) -> tuple:
    filterset = filterset_class(QueryDict(query), queryset=Job.objects.all())
    valid = filterset.is_valid()
    errors = {name: list(messages) for name, messages in filterset.errors.items()}
    sql = str(filterset.qs.query) if valid else None
    form = [(name, type(field).__name__, str(field.label)) for name, field in filterset.form.fields.items()]
    return valid, errors, sql, form


@pytest.mark.parametrize("query", QUERIES)
def test_the_same_answer_as_django_filter(query):
    assert answer(JobFilterSet, query) == answer(Reference, query)


def test_requests_share_nothing_they_change():
    # One request's filters, form and search method stay its own: a later request without them filters nothing.
    first = JobFilterSet(QueryDict("q=train&state=queued"), queryset=Job.objects.all())
    second = JobFilterSet(QueryDict(""), queryset=Job.objects.all())
    assert first.filters["q"] is not second.filters["q"] and first.filters["q"].parent is first
    assert second.filters["q"].parent is second
    assert first.form is not second.form and first.form.fields["q"] is not second.form.fields["q"]
    assert "train" in str(first.qs.query) and "train" not in str(second.qs.query)
    assert str(second.qs.query) == str(Job.objects.all().query)
    # The search method resolves on its own FilterSet (a FilterMethod per copy).
    assert first.filters["q"].filter.f is first.filters["q"]
    assert JobFilterSet.base_filters["q"].filter.f is JobFilterSet.base_filters["q"]
