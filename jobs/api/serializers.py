from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from gpus.models import ResourceClass
from portal.models import Team

from ..choices import Priority
from ..models import Job, JobEvent, Quota
from ..validation import parse_image, validate_argv, validate_env, validate_job_name

PRIORITY_NAMES = {p.value: p.name.lower() for p in Priority}
PRIORITY_VALUES = {name: value for value, name in PRIORITY_NAMES.items()}


def _django_check(check, value):
    try:
        check(value)
    except DjangoValidationError as error:
        raise serializers.ValidationError(error.messages) from None


@extend_schema_field(
    {
        "type": "array",
        "items": {"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}}},
    }
)
class EnvField(serializers.Field):
    """A list of {"name", "value"} objects, or a {"NAME": "value"} mapping."""

    default_error_messages = {"invalid": 'Give a list of {"name": ..., "value": ...} objects or a {NAME: value} map.'}

    def to_internal_value(self, data):
        if isinstance(data, dict):
            data = [{"name": k, "value": v} for k, v in data.items()]
        if not isinstance(data, list) or not all(isinstance(i, dict) and set(i) <= {"name", "value"} for i in data):
            self.fail("invalid")
        env = [{"name": i.get("name", ""), "value": i.get("value", "")} for i in data]
        for item in env:
            if isinstance(item["value"], int | float) and not isinstance(item["value"], bool):
                item["value"] = str(item["value"])
        _django_check(validate_env, env)
        return env

    def to_representation(self, value):
        return value


class ArgvField(serializers.ListField):
    child = serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=4096)

    def to_internal_value(self, data):
        words = super().to_internal_value(data)
        _django_check(lambda w: validate_argv(w, self.field_name), words)
        return words


class JobSerializer(serializers.ModelSerializer):
    url = serializers.HyperlinkedIdentityField(view_name="api:job-detail")
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all(), required=False)
    owner = serializers.CharField(source="owner.username", read_only=True)
    resource_class = serializers.CharField(
        help_text="A resource class id, or its key such as nvidia.com/gpu@NVIDIA-H100-80GB-HBM3."
    )
    resource_class_name = serializers.CharField(source="resource_class.display_name", read_only=True)
    command = ArgvField(required=False, default=list)
    args = ArgvField(required=False, default=list)
    env = EnvField(required=False, default=list)
    count = serializers.IntegerField(min_value=1, max_value=64, default=1)
    cpu = serializers.DecimalField(
        max_digits=6, decimal_places=3, min_value=Decimal("0.1"), max_value=Decimal(256), default=Decimal(2),
        help_text="CPU cores (0.1 to 256).",
    )  # fmt: skip
    memory_mb = serializers.IntegerField(min_value=64, max_value=4 * 1024 * 1024, default=8192)
    priority = serializers.ChoiceField(choices=list(PRIORITY_VALUES), default="normal")
    max_runtime_seconds = serializers.IntegerField(min_value=60, default=4 * 3600)
    gpu_units = serializers.FloatField(read_only=True)

    class Meta:
        model = Job
        fields = [
            "url", "id", "team", "owner", "kind", "name", "image", "command", "args", "env", "resource_class",
            "resource_class_name", "count", "cpu", "memory_mb", "priority", "preemptible", "max_runtime_seconds",
            "state", "wait_reason", "wait_message", "wait_detail", "queue_position", "node_name", "borrowed",
            "workload_name", "exit_code", "failure_reason", "submitted_at", "admitted_at", "started_at",
            "finished_at", "gpu_units", "resubmitted_from",
        ]  # fmt: skip
        read_only_fields = [
            "kind", "state", "wait_reason", "wait_message", "wait_detail", "queue_position", "node_name", "borrowed",
            "workload_name", "exit_code", "failure_reason", "submitted_at", "admitted_at", "started_at",
            "finished_at", "resubmitted_from",
        ]  # fmt: skip

    def to_representation(self, job):
        data = super().to_representation(job)
        data["resource_class"] = job.resource_class_id
        data["cpu"] = job.cpu_millicores / 1000
        data["priority"] = PRIORITY_NAMES.get(job.priority, str(job.priority))
        return data

    def to_internal_value(self, data):
        writable = {name for name, field in self.fields.items() if not field.read_only}
        unknown = sorted(set(data) - writable) if hasattr(data, "keys") else []
        if unknown:
            raise serializers.ValidationError(
                {name: ["Unknown field; see /api/docs/ for the fields a job takes."] for name in unknown}
            )
        return super().to_internal_value(data)

    def validate_name(self, value):
        _django_check(validate_job_name, value)
        return value

    def validate_image(self, value):
        _django_check(parse_image, value)
        return value.strip()

    def validate_max_runtime_seconds(self, value):
        if value > settings.PORTAL_JOB_MAX_RUNTIME_SECONDS:
            raise serializers.ValidationError(f"At most {settings.PORTAL_JOB_MAX_RUNTIME_SECONDS} seconds.")
        return value

    def validate_resource_class(self, value):
        lookup = {"pk": int(value)} if str(value).isdigit() else {"key": value}
        rc = ResourceClass.objects.filter(**lookup).first()
        user = self.context["request"].user
        if rc is None or (rc.hidden and not user.is_staff):
            raise serializers.ValidationError(
                f"No resource class '{value}'. GET /api/v1/resource-classes/ lists the ones you can request."
            )
        return rc

    def submit_fields(self) -> dict:
        data = self.validated_data
        return {
            "name": data["name"],
            "image": data["image"],
            "command": data.get("command", []),
            "args": data.get("args", []),
            "env": data.get("env", []),
            "count": data["count"],
            "cpu_millicores": int(data["cpu"] * 1000),
            "memory_mb": data["memory_mb"],
            "priority": PRIORITY_VALUES[data["priority"]],
            "preemptible": data.get("preemptible", False),
            "max_runtime_seconds": data["max_runtime_seconds"],
        }


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["at", "kind", "message", "data"]


class QuotaSerializer(serializers.ModelSerializer):
    team = serializers.SlugRelatedField(slug_field="slug", queryset=Team.objects.all())
    resource_class = serializers.PrimaryKeyRelatedField(queryset=ResourceClass.objects.all())
    resource_class_name = serializers.CharField(source="resource_class.display_name", read_only=True)
    used = serializers.IntegerField(read_only=True, help_text="Units the team's active jobs hold now.")
    updated_by = serializers.CharField(source="updated_by.username", read_only=True, default=None)
    guaranteed = serializers.IntegerField(min_value=0)
    limit = serializers.IntegerField(min_value=0)
    monthly_gpu_hours = serializers.DecimalField(
        max_digits=10, decimal_places=1, min_value=Decimal(0), required=False, allow_null=True
    )

    class Meta:
        model = Quota
        fields = [
            "id", "team", "resource_class", "resource_class_name", "guaranteed", "limit", "monthly_gpu_hours", "used",
            "updated", "updated_by",
        ]  # fmt: skip
        validators = []  # uniqueness is explained in validate(), not with DRF's generic message

    def validate(self, attrs):
        team = attrs.get("team", getattr(self.instance, "team", None))
        rc = attrs.get("resource_class", getattr(self.instance, "resource_class", None))
        guaranteed = attrs.get("guaranteed", getattr(self.instance, "guaranteed", 0))
        limit = attrs.get("limit", getattr(self.instance, "limit", 0))
        if limit < guaranteed:
            raise serializers.ValidationError(
                {"limit": [f"The limit ({limit}) must be at least the guaranteed amount ({guaranteed})."]}
            )
        if self.instance is None:
            existing = Quota.objects.filter(team=team, resource_class=rc).first()
            if existing is not None:
                raise serializers.ValidationError(
                    {"resource_class": [f"Team {team.slug} already has quota #{existing.pk} for this class; "
                                        f"change it with PATCH /api/v1/quotas/{existing.pk}/."]}
                )  # fmt: skip
        elif ("team" in attrs and attrs["team"] != self.instance.team) or (
            "resource_class" in attrs and attrs["resource_class"] != self.instance.resource_class
        ):
            raise serializers.ValidationError("A quota's team and resource class cannot change; create another.")
        return attrs
