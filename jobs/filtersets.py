"""One FilterSet per model, shared by the web lists and the API query string."""

import django_filters
from django.db.models import Q

from .choices import JobKind, JobState, NotebookState, StopReason
from .models import Job, Notebook, Quota, TeamVolume


class JobFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    team_id = django_filters.NumberFilter(field_name="team_id")
    owner = django_filters.CharFilter(field_name="owner__username", label="Owner (username)")
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices)
    kind = django_filters.ChoiceFilter(choices=JobKind.choices)
    resource_class = django_filters.NumberFilter(field_name="resource_class_id")
    node_name = django_filters.CharFilter()
    submitted__before = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="lt")
    submitted__after = django_filters.IsoDateTimeFilter(field_name="submitted_at", lookup_expr="gte")

    class Meta:
        model = Job
        fields = ["q", "team", "team_id", "owner", "state", "kind", "resource_class", "node_name"]

    def search(self, queryset, name, value):
        query = Q(name__icontains=value) | Q(image__icontains=value) | Q(workload_name=value)
        if value.lstrip("#").isdigit():
            query |= Q(pk=int(value.lstrip("#")))
        return queryset.filter(query)


class QuotaFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    team_id = django_filters.NumberFilter(field_name="team_id")
    resource_class = django_filters.NumberFilter(field_name="resource_class_id")

    class Meta:
        model = Quota
        fields = ["team", "team_id", "resource_class"]


class NotebookFilterSet(django_filters.FilterSet):
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Search")
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    team_id = django_filters.NumberFilter(field_name="team_id")
    owner = django_filters.CharFilter(field_name="owner__username", label="Owner (username)")
    state = django_filters.ChoiceFilter(choices=NotebookState.choices)
    stop_reason = django_filters.ChoiceFilter(choices=StopReason.choices)
    created__before = django_filters.IsoDateTimeFilter(field_name="created", lookup_expr="lt")
    created__after = django_filters.IsoDateTimeFilter(field_name="created", lookup_expr="gte")

    class Meta:
        model = Notebook
        fields = ["q", "team", "team_id", "owner", "state", "stop_reason"]


class TeamVolumeFilterSet(django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    phase = django_filters.CharFilter()

    class Meta:
        model = TeamVolume
        fields = ["team", "phase"]
