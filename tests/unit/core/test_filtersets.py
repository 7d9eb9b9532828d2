"""A FilterSet's form class is built once per FilterSet class (core.filtersets.FormClassBuiltOnce), each request's
form still has fields of its own, and a filter whose choices come from the request keeps its per-request form."""

from __future__ import annotations

import django_filters
import pytest
from django.test import RequestFactory

from accounts.models import Team
from core.filtersets import FormClassBuiltOnce
from gpus.filtersets import NodeFilterSet
from jobs.filtersets import JobFilterSet
from jobs.models import Job


def test_every_request_shares_the_form_class_and_gets_fields_of_its_own():
    first = JobFilterSet({"state": ["queued"]}, queryset=Job.objects.none())
    second = JobFilterSet({"state": ["running"]}, queryset=Job.objects.none())
    assert type(first.form) is type(second.form)
    assert first.form.fields["state"] is not second.form.fields["state"]
    first.form.fields["state"].choices = []  # a change to one request's form reaches no other
    assert JobFilterSet({}, queryset=Job.objects.none()).form.fields["state"].choices
    assert type(NodeFilterSet({}).form) is type(NodeFilterSet({}).form)


@pytest.mark.django_db
def test_each_form_still_checks_its_own_request():
    bad = JobFilterSet({"state": ["sleeping"], "mine": "maybe"}, queryset=Job.objects.none())
    good = JobFilterSet({"state": ["queued"], "mine": "true"}, queryset=Job.objects.none())
    assert not bad.is_valid() and set(bad.errors) == {"state", "mine"}
    assert good.is_valid(), good.errors


def test_choices_from_the_request_build_the_form_each_time():
    seen = []

    def teams(request):
        seen.append(request)
        return Team.objects.none()

    class ByRequest(FormClassBuiltOnce, django_filters.FilterSet):
        team = django_filters.ModelChoiceFilter(queryset=teams)

    requests = [RequestFactory().get("/"), RequestFactory().get("/")]
    forms = [ByRequest({}, queryset=Job.objects.none(), request=r).form for r in requests]
    assert type(forms[0]) is not type(forms[1])
    assert seen == requests
