from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.fields import TEXT_ONLY_MAPPING, NamedRelatedField

from ..choices import ClusterConnection, ClusterHealth, NodeConfigKind
from ..dra_requests import MAX_SHARING_REPLICAS, SHARING_MODES
from ..models import GPU, Cluster, MigPartition, Node, NodeConfigOperation, NodeSmokeTest, ResourceClass
from ..resources import class_by_cluster, withheld


class MigPartitionSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="gpu.node.name", read_only=True)
    cluster = serializers.CharField(
        source="gpu.node.cluster.name", read_only=True, help_text="The cluster of the fleet its node belongs to."
    )
    gpu_index = serializers.IntegerField(source="gpu.index", read_only=True)

    class Meta:
        model = MigPartition
        fields = [
            "id", "node", "cluster", "gpu", "gpu_index", "profile", "resource_name", "start", "size", "compute_slices",
            "memory_mb", "uuid", "placement_inferred",
        ]  # fmt: skip


class GPUSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    cluster = serializers.CharField(
        source="node.cluster.name", read_only=True, help_text="The cluster of the fleet its node belongs to."
    )
    mig_partitions = MigPartitionSerializer(many=True, read_only=True)
    dra = serializers.JSONField(read_only=True, help_text="What NVIDIA's DRA driver publishes of it (docs/api.md).")

    class Meta:
        model = GPU
        fields = ["id", "node", "cluster", "index", "uuid", "product", "memory_mb", "mig_enabled", "sharing",
                  "replicas", "mig_partitions", "dra"]  # fmt: skip


class NodeSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="api:node-detail", lookup_field="name")
    # None: a shared node (not dedicated to a team).
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    #: The cluster of the fleet the node belongs to (its name).
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    gpus_allocatable = serializers.IntegerField(read_only=True)
    gpus_in_use = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = [
            "url", "id", "name", "cluster", "health", "ready", "unschedulable", "product", "gpu_count", "gpu_memory_mb",
            "gpu_family", "compute_capability", "driver_version", "cuda_version", "mig_capable", "mig_strategy",
            "mig_config", "mig_config_state", "sharing_strategy", "replicas", "device_plugin_ok", "capacity",
            "allocatable", "gpu_in_use", "gpus_allocatable", "gpus_in_use", "team", "first_seen", "last_seen",
            "gone_at", "provider", "instance_type", "product_source", "architecture", "clique", "unhealthy_gpus",
            "driver_upgrade_state", "blocked_reason",
        ]  # fmt: skip
        # Everything here is read from the cluster by the reconciler: nothing on a node is writable via this API.
        read_only_fields = fields


class NodeDetailSerializer(NodeSerializer):
    gpus = GPUSerializer(many=True, read_only=True)

    class Meta(NodeSerializer.Meta):
        fields = NodeSerializer.Meta.fields + ["labels", "taints", "conditions", "diagnosis", "gpus"]


def cluster_shares() -> tuple[dict[str, dict], set[str]]:
    """Every cluster's last share of each class (Cluster.class_totals, an unreachable one's ``withheld``) and the
    keys of the classes scoped to one cluster, for ``class_by_cluster``: two queries."""
    shares = {
        name: totals if health != ClusterHealth.UNREACHABLE else {key: withheld(share) for key, share in totals.items()}
        for name, totals, health in Cluster.objects.order_by("name").values_list("name", "class_totals", "health")
    }
    scoped = set(ResourceClass.objects.filter(cluster__isnull=False).values_list("key", flat=True))
    return shares, scoped


class AlternativesField(serializers.ListField):
    """A DRA class's alternatives as the keys of the classes, in priority order; the class ids the row stores are
    read as keys through one query per response (the serializer's context keeps the map)."""

    def __init__(self, **kwargs):
        super().__init__(child=serializers.CharField(max_length=200), max_length=16, **kwargs)

    def to_representation(self, ids):
        context = self.parent.context if self.parent is not None else {}
        keys = context.get("class_keys")
        if keys is None:
            keys = context["class_keys"] = dict(ResourceClass.objects.values_list("pk", "key"))
        return [keys[pk] for pk in ids or [] if pk in keys]


class ResourceClassSerializer(serializers.ModelSerializer):
    #: alias and description take only text, as the schema says (DRF's CharField would save 5 as "5").
    serializer_field_mapping = TEXT_ONLY_MAPPING
    display_name = serializers.CharField(read_only=True)
    cluster = NamedRelatedField(
        slug_field="name",
        queryset=Cluster.objects.all(),
        allow_null=True,
        required=False,
        help_text="The one cluster whose nodes the class counts (its key then ends in @<cluster>); null: fleet-wide, "
        "every cluster's nodes of its resource and product that no class scoped to their cluster counts.",
        error_messages={"does_not_exist": "No cluster {value}. GET /api/v1/clusters/ lists them."},
    )
    sharing_strategy = serializers.ChoiceField(
        choices=SHARING_MODES,
        required=False,
        help_text="How users share one device: none, time-slicing or mps. An admin sets it on a DRA class (a MIG "
        "class takes MPS only); a device-plugin class follows its nodes' sharing.",
    )
    replicas = serializers.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_SHARING_REPLICAS,
        help_text="Users sharing one device (1: not shared); with sharing a unit of the class is 1/replicas of one.",
    )
    alternatives = AlternativesField(
        required=False,
        help_text="A DRA class's alternatives: the keys of other DRA classes of the same cluster and kind of unit "
        "that may serve a request of this one when it cannot start, first choice first ([] for none). A job gets "
        "the first that fits and is charged to that class's quota (admins set them).",
    )
    clusters = serializers.SerializerMethodField(
        help_text="Per cluster of the fleet that has units of the class: its name, total and free units now (an "
        "unreachable cluster's units count in total, none free)."
    )

    class Meta:
        model = ResourceClass
        fields = [
            "id", "key", "display_name", "alias", "description", "hidden", "cluster", "kind", "resource_name",
            "product", "product_label", "profile", "sharing_strategy", "replicas", "memory_mb", "gpu_fraction",
            "total", "allocatable", "in_use", "free", "node_count", "present", "updated", "clusters", "alternatives",
        ]  # fmt: skip
        # What an admin may change; the rest comes from the clusters.
        read_only_fields = [
            f
            for f in fields
            if f not in ("alias", "description", "hidden", "cluster", "sharing_strategy", "replicas", "alternatives")
        ]

    @extend_schema_field(
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "cluster": {"type": "string"},
                    "total": {"type": "integer"},
                    "free": {"type": "integer"},
                },
            },
        }
    )
    def get_clusters(self, rc: ResourceClass) -> list[dict]:
        shares = self.context.get("cluster_shares")
        if shares is None:
            shares = self.context["cluster_shares"] = cluster_shares()
        return class_by_cluster(rc, shares)

    def validate_alias(self, value):
        value = value.strip()
        if len(value) > 100:
            raise serializers.ValidationError("Keep the alias under 100 characters.")
        return value


class NodeConfigOperationSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    cluster = serializers.CharField(
        source="node.cluster.name", read_only=True, help_text="The cluster of the fleet the node belongs to."
    )
    url = serializers.HyperlinkedIdentityField(view_name="api:nodeconfigoperation-detail")
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None, allow_null=True)
    config = serializers.CharField(source="config_name", read_only=True)
    can_revert = serializers.BooleanField(read_only=True)
    can_abort = serializers.BooleanField(read_only=True)
    can_force = serializers.BooleanField(read_only=True)
    forced_by = serializers.CharField(source="forced_by.username", read_only=True, default=None, allow_null=True)

    class Meta:
        model = NodeConfigOperation
        fields = [
            "url", "id", "node", "cluster", "kind", "state", "config", "requested", "previous", "expected_resources",
            "expected_product_label", "warnings", "cluster_state", "reason", "log", "requested_by", "revert_of",
            "can_revert", "can_abort", "can_force", "forced_at", "forced_by", "force_reason", "created",
            "state_changed_at", "drain_grace_until", "deadline", "finished_at",
        ]  # fmt: skip
        read_only_fields = fields


class NodeConfigRequestSerializer(serializers.Serializer):
    """A reconfiguration request. MIG: ``preset`` for the whole node, or ``gpus`` with one layout per GPU
    (``"3g.40gb@0, 3g.40gb@4"``; a profile without ``@slot`` goes where the driver puts it; ``"off"``: MIG
    disabled). Time-slicing: ``replicas`` per GPU (1 = whole GPUs) and ``rename`` to advertise
    nvidia.com/gpu.shared; ``sharing: mps`` shares through CUDA MPS instead."""

    node = serializers.CharField(max_length=253, help_text="The node's name.")
    cluster = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=63,
        help_text="The node's cluster, where several clusters of the fleet have a node of that name.",
    )  # fmt: skip
    kind = serializers.ChoiceField(choices=NodeConfigKind.choices)
    preset = serializers.CharField(required=False, allow_blank=True, default="")
    gpus = serializers.ListField(child=serializers.CharField(allow_blank=True), required=False, allow_empty=True)
    replicas = serializers.IntegerField(required=False, min_value=1, max_value=64)
    rename = serializers.BooleanField(required=False, default=False)
    sharing = serializers.ChoiceField(
        choices=["time-slicing", "mps"],
        required=False,
        default="time-slicing",
        help_text="With kind time-slicing: take turns (time-slicing) or run at once through CUDA MPS (mps, 2-48 "
        "clients per GPU; the GPU Operator runs the MPS control daemon).",
    )
    dry_run = serializers.BooleanField(
        required=False, default=False, help_text="Only check the request and say what the node would advertise."
    )

    def validate(self, attrs):
        """``node`` becomes the Node: by name, in ``cluster`` when given (400 naming the clusters to choose from)."""
        try:
            attrs["node"] = Node.objects.present().named(attrs["node"], attrs.get("cluster", ""))
        except Node.DoesNotExist as error:
            raise serializers.ValidationError({"node": [str(error)]}) from None
        except Node.MultipleObjectsReturned as error:
            raise serializers.ValidationError({"cluster": [str(error)]}) from None
        return attrs


class PodWorkSerializer(serializers.Serializer):
    """One workload on the node (listed once however many of its pods run there)."""

    label = serializers.CharField()
    url = serializers.CharField(allow_blank=True)
    owner = serializers.CharField(allow_blank=True)
    team = serializers.CharField(allow_blank=True)
    pods = serializers.IntegerField(help_text="How many of its pods run on the node (a service's replicas, say).")


class DrainPreviewSerializer(serializers.Serializer):
    """What draining the node touches now: work requeued after the grace period, and work holding it up."""

    requeued = PodWorkSerializer(many=True)
    blocking = PodWorkSerializer(many=True)


class NodeConfigPlanSerializer(serializers.Serializer):
    kind = serializers.CharField()
    requested = serializers.JSONField()
    expected_resources = serializers.DictField(child=serializers.IntegerField())
    expected_product_label = serializers.CharField()
    warnings = serializers.ListField(child=serializers.CharField())
    drain = DrainPreviewSerializer(read_only=True, allow_null=True)


class ReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=1000)


class NodeSmokeTestSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    cluster = serializers.CharField(
        source="node.cluster.name", read_only=True, help_text="The cluster of the fleet the node belongs to."
    )
    requested_by = serializers.CharField(source="requested_by.username", read_only=True, default=None, allow_null=True)

    class Meta:
        model = NodeSmokeTest
        fields = ["id", "node", "cluster", "state", "resource", "pod_name", "output", "reason", "requested_by",
                  "created", "finished_at"]  # fmt: skip
        read_only_fields = fields


#: What admins alone see of a cluster: how it is reached and what went wrong.
CLUSTER_ADMIN_FIELDS = ("connection", "kubeconfig_path", "kube_context", "server", "has_token", "last_error")


class ClusterSerializer(serializers.ModelSerializer):
    """A cluster of the fleet. Everyone signed in sees what it is and whether it is reachable; admins also see how
    it is reached (never the token: only whether one is stored); for others those fields are null."""

    url = serializers.HyperlinkedIdentityField(view_name="api:cluster-detail", lookup_field="name")
    # How it is reached: shown to admins, null for everyone else.
    connection = serializers.ChoiceField(choices=ClusterConnection.choices, read_only=True, allow_null=True)
    kubeconfig_path = serializers.CharField(read_only=True, allow_null=True)
    kube_context = serializers.CharField(read_only=True, allow_null=True)
    #: The API server's URL for a token connection; "" for the others.
    server = serializers.CharField(read_only=True, allow_null=True)
    has_token = serializers.BooleanField(read_only=True, allow_null=True)
    last_error = serializers.CharField(read_only=True, allow_null=True)
    nodes = serializers.IntegerField(read_only=True, source="node_total")
    gpus = serializers.IntegerField(read_only=True, source="gpu_total")

    class Meta:
        model = Cluster
        fields = [
            "url", "id", "name", "display_name", "region", "labels", "health", "unreachable_since", "server_version",
            "capabilities", "last_sync_at", "last_checked_at", "nodes", "gpus", *CLUSTER_ADMIN_FIELDS,
        ]  # fmt: skip
        read_only_fields = fields

    def to_representation(self, instance):
        data = super().to_representation(instance)
        request = self.context.get("request")
        if not (request and request.user.is_staff):
            for name in CLUSTER_ADMIN_FIELDS:
                data[name] = None
        return data


class ClusterInputSerializer(serializers.Serializer):
    """Registering a cluster, or changing one (PATCH: only what is sent changes; an empty token keeps the stored
    one). The connection decides what else is needed: token → server and token (ca_certificate unless the server's
    certificate is publicly trusted); kubeconfig → kubeconfig_path (default: $KUBECONFIG) and kube_context;
    in_cluster → nothing; simulated → sim_scenario."""

    name = serializers.SlugField(max_length=63)
    display_name = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    region = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    labels = serializers.DictField(
        child=serializers.CharField(max_length=63, allow_blank=True), required=False, default=dict
    )
    connection = serializers.ChoiceField(
        choices=[c for c in ClusterConnection.choices if c[0] != ClusterConnection.SETTINGS]
    )
    kubeconfig_path = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    kube_context = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    server = serializers.URLField(max_length=500, required=False, allow_blank=True, default="")
    ca_certificate = serializers.CharField(required=False, allow_blank=True, default="", trim_whitespace=False)
    token = serializers.CharField(required=False, allow_blank=True, default="", write_only=True)
    sim_scenario = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")

    def validate_labels(self, labels):
        bad = [key for key in labels if not key or len(key) > 253]
        if bad:
            raise serializers.ValidationError("Label keys must be 1 to 253 characters.")
        return labels


class PoolMigProfilesSerializer(serializers.Serializer):
    """A node pool's MIG policy: which profiles teams may claim from its dynamic-MIG GPUs."""

    pool = serializers.CharField(help_text="The pool's name as its nodes' label gives it; '' for unlabelled nodes.")
    gpu_request = serializers.CharField(help_text="How workloads request the pool's GPUs.")
    mig_profiles = serializers.ListField(
        child=serializers.CharField(), allow_null=True,
        help_text="The MIG profiles teams may claim; null: every profile the pool's GPUs support.",
    )  # fmt: skip
    supported = serializers.DictField(
        child=serializers.ListField(child=serializers.CharField()),
        help_text="GPU product label -> the MIG profiles it supports, for each MIG-capable product in the pool.",
    )


class PoolMigProfilesInputSerializer(serializers.Serializer):
    pool = serializers.CharField(allow_blank=True, help_text="The node pool ('' for nodes without a pool label).")
    profiles = serializers.ListField(
        child=serializers.CharField(), allow_null=True,
        help_text="The MIG profiles teams may claim (an empty list: none); null: every profile the GPUs support.",
    )  # fmt: skip
