from rest_framework import serializers

from ..models import GPU, MigPartition, Node, ResourceClass


class MigPartitionSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="gpu.node.name", read_only=True)
    gpu_index = serializers.IntegerField(source="gpu.index", read_only=True)

    class Meta:
        model = MigPartition
        fields = [
            "id", "node", "gpu", "gpu_index", "profile", "resource_name", "start", "size", "compute_slices",
            "memory_mb", "uuid", "placement_inferred",
        ]  # fmt: skip


class GPUSerializer(serializers.ModelSerializer):
    node = serializers.CharField(source="node.name", read_only=True)
    mig_partitions = MigPartitionSerializer(many=True, read_only=True)

    class Meta:
        model = GPU
        fields = ["id", "node", "index", "uuid", "product", "memory_mb", "mig_enabled", "sharing", "replicas",
                  "mig_partitions"]  # fmt: skip


class NodeSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="api:node-detail", lookup_field="name")
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    gpus_allocatable = serializers.IntegerField(read_only=True)
    gpus_in_use = serializers.IntegerField(read_only=True)

    class Meta:
        model = Node
        fields = [
            "url", "id", "name", "health", "ready", "unschedulable", "product", "gpu_count", "gpu_memory_mb",
            "gpu_family", "compute_capability", "driver_version", "cuda_version", "mig_capable", "mig_strategy",
            "mig_config", "mig_config_state", "sharing_strategy", "replicas", "device_plugin_ok", "capacity",
            "allocatable", "gpu_in_use", "gpus_allocatable", "gpus_in_use", "team", "first_seen", "last_seen",
            "gone_at",
        ]  # fmt: skip


class NodeDetailSerializer(NodeSerializer):
    gpus = GPUSerializer(many=True, read_only=True)

    class Meta(NodeSerializer.Meta):
        fields = NodeSerializer.Meta.fields + ["labels", "taints", "conditions", "diagnosis", "gpus"]


class ResourceClassSerializer(serializers.ModelSerializer):
    display_name = serializers.CharField(read_only=True)

    class Meta:
        model = ResourceClass
        fields = [
            "id", "key", "display_name", "alias", "description", "hidden", "kind", "resource_name", "product",
            "product_label", "profile", "replicas", "memory_mb", "gpu_fraction", "total", "allocatable", "in_use",
            "free", "node_count", "present", "updated",
        ]  # fmt: skip
        read_only_fields = [f for f in fields if f not in ("alias", "description", "hidden")]

    def validate_alias(self, value):
        value = value.strip()
        if len(value) > 100:
            raise serializers.ValidationError("Keep the alias under 100 characters.")
        return value
