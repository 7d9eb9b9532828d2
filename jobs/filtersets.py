"""One FilterSet per model, shared by the web lists and the API query string."""

import django_filters
from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import connections
from django.db.models import Exists, JSONField, OuterRef, Q, Subquery, Value
from django.db.models.fields.json import KeyTransform, KeyTransformExact
from django_filters.constants import EMPTY_VALUES
from drf_spectacular.utils import extend_schema_field

from accounts.models import Team
from core.api.bounds import DateTimeBoundFilter, IdFilter, is_id
from core.filtersets import FormClassBuiltOnce
from gpus.filtersets import ClusterFilter
from jobs.choices import JobKind, JobState, NotebookState, StopReason
from jobs.models import Job, JobArray, Notebook, Quota, RegistryCredential, TeamSecret, TeamVolume


class LabelSelectorField(forms.Field):
    """``key=value`` or ``key`` selectors, from repeated query parameters (``?label=run=abc&label=git-sha``) or
    comma-separated in one (the list page's box): a list of (key, value or None)."""

    widget = forms.MultipleHiddenInput

    def clean(self, value):
        words = [w.strip() for item in (value or []) for w in str(item).split(",") if w.strip()]
        selectors, problems = [], []
        for word in words:
            key, has_value, text = (part.strip() for part in word.partition("="))
            if "\x00" in word:  # PostgreSQL refuses NUL in text: say so rather than fail the query
                problems.append("A label selector may not contain a NUL character.")
            elif not key:
                problems.append(f"'{word}' has no label key; write key=value (run=abc) or just key.")
            selectors.append((key, text if has_value else None))
        if problems:
            raise ValidationError(problems)
        return selectors


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "string"},
        "description": "key=value (that value) or key (any value); repeat for AND: ?label=run=abc&label=git-sha",
    }
)
class LabelFilter(django_filters.Filter):
    """Jobs whose labels match every selector (AND): ``key=value`` that exact value, ``key`` any value."""

    field_class = LabelSelectorField

    def filter(self, qs, value):
        for key, text in value or []:
            if text is None:
                qs = qs.filter(labels__has_key=key)
            elif connections[qs.db].vendor == "postgresql":
                # Containment (labels @> {"key": "value"}): what the labels' GIN index serves (a label's value is
                # always a string, so this matches exactly the jobs the comparison below does).
                qs = qs.filter(labels__contains={key: text})
            else:
                # The key as one path element (a key may hold '.', '/' or '__'); the value compared as JSON text.
                qs = qs.filter(KeyTransformExact(KeyTransform(key, "labels"), Value(text, output_field=JSONField())))
        return qs


class StrictBooleanField(forms.Field):
    """``true`` or ``false`` (``1``/``0`` too); anything else is an error that says what to send, where Django's
    NullBooleanField would read it as "not given" and filter nothing."""

    widget = forms.TextInput
    WORDS = {"true": True, "1": True, "false": False, "0": False}

    def clean(self, value):
        if value in EMPTY_VALUES:
            return None
        word = str(value).strip().lower()
        if word not in self.WORDS:
            raise ValidationError(f"'{value}' is not true or false; send true or false (or leave it out).")
        return self.WORDS[word]


@extend_schema_field({"type": "boolean"})
class StrictBooleanFilter(django_filters.BooleanFilter):
    field_class = StrictBooleanField


class ByIdOf(django_filters.CharFilter):
    """A filter by a related row's unique name (team slug, owner username) written as ``<fk>_id = (SELECT id ...)``
    rather than a join: PostgreSQL reads the id first, so an index that starts with the foreign key hands the
    list over in order (``job_team_newest``, ``job_owner_newest``) instead of sorting every row of the join."""

    def __init__(self, *args, related=None, key="", **kwargs):
        self.related, self.key = related, key
        super().__init__(*args, **kwargs)

    def filter(self, qs, value):
        if value in EMPTY_VALUES:
            return qs
        ids = self.related().objects.filter(**{self.key: value}).values("pk")[:1]
        return qs.filter(**{self.field_name: Subquery(ids)})


class JobFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    team = ByIdOf(field_name="team_id", related=lambda: Team, key="slug", label="Team (slug)")
    team_id = IdFilter(field_name="team_id")
    owner = ByIdOf(field_name="owner_id", related=get_user_model, key="username", label="Owner (username)")
    mine = StrictBooleanFilter(method="only_mine", label="Only your own jobs (true), or everyone's (false)")
    idle = StrictBooleanFilter(field_name="idle_since", lookup_expr="isnull", exclude=True,
                               label="Running with idle GPUs (true) or not (false)")  # fmt: skip
    # distinct=False: a state is a column of the job (no join that repeats rows), and DISTINCT over every column
    # would sort the whole filtered set.
    state = django_filters.MultipleChoiceFilter(choices=JobState.choices, distinct=False)
    kind = django_filters.ChoiceFilter(choices=JobKind.choices)
    resource_class = IdFilter(field_name="resource_class_id")
    node_name = django_filters.CharFilter()
    cluster = ClusterFilter(field_name="cluster", label="Cluster it was placed on (name)")
    submitted__before = DateTimeBoundFilter(field_name="submitted_at", lookup_expr="lt")
    submitted__after = DateTimeBoundFilter(field_name="submitted_at", lookup_expr="gte")
    label = LabelFilter(label="Label (key=value or key; repeat for AND)")
    array = IdFilter(field_name="array_id", label="Job array id")

    class Meta:
        model = Job
        fields = ["q", "team", "team_id", "owner", "mine", "state", "kind", "idle", "resource_class", "node_name",
                  "cluster", "label", "array"]  # fmt: skip

    def only_mine(self, queryset, name, value):
        """``mine=true``: the signed-in person's own jobs ("my jobs"); false: every job they may see."""
        if not value:
            return queryset
        user = getattr(self.request, "user", None)
        return queryset.filter(owner_id=user.pk) if user is not None and user.is_authenticated else queryset.none()

    def search(self, queryset, name, value):
        query = Q(name__icontains=value) | Q(image__icontains=value) | Q(workload_name=value)
        if is_id(value.removeprefix("#")):  # "#42" or "42"; not "²" (isdigit() takes it, int() does not)
            query |= Q(pk=int(value.removeprefix("#")))
        return queryset.filter(query)


class JobArrayFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    cluster = ClusterFilter(method="with_a_task_on", label="Arrays with a task placed on this cluster (name)")

    class Meta:
        model = JobArray
        fields = ["cluster"]

    def with_a_task_on(self, queryset, name, value):
        """An array's tasks may be placed on several clusters: the arrays with at least one on ``value``."""
        return queryset.filter(Exists(Job.objects.filter(array_id=OuterRef("pk"), cluster=value)))


class QuotaFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    team_id = IdFilter(field_name="team_id")
    resource_class = IdFilter(field_name="resource_class_id")

    class Meta:
        model = Quota
        fields = ["team", "team_id", "resource_class"]


class NotebookFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    q = django_filters.CharFilter(field_name="name", lookup_expr="icontains", label="Search")
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    team_id = IdFilter(field_name="team_id")
    owner = django_filters.CharFilter(field_name="owner__username", label="Owner (username)")
    state = django_filters.ChoiceFilter(choices=NotebookState.choices)
    stop_reason = django_filters.ChoiceFilter(choices=StopReason.choices)
    cluster = ClusterFilter(field_name="cluster", label="Cluster its sessions run on (name)")
    created__before = DateTimeBoundFilter(field_name="created", lookup_expr="lt")
    created__after = DateTimeBoundFilter(field_name="created", lookup_expr="gte")

    class Meta:
        model = Notebook
        fields = ["q", "team", "team_id", "owner", "state", "stop_reason", "cluster"]


class TeamVolumeFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    phase = django_filters.CharFilter()
    cluster = ClusterFilter(field_name="cluster", label="Cluster that holds it (name)")

    class Meta:
        model = TeamVolume
        fields = ["team", "phase", "cluster"]


class TeamSecretFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    name = django_filters.CharFilter()

    class Meta:
        model = TeamSecret
        fields = ["team", "name"]


class RegistryCredentialFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    team = django_filters.CharFilter(field_name="team__slug", label="Team (slug)")
    registry = django_filters.CharFilter()

    class Meta:
        model = RegistryCredential
        fields = ["team", "registry"]
