"""One FilterSet per model, shared by the web lists and the API query string."""

import django_filters
from django.db.models import Q
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field

from core.api.bounds import DateTimeBoundFilter, IdFilter
from core.filtersets import FormClassBuiltOnce

from .choices import NodeConfigKind, NodeConfigState, NodeHealth, ResourceKind
from .models import GPU, Cluster, MigPartition, Node, NodeConfigOperation, ResourceClass


@extend_schema_field(OpenApiTypes.STR)  # a name (to_field_name), not the cluster's id
class ClusterFilter(django_filters.ModelChoiceFilter):
    """A cluster of the fleet by its name (``?cluster=cloud``), for every list of things that live in a cluster.
    A name no cluster has is an error that says so (as an unknown state is), not an empty list. ``field_name`` is
    the path to the row's cluster (``cluster``, ``node__cluster``, …): the name is looked up once and the list
    filtered by the cluster's id, so the cost is one small query however many clusters there are."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("label", "Cluster (name)")
        kwargs.setdefault("queryset", Cluster.objects.all())
        kwargs.setdefault("to_field_name", "name")
        kwargs["error_messages"] = {
            "invalid_choice": "There is no cluster called %(value)s; name one of the fleet's clusters "
            "(the clusters page or GET /api/v1/clusters/ lists them), or leave the filter out."
        }
        super().__init__(*args, **kwargs)


class NodeFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    product = django_filters.CharFilter(field_name="product", lookup_expr="iexact")
    health = django_filters.MultipleChoiceFilter(choices=NodeHealth.choices)
    team = django_filters.CharFilter(method="filter_team", label="Usable by team (slug)")
    team_id = IdFilter(field_name="team_id")
    gone = django_filters.BooleanFilter(field_name="gone_at", lookup_expr="isnull", exclude=True, label="Gone")
    cordoned = django_filters.BooleanFilter(field_name="unschedulable")
    mig_strategy = django_filters.CharFilter()
    cluster = ClusterFilter(field_name="cluster")
    last_seen__before = DateTimeBoundFilter(field_name="last_seen", lookup_expr="lt")
    last_seen__after = DateTimeBoundFilter(field_name="last_seen", lookup_expr="gte")

    class Meta:
        model = Node
        fields = ["q", "product", "health", "team", "team_id", "gone", "cordoned", "mig_strategy", "cluster"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(name__icontains=value) | Q(product__icontains=value) | Q(driver_version=value))

    def filter_team(self, queryset, name, value):
        """Nodes a team can use: shared nodes and those dedicated to it."""
        return queryset.filter(Q(team__isnull=True) | Q(team__slug=value))


class GPUFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    node = django_filters.CharFilter(field_name="node__name")
    node_id = IdFilter(field_name="node_id")
    product = django_filters.CharFilter(field_name="product", lookup_expr="iexact")
    cluster = ClusterFilter(field_name="node__cluster")

    class Meta:
        model = GPU
        fields = ["q", "node", "node_id", "product", "mig_enabled", "sharing", "cluster"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(node__name__icontains=value) | Q(product__icontains=value) | Q(uuid=value))


class MigPartitionFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    node = django_filters.CharFilter(field_name="gpu__node__name")
    gpu_id = IdFilter(field_name="gpu_id")
    profile = django_filters.CharFilter()
    cluster = ClusterFilter(field_name="gpu__node__cluster")

    class Meta:
        model = MigPartition
        fields = ["node", "gpu_id", "profile", "resource_name", "cluster"]


class ResourceClassFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    kind = django_filters.MultipleChoiceFilter(choices=ResourceKind.choices)
    product = django_filters.CharFilter(field_name="product", lookup_expr="iexact")
    available = django_filters.BooleanFilter(method="filter_available", label="Has free capacity")

    class Meta:
        model = ResourceClass
        fields = ["q", "kind", "product", "resource_name", "present", "hidden", "available"]

    def search(self, queryset, name, value):
        return queryset.filter(
            Q(alias__icontains=value) | Q(product__icontains=value) | Q(profile__icontains=value) | Q(key=value)
        )

    def filter_available(self, queryset, name, value):
        return queryset.filter(free__gt=0) if value else queryset.filter(free=0)


class NodeConfigOperationFilterSet(FormClassBuiltOnce, django_filters.FilterSet):
    q = django_filters.CharFilter(method="search", label="Search")
    node = django_filters.CharFilter(field_name="node__name")
    node_id = IdFilter(field_name="node_id")
    kind = django_filters.ChoiceFilter(choices=NodeConfigKind.choices)
    state = django_filters.MultipleChoiceFilter(choices=NodeConfigState.choices)
    cluster = ClusterFilter(field_name="node__cluster")
    created__before = DateTimeBoundFilter(field_name="created", lookup_expr="lt")
    created__after = DateTimeBoundFilter(field_name="created", lookup_expr="gte")

    class Meta:
        model = NodeConfigOperation
        fields = ["q", "node", "node_id", "kind", "state", "cluster"]

    def search(self, queryset, name, value):
        return queryset.filter(Q(node__name__icontains=value) | Q(reason__icontains=value))
