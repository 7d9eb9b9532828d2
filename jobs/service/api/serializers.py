"""The API's shapes of an inference service: what GET answers (spec, state, address, health, rollout progress,
granted and borrowed replicas, per-replica pods), what POST creates (the replica spec a job takes plus the
service's own fields) and what PATCH changes. Shapes only: jobs.service.ops validates the rest (quota, probes,
replica bounds, the metric) and its errors come back as one 400 with every problem."""

from __future__ import annotations

from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from jobs.api.serializers import (
    ArgvField,
    CoresField,
    EnvField,
    LabelsField,
    PriorityField,
    ResourceClassRefField,
    SecretEnvField,
    SecretFilesField,
    VolumeMountsField,
    django_check,
    team_field,
)
from jobs.choices import Architecture, Priority, ServiceMetric
from jobs.models.service import InferenceService
from jobs.service import summary as service_summary
from jobs.validation import parse_image, validate_job_name, validate_working_dir

PROBE_TYPES = [("http", "HTTP GET on a path"), ("tcp", "TCP connect")]


class ProbeSerializer(serializers.Serializer):
    """A readiness or liveness probe."""

    type = serializers.ChoiceField(choices=PROBE_TYPES, default="http")
    path = serializers.CharField(
        required=False, allow_blank=True, max_length=1024, help_text="For http: the path, e.g. /health."
    )
    port = serializers.IntegerField(
        required=False, min_value=1, max_value=65535, help_text="Left out: the service's port."
    )
    initial_delay_seconds = serializers.IntegerField(required=False, min_value=0, max_value=3600)
    period_seconds = serializers.IntegerField(required=False, min_value=1, max_value=300)
    failure_threshold = serializers.IntegerField(required=False, min_value=1, max_value=30)

    def to_internal_value(self, data):
        if isinstance(data, dict) and (unknown := sorted(set(data) - set(self.fields))):
            raise serializers.ValidationError({k: [f"Unknown probe setting; use {', '.join(self.fields)}."]
                                               for k in unknown})  # fmt: skip
        return super().to_internal_value(data)


def _checked(serializer: serializers.Serializer, data, what: str, parse):
    """``parse(data)`` with the fields DRF would ignore named too: a pipeline that sends "replicas": 4 must hear
    about it, in the same 400 as every other problem of the request."""
    errors = _unknown_fields(serializer, data, what)
    try:
        value = parse(data)
    except serializers.ValidationError as error:
        if not errors or not isinstance(error.detail, dict):
            raise
        raise serializers.ValidationError({**error.detail, **errors}) from None
    if errors:
        raise serializers.ValidationError(errors)
    return value


def _unknown_fields(serializer: serializers.Serializer, data, what: str) -> dict:
    if not hasattr(data, "keys"):
        return {}
    writable = [name for name, field in serializer.fields.items() if not field.read_only]
    errors = {}
    for name in sorted(set(data) - set(writable)):
        errors[name] = (
            ["Set by the portal; leave it out of the request."]
            if name in serializer.fields
            else [f"Unknown field. {what} takes: {', '.join(writable)}."]
        )
    return errors


@extend_schema_field(ProbeSerializer(allow_null=True))
class ProbeOutField(serializers.ReadOnlyField):
    """A probe as stored ({} for none)."""


class ReplicaPodSerializer(serializers.Serializer):
    pod = serializers.CharField()
    node = serializers.CharField()
    ready = serializers.BooleanField()
    restarts = serializers.IntegerField()
    gpu_util = serializers.FloatField(source="util", allow_null=True, help_text="Mean % over the idle window.")


class AddressSerializer(serializers.Serializer):
    dns = serializers.CharField(help_text="<name>.<namespace>.svc.cluster.local:<port>, inside the cluster.")
    url = serializers.CharField(help_text="Outside the cluster, from the operator's template; blank when none.")


class HealthSerializer(serializers.Serializer):
    ready = serializers.IntegerField()
    desired = serializers.IntegerField()
    restarts = serializers.IntegerField()
    last_probe_failure = serializers.CharField(help_text="The newest probe failure in words; blank when none.")


class RolloutSerializer(serializers.Serializer):
    revision = serializers.IntegerField()
    updated = serializers.IntegerField()
    ready = serializers.IntegerField()
    available = serializers.IntegerField()
    desired = serializers.IntegerField()
    complete = serializers.BooleanField()


class ServiceSerializer(serializers.ModelSerializer):
    """A service as GET shows it."""

    url = serializers.HyperlinkedIdentityField(view_name="api:service-detail")
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    job = serializers.IntegerField(source="job_id", read_only=True, help_text="The job holding the replica spec.")
    job_state = serializers.CharField(source="job.state", read_only=True)
    wait_reason = serializers.CharField(source="job.wait_reason", read_only=True)
    wait_message = serializers.CharField(source="job.wait_message", read_only=True)
    image = serializers.CharField(source="job.image", read_only=True)
    command = serializers.ListField(source="job.command", child=serializers.CharField(), read_only=True)
    args = serializers.ListField(source="job.args", child=serializers.CharField(), read_only=True)
    env = EnvField(source="job.env", read_only=True)
    secret_env = SecretEnvField(source="job.secret_env", read_only=True)
    secret_files = SecretFilesField(source="job.secret_files", read_only=True)
    volumes = VolumeMountsField(source="job.volumes", read_only=True)
    resource_class = serializers.IntegerField(source="job.resource_class_id", read_only=True)
    resource_class_name = serializers.CharField(source="job.resource_class.display_name", read_only=True)
    count = serializers.IntegerField(source="job.count", read_only=True, help_text="Units per replica.")
    cpu = CoresField(source="job.cpu_millicores", read_only=True)
    memory_mb = serializers.IntegerField(source="job.memory_mb", read_only=True)
    readiness = ProbeOutField()
    liveness = ProbeOutField()
    size = serializers.SerializerMethodField(help_text='Replica bounds × units per replica, e.g. "2–6 × 1 H100".')
    address = serializers.SerializerMethodField()
    health = serializers.SerializerMethodField()
    rollout = serializers.SerializerMethodField()
    hpa_desired = serializers.SerializerMethodField(help_text="What the autoscaler last wanted; null before.")
    replica_pods = serializers.SerializerMethodField()
    clusters = serializers.ListField(
        source="job.clusters", child=serializers.CharField(), read_only=True,
        help_text="The clusters it may run on, most preferred first (empty: the portal chooses).",
    )  # fmt: skip
    cluster = serializers.SlugRelatedField(
        source="job.cluster",
        slug_field="name",
        read_only=True,
        allow_null=True,
        help_text="The cluster its replicas run on; null until its minimum is admitted.",
    )

    class Meta:
        model = InferenceService
        fields = [
            "url", "id", "team", "owner", "name", "state", "job", "job_state", "wait_reason", "wait_message",
            "image", "command", "args", "env", "secret_env", "secret_files", "volumes", "resource_class",
            "resource_class_name", "count", "cpu", "memory_mb", "port", "readiness", "liveness", "min_replicas",
            "max_replicas", "metric", "metric_name", "metric_target", "granted_replicas", "borrowed_replicas",
            "revision", "size", "address", "health", "rollout", "hpa_desired", "replica_pods", "idle_since",
            "clusters", "cluster", "created", "stopped_at",
        ]  # fmt: skip
        read_only_fields = fields

    def get_size(self, service) -> str:
        return service_summary.size_text(service)

    @extend_schema_field(AddressSerializer)
    def get_address(self, service) -> dict:
        return {"dns": service_summary.dns_name(service), "url": service_summary.external_url(service)}

    @extend_schema_field(HealthSerializer)
    def get_health(self, service) -> dict:
        return HealthSerializer(service_summary.health(service)).data

    @extend_schema_field(RolloutSerializer)
    def get_rollout(self, service) -> dict:
        return RolloutSerializer(service_summary.rollout(service)).data

    def get_hpa_desired(self, service) -> int | None:
        desired = (service.observed or {}).get("desired")
        return int(desired) if isinstance(desired, int | float) else None

    @extend_schema_field(ReplicaPodSerializer(many=True))
    def get_replica_pods(self, service) -> list:
        rows = service_summary.replica_rows(service)
        if self.context.get("with_utilisation"):
            service_summary.with_utilisation(service, rows)
        return ReplicaPodSerializer(rows, many=True).data


class ServiceFieldsMixin(serializers.Serializer):
    """The service's own fields, as create and PATCH take them."""

    port = serializers.IntegerField(min_value=1, max_value=65535, help_text="The container port served.")
    readiness = ProbeSerializer(help_text="Gates traffic and rollouts.")
    liveness = ProbeSerializer(allow_null=True, help_text="Restarts a replica whose check keeps failing; null: none.")
    min_replicas = serializers.IntegerField(min_value=1, max_value=64)
    max_replicas = serializers.IntegerField(min_value=1, max_value=64)
    metric = serializers.ChoiceField(choices=ServiceMetric.choices, help_text="What the autoscaler scales on.")
    metric_name = serializers.CharField(
        allow_blank=True, max_length=253, help_text="A custom or external metric's name; blank for cpu."
    )
    metric_target = serializers.FloatField(
        help_text="cpu: utilisation % per replica; else the metric's average per replica."
    )

    SERVICE_FIELD_NAMES = ("port", "readiness", "liveness", "min_replicas", "max_replicas", "metric", "metric_name",
                           "metric_target")  # fmt: skip

    def service_fields(self) -> dict:
        data = self.validated_data
        fields = {name: data[name] for name in self.SERVICE_FIELD_NAMES if name in data}
        if "liveness" in fields and fields["liveness"] is None:
            fields["liveness"] = {}
        return fields


class ServiceCreateSerializer(ServiceFieldsMixin):
    """POST /api/v1/services/: the replica spec (as a job's) and the service's fields."""

    team = team_field()
    template = serializers.CharField(
        write_only=True, required=False, max_length=80,
        help_text="Start from this service template of the team's (NAME or NAME@VERSION; "
        "GET /api/v1/teams/{slug}/templates/): the fields given here change its spec.",
    )  # fmt: skip
    name = serializers.CharField(max_length=40)
    image = serializers.CharField(max_length=255)
    command = ArgvField(required=False, default=list, help_text="Replaces the image's entrypoint when given.")
    args = ArgvField(required=False, default=list)
    env = EnvField(required=False, default=list)
    secret_env = SecretEnvField(required=False, default=list)
    secret_files = SecretFilesField(required=False, default=list)
    resource_class = ResourceClassRefField()
    count = serializers.IntegerField(min_value=1, max_value=64, default=1, help_text="Units per replica.")
    cpu = CoresField(source="cpu_millicores", min_value=Decimal("0.1"), max_value=Decimal(256), default=2000,
                     help_text="CPU cores per replica.")  # fmt: skip
    memory_mb = serializers.IntegerField(min_value=64, max_value=4 * 1024 * 1024, default=8192)
    priority = PriorityField(default=Priority.NORMAL)
    labels = LabelsField(required=False, default=dict)
    working_dir = serializers.CharField(required=False, default="", allow_blank=True, max_length=255)
    volumes = VolumeMountsField(required=False, default=list)
    shm_mb = serializers.IntegerField(required=False, allow_null=True, default=None)
    architecture = serializers.ChoiceField(choices=Architecture.choices, required=False, allow_blank=True,
                                           default="")  # fmt: skip
    clusters = serializers.ListField(
        child=serializers.CharField(max_length=63), required=False, default=list, max_length=16,
        help_text="Clusters of the fleet the service may run on, most preferred first: all its replicas run on one "
        "of them, the first with room for its minimum (GET /api/v1/clusters/ lists them); empty: the portal "
        "chooses. A cluster that is unreachable now may be named (the service waits for it or uses the next).",
    )  # fmt: skip

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        defaults = {"port": 8000, "readiness": {"type": "http", "path": "/health"}, "liveness": None,
                    "min_replicas": 1, "max_replicas": None, "metric": ServiceMetric.CPU, "metric_name": "",
                    "metric_target": 70.0}  # fmt: skip
        for name, value in defaults.items():
            field = self.fields[name]
            field.required = False
            if value is not None or name == "liveness":
                field.default = value

    def to_internal_value(self, data):
        return _checked(self, data, "A service", super().to_internal_value)

    def validate_name(self, value):
        django_check(validate_job_name, value)
        return value

    def validate_image(self, value):
        django_check(parse_image, value)
        return value.strip()

    def validate_working_dir(self, value):
        django_check(validate_working_dir, value)
        return value

    def spec(self) -> dict:
        data = self.validated_data
        keys = ("name", "image", "command", "args", "env", "secret_env", "secret_files", "count", "cpu_millicores",
                "memory_mb", "priority", "labels", "working_dir", "volumes", "shm_mb", "architecture",
                "clusters")  # fmt: skip
        return {key: data[key] for key in keys if key in data}

    def service_fields(self) -> dict:
        fields = super().service_fields()
        if fields.get("max_replicas") is None:
            fields["max_replicas"] = fields.get("min_replicas", 1)
        return fields


class ServiceUpdateSerializer(ServiceFieldsMixin):
    """PATCH: any of these; image/command/args/env/secrets/volumes/CPU/memory/port/probes roll out a new revision,
    replica bounds and the metric change the autoscaler only."""

    image = serializers.CharField(max_length=255)
    command = ArgvField()
    args = ArgvField()
    env = EnvField()
    secret_env = SecretEnvField()
    secret_files = SecretFilesField()
    volumes = VolumeMountsField()
    cpu = CoresField(source="cpu_millicores", min_value=Decimal("0.1"), max_value=Decimal(256))
    memory_mb = serializers.IntegerField(min_value=64, max_value=4 * 1024 * 1024)
    shm_mb = serializers.IntegerField(allow_null=True)
    working_dir = serializers.CharField(allow_blank=True, max_length=255)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for field in self.fields.values():
            field.required = False

    def to_internal_value(self, data):
        return _checked(self, data, "A service's update", super().to_internal_value)

    def validate_image(self, value):
        django_check(parse_image, value)
        return value.strip()

    def changes(self) -> dict:
        data = dict(self.validated_data)
        if "liveness" in data and data["liveness"] is None:
            data["liveness"] = {}
        return data


class ScaleSerializer(serializers.Serializer):
    min_replicas = serializers.IntegerField(min_value=1, max_value=64)
    max_replicas = serializers.IntegerField(min_value=1, max_value=64)
