import difflib
from collections.abc import Mapping
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.api.serializers import TeamSlugField
from core.api.bounds import is_id
from core.api.kept import FieldsBuiltOnce, KeptAnswers, KeptChecks
from core.api.strict_body import unknown_field_errors
from gpus.models import ResourceClass
from jobs.checkpoints import REPORTS, checkpoint_problems, normalised
from jobs.choices import Architecture, JobKind, JobState, Priority, RankState, TopologyMode, WaitReason
from jobs.models import Job, JobArray, JobEvent
from jobs.storage.mounts import secret_env_problems, secret_file_problems
from jobs.validation import (
    architecture_problem,
    parse_image,
    validate_argv,
    validate_env,
    validate_job_name,
    validate_labels,
    validate_working_dir,
)

PRIORITY_NAMES = {p.value: p.name.lower() for p in Priority}
PRIORITY_VALUES = {name: value for value, name in PRIORITY_NAMES.items()}


def django_check(check, value):
    """Run one of jobs.validation's checks, so the API and the browser form say the same words."""
    try:
        check(value)
    except DjangoValidationError as error:
        raise serializers.ValidationError(error.messages) from None


@extend_schema_field(
    {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "value": {"type": "string"}},
            "required": ["name", "value"],
        },
        "description": 'A list of {"name", "value"} objects; on input a {"NAME": "value"} object is accepted too.',
    }
)
class EnvField(serializers.Field):
    """A list of {"name", "value"} objects, or a {"NAME": "value"} mapping; stored as the list, in order."""

    # Braces doubled: DRF formats error messages with str.format.
    default_error_messages = {
        "invalid": 'Give a list of {{"name": ..., "value": ...}} objects or a {{"NAME": "value"}} object.'
    }

    def to_internal_value(self, data):
        if isinstance(data, dict):
            data = [{"name": k, "value": v} for k, v in data.items()]
        if not isinstance(data, list) or not all(isinstance(i, dict) and set(i) <= {"name", "value"} for i in data):
            self.fail("invalid")
        env = [{"name": i.get("name", ""), "value": i.get("value", "")} for i in data]
        for item in env:
            # {"EPOCHS": 10} means the text "10"; a container's environment has only strings.
            if isinstance(item["value"], int | float) and not isinstance(item["value"], bool):
                item["value"] = str(item["value"])
        django_check(validate_env, env)
        return env

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "string"},
        "description": 'Labels in Kubernetes label grammar, e.g. {"git-sha": "1a2b3c4", "example.com/run": "42"}; '
        "put on the workload and its pods. Filter the job list with ?label=key=value.",
    }
)
class LabelsField(serializers.Field):
    """{key: value} job labels, every problem reported at once (jobs.validation.validate_labels)."""

    def to_internal_value(self, data):
        django_check(validate_labels, data)
        return dict(data)

    def to_representation(self, value):
        return value


class CheckpointSchema(serializers.Serializer):
    """How a job checkpoints (the schema of ``checkpoint``; jobs.checkpoints checks it). ``{}``: none declared, so
    no key is required by the schema; a declaration names its grace (jobs.checkpoints says so when it does not)."""

    signal = serializers.ChoiceField(choices=["SIGTERM", "SIGINT", "SIGHUP", "SIGUSR1", "SIGUSR2"], default="SIGTERM")
    grace_seconds = serializers.IntegerField(
        min_value=30, required=False, help_text="Needed to declare a checkpoint; at most PORTAL_CHECKPOINT_GRACE_MAX."
    )
    report = serializers.ChoiceField(
        choices=list(REPORTS), default="api",
        help_text='"api": the job calls with an API token it was given; "token": the portal gives each attempt a '
        "token for this job's checkpoints only (PORTAL_CHECKPOINT_TOKEN, PORTAL_CHECKPOINT_URL).",
    )  # fmt: skip


@extend_schema_field(CheckpointSchema)
class CheckpointField(serializers.Field):
    """How the job checkpoints (jobs.checkpoints.checkpoint_problems), every problem at once."""

    def to_internal_value(self, data):
        if problems := checkpoint_problems(data):
            raise serializers.ValidationError(problems)
        return normalised(data)

    def to_representation(self, value):
        return value


class ArgvField(serializers.ListField):
    child = serializers.CharField(allow_blank=True, trim_whitespace=False, max_length=4096)

    def to_internal_value(self, data):
        words = super().to_internal_value(data)
        django_check(lambda w: validate_argv(w, self.field_name), words)
        return words


@extend_schema_field(
    {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "secret": {"type": "string"}, "key": {"type": "string"}},
            "required": ["name", "secret", "key"],
        },
        "description": "Environment variables from the team's secrets: the variable `name` gets the value of `key` "
        "of the team secret `secret` (a secretKeyRef; the value never passes through the portal).",
    }
)
class SecretEnvField(serializers.Field):
    def to_internal_value(self, data):
        problems = secret_env_problems(data, [])
        if problems:
            raise serializers.ValidationError(problems)
        return [{"name": i["name"], "secret": i["secret"], "key": i["key"]} for i in data]

    def to_representation(self, value):
        return value


@extend_schema_field(
    {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {
                "secret": {"type": "string"},
                "path": {"type": "string"},
                "keys": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["secret", "path"],
        },
        "description": "Team secrets as read-only files: each key of `secret` (or only `keys`) becomes a file named "
        "after the key in the directory `path` (absolute, not a system directory, one mount per path).",
    }
)
class SecretFilesField(serializers.Field):
    def to_internal_value(self, data):
        problems = secret_file_problems(data)
        if problems:
            raise serializers.ValidationError(problems)
        return [{"secret": i["secret"], "path": i["path"], "keys": list(i.get("keys") or [])} for i in data]

    def to_representation(self, value):
        return value


class CoresField(serializers.DecimalField):
    """CPU cores in the API (4, 0.5), millicores in the database. Like every DRF default, ``default`` is the
    stored value (millicores)."""

    def __init__(self, **kwargs):
        kwargs.setdefault("max_digits", 6)
        kwargs.setdefault("decimal_places", 3)
        super().__init__(coerce_to_string=False, **kwargs)

    def run_validation(self, data=serializers.empty):
        is_empty, value = self.validate_empty_values(data)
        if is_empty:
            return value
        return int(super().run_validation(data) * 1000)

    def to_representation(self, millicores):
        return super().to_representation(Decimal(millicores) / 1000)


class PriorityField(serializers.ChoiceField):
    """The priority by name; the database keeps jobs.choices.Priority's number so it sorts (``default`` too)."""

    def __init__(self, **kwargs):
        super().__init__(choices=list(PRIORITY_VALUES), **kwargs)

    def run_validation(self, data=serializers.empty):
        is_empty, value = self.validate_empty_values(data)
        if is_empty:
            return value
        return PRIORITY_VALUES[super().run_validation(data)]

    def to_representation(self, value):
        return PRIORITY_NAMES.get(value, str(value))


@extend_schema_field(
    {
        "oneOf": [{"type": "integer"}, {"type": "string"}],
        "description": "A resource class id, or its key such as nvidia.com/gpu@NVIDIA-H100-80GB-HBM3 (on input); "
        "the id (on output).",
    }
)
class ResourceClassRefField(serializers.Field):
    default_error_messages = {
        "not_found": "No resource class '{value}'.{guess} `gpuportal classes` and GET /api/v1/resource-classes/ "
        "list the keys you can request."
    }

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int | str):
            self.fail("not_found", value=data, guess="")
        if "\x00" in str(data):  # no key holds one (and PostgreSQL refuses to compare with it)
            self.fail("not_found", value=data, guess="")
        if is_id(str(data)):  # ASCII digits the database can hold ("²" passes str.isdigit() but not int())
            lookup = {"pk": int(data)}
        else:  # by key, as pipelines send it
            lookup = {"key": str(data).strip()}
        try:  # both are unique: get() reads the one row without the class's ORDER BY
            rc = ResourceClass.objects.get(**lookup)
        except ResourceClass.DoesNotExist:
            rc = None
        # A hidden class answers like a missing one, so non-admins cannot probe for it.
        user = self.context["request"].user
        if rc is None or (rc.hidden and not user.is_staff):
            self.fail("not_found", value=data, guess=_closest_keys_text(str(data), user))
        return rc

    def to_representation(self, rc):
        return rc.pk


def _closest_keys_text(asked: str, user) -> str:
    """' Did you mean K1 or K2?' naming the keys of the classes ``user`` may request closest to ``asked`` (ux-walk 2
    #7: "nvidia.com/gpu@NVIDIA-A10" for the key "nvidia.com/gpu@NVIDIA-A10-SHARED"), or "" when none is close."""
    keys = list(ResourceClass.objects.visible_to(user).filter(present=True).values_list("key", flat=True))
    by_folded = {key.casefold(): key for key in keys}
    text = asked.strip().casefold()[:200]
    # A key cut short (the product without its suffix) or a part of one comes first, shortest first; then keys
    # that are spelled alike.
    within = sorted((k for k in by_folded if text and text in k), key=lambda k: (not k.startswith(text), len(k), k))
    alike = difflib.get_close_matches(text, [k for k in by_folded if k not in within], n=3, cutoff=0.6)
    named = [by_folded[key] for key in [*within, *alike][:3]]
    if not named:
        return ""
    words = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} or {named[-1]}"
    return f" Did you mean {words}?"


def team_field() -> serializers.SlugRelatedField:
    """The team a job or notebook is for, by slug (jobs and notebooks are submitted the same way)."""
    return TeamSlugField(required=False, help_text="Team slug; may be left out by someone in exactly one team.")


@extend_schema_field(
    {
        "type": "array",
        "maxItems": 16,
        "items": {
            "type": "object",
            "properties": {
                "claim": {"type": "string", "description": "A claim of the team's namespace (GET /api/v1/volumes/)."},
                "mount_path": {"type": "string", "description": "Absolute path in the container, e.g. /data."},
                "read_only": {"type": "boolean", "default": False},
            },
            "required": ["claim", "mount_path"],
            "additionalProperties": False,
        },
        "description": "The team's PersistentVolumeClaims to mount. Nothing else can be mounted (no hostPath).",
    }
)
class VolumeMountsField(serializers.Field):
    """A list of {"claim", "mount_path", "read_only"}; the shape only here, the rules in jobs.validation
    (check_volume_mounts, run by the service with the team known, so every problem is reported at once)."""

    default_error_messages = {
        "invalid": 'Give a list of {{"claim": ..., "mount_path": ..., "read_only": ...}} objects.',
    }

    def to_internal_value(self, data):
        if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
            self.fail("invalid")
        return [dict(item, read_only=item.get("read_only", False)) for item in data]

    def to_representation(self, value):
        return value


RANK_SCHEMA = {
    "type": "object",
    "properties": {
        "rank": {"type": "integer", "description": "0 is the rank MASTER_ADDR points at."},
        "node": {"type": "string", "description": "The node the rank runs on (empty before it is placed)."},
        "pod": {"type": "string", "description": "The rank's pod; ?pod= on the log endpoints reads its log."},
        # A plain string with the states listed, not an enum: a rank the cluster has not reported yet has "".
        "state": {"type": "string", "description": "One of: " + ", ".join(RankState.values) + " (or empty)."},
        "exit_code": {"type": "integer", "nullable": True},
        "reason": {"type": "string"},
    },
}


@extend_schema_field({"type": "array", "items": RANK_SCHEMA, "description": "Each rank (worker pod), rank order."})
class RanksField(serializers.ReadOnlyField):
    """Job.ranks as stored (H2's reconcile keeps it current), documented for the schema."""


@extend_schema_field(
    {"type": "array", "items": {"type": "string"}, "description": "The node of each rank while admitted, rank order."}
)
class NodeNamesField(serializers.ReadOnlyField):
    pass


def _iso(value):
    return value.isoformat() if value is not None else None


class EstimatedStartSerializer(serializers.Serializer):
    """A queued job's estimated start (docs/user-guide.md, "When will it start?")."""

    low = serializers.DateTimeField(allow_null=True, help_text="Likely not before; null: not within the horizon.")
    high = serializers.DateTimeField(allow_null=True, help_text="Likely by; null: possibly later than the horizon.")
    at = serializers.DateTimeField(help_text="When it was estimated.")
    text = serializers.CharField(help_text='In words: "likely between 14:20 and 15:05".')
    cluster = serializers.CharField(help_text="On a fleet: the cluster it is likely to start on; else blank.")


class JobSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    """A job: what it runs, on which resources, and where it stands (its state, why it waits, its place in the
    queue)."""

    url = serializers.HyperlinkedIdentityField(view_name="api:job-detail")
    team = team_field()
    owner = serializers.CharField(source="owner.username", read_only=True)
    # Blank once the job runs: the schema's enum must say so, or generated clients refuse every running job.
    wait_reason = serializers.ChoiceField(
        choices=WaitReason.choices, allow_blank=True, read_only=True, help_text="Why it waits; blank when it does not."
    )
    resource_class = ResourceClassRefField()
    template = serializers.CharField(
        write_only=True, required=False, max_length=80,
        help_text="Start from this workload template of the team's (NAME or NAME@VERSION; "
        "GET /api/v1/teams/{slug}/templates/): the fields given here change its spec.",
    )  # fmt: skip
    resource_class_name = serializers.CharField(source="resource_class.display_name", read_only=True)
    state_label = serializers.CharField(
        read_only=True,
        help_text="The state in words, as the pages show it: a stopped notebook session's or service's job is "
        '"Stopped" (its state stays "cancelled").',
    )
    command = ArgvField(required=False, default=list, help_text="Replaces the image's entrypoint when given.")
    args = ArgvField(required=False, default=list)
    env = EnvField(required=False, default=list)
    secret_env = SecretEnvField(required=False, default=list)
    secret_files = SecretFilesField(required=False, default=list)
    kind = serializers.ChoiceField(
        choices=JobKind.choices,  # every kind, as answers show them; a request may not ask for a notebook
        default=JobKind.BATCH,
        help_text="batch (one pod) or distributed (``workers`` pods, one node each, started together); notebooks "
        "are launched at /api/v1/notebooks/.",
    )
    count = serializers.IntegerField(
        min_value=1, max_value=64, default=1,
        help_text="Units, all on one node; for a distributed job the units of each worker (G).",
    )  # fmt: skip
    workers = serializers.IntegerField(
        min_value=1, default=1,
        help_text="Workers (W) of a distributed job, each on its own node with ``count`` units: W × count in all. "
        "1 for a batch job; at most PORTAL_MAX_WORKERS.",
    )  # fmt: skip
    topology_key = serializers.CharField(
        required=False, default="", allow_blank=True, max_length=317,
        help_text="A distributed job's workers share one value of this node label, one of the operator's "
        "PORTAL_TOPOLOGY_KEYS (a 400 lists them); blank: no constraint. Needs topology_mode.",
    )  # fmt: skip
    topology_mode = serializers.ChoiceField(
        choices=TopologyMode.choices, required=False, allow_blank=True, default="",
        help_text="prefer (one value when nodes allow, else anywhere) or require (wait for one value); blank "
        "with a blank topology_key.",
    )  # fmt: skip
    max_retries = serializers.IntegerField(
        min_value=0, default=0,
        help_text="Whole-job restarts after a worker fails (0 to 10, distributed jobs only).",
    )  # fmt: skip
    total_gpus = serializers.IntegerField(source="total_count", read_only=True, help_text="workers × count.")
    node_names = NodeNamesField()
    ranks = RanksField()
    cpu = CoresField(
        source="cpu_millicores", min_value=Decimal("0.1"), max_value=Decimal(256), default=2000,
        help_text="CPU cores (0.1 to 256), e.g. 4 or 0.5.",
    )  # fmt: skip
    memory_mb = serializers.IntegerField(min_value=64, max_value=4 * 1024 * 1024, default=8192)
    priority = PriorityField(default=Priority.NORMAL)
    max_runtime_seconds = serializers.IntegerField(min_value=60, default=4 * 3600)
    gpu_units = serializers.FloatField(
        read_only=True, help_text="workers × count × the class's fraction of a physical GPU."
    )
    labels = LabelsField(required=False, default=dict)
    checkpoint = CheckpointField(
        required=False, default=dict,
        help_text="Preemption sends the signal and stops the job after the grace; {}: none declared.",
    )  # fmt: skip
    working_dir = serializers.CharField(
        required=False, default="", allow_blank=True, max_length=255, trim_whitespace=True,
        help_text="Absolute path the command starts in; empty: the image's own.",
    )  # fmt: skip
    volumes = VolumeMountsField(required=False, default=list)
    shm_mb = serializers.IntegerField(
        required=False, allow_null=True, default=None,
        help_text="Size of /dev/shm (in memory) in MiB; default PORTAL_SHM_FRACTION of memory_mb.",
    )  # fmt: skip
    architecture = serializers.ChoiceField(
        choices=Architecture.choices,
        required=False,
        allow_blank=True,
        default="",
        help_text="Pin the job to amd64 or arm64 nodes (kubernetes.io/arch); blank: any node of the class.",
    )
    clusters = serializers.ListField(
        child=serializers.CharField(max_length=63), required=False, default=list, max_length=16,
        help_text="Clusters of the fleet the job may run on, most preferred first: it starts on the first that has "
        "room and spills to the next (GET /api/v1/clusters/ lists them); empty: wherever it can start soonest.",
    )  # fmt: skip
    cluster = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True, help_text="The cluster the job was placed on."
    )
    estimated_start = serializers.SerializerMethodField(help_text="While queued, once estimated; else null.")

    @extend_schema_field(EstimatedStartSerializer(allow_null=True))
    def get_estimated_start(self, job) -> dict | None:
        if job.state != JobState.QUEUED or job.estimated_at is None:
            return None
        return {
            "low": _iso(job.estimated_start_low), "high": _iso(job.estimated_start_high),
            "at": _iso(job.estimated_at), "text": job.estimated_start, "cluster": job.estimated_cluster,
        }  # fmt: skip

    class Meta:
        model = Job
        fields = [
            "url", "id", "team", "owner", "kind", "name", "image", "command", "args", "env", "secret_env",
            "secret_files", "resource_class",
            "resource_class_name", "count", "cpu", "memory_mb", "priority", "preemptible", "max_runtime_seconds",
            "state", "state_label", "wait_reason", "wait_message", "wait_detail", "queue_position", "node_name",
            "borrowed", "workload_name", "exit_code", "failure_reason", "submitted_at", "admitted_at", "started_at",
            "finished_at", "gpu_units", "resubmitted_from", "gpu_util_recent", "idle_since", "labels", "working_dir",
            "array", "array_index", "volumes", "shm_mb", "architecture", "clusters", "cluster",
            "workers", "topology_key", "topology_mode", "max_retries", "total_gpus", "node_names", "ranks",
            "failed_rank", "checkpoint", "last_checkpoint_at", "preemption_lost_gpu_seconds", "estimated_start",
            "template",
        ]  # fmt: skip
        read_only_fields = [
            "last_checkpoint_at", "preemption_lost_gpu_seconds",
            "failed_rank", "state", "wait_reason", "wait_message", "wait_detail", "queue_position", "node_name",
            "borrowed", "workload_name", "exit_code", "failure_reason", "submitted_at", "admitted_at", "started_at",
            "finished_at", "resubmitted_from", "gpu_util_recent", "idle_since", "array", "array_index", "cluster",
        ]  # fmt: skip

    def to_internal_value(self, data):
        if not isinstance(data, Mapping):
            return super().to_internal_value(data)  # DRF's 400: a JSON object of the fields is expected
        # DRF ignores fields it does not know; a pipeline that sends "gpus": 4 must hear about it, not get 1 GPU,
        # and in the same 400 as every other problem of the request (issue 31, item 15).
        unknown = unknown_field_errors(self, data, "A job")
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            # With the field errors, an architecture the class's nodes lack (jobs.actions.submit_job checks it
            # again with quota and placement), so one 400 lists both.
            errors = dict(error.detail) if isinstance(error.detail, dict) else {}
            if not errors:
                raise
            if "architecture" not in errors and "resource_class" not in errors:
                rc = self.fields["resource_class"].to_internal_value(data.get("resource_class"))
                if problem := architecture_problem(rc, str(data.get("architecture") or "")):
                    errors["architecture"] = [problem]
            raise serializers.ValidationError({**errors, **unknown}) from error
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

    def validate_kind(self, value):
        if value == JobKind.NOTEBOOK:
            raise serializers.ValidationError(
                "Launch a notebook with POST /api/v1/notebooks/; a job here is batch or distributed."
            )
        return value

    def validate_name(self, value):
        django_check(validate_job_name, value)
        return value

    def validate_image(self, value):
        django_check(parse_image, value)
        return value.strip()

    def validate_working_dir(self, value):
        django_check(validate_working_dir, value)
        return value

    def validate(self, attrs):
        names = {e["name"] for e in attrs.get("env") or []}
        twice = sorted({i["name"] for i in attrs.get("secret_env") or []} & names)
        if twice:
            raise serializers.ValidationError(
                {
                    "secret_env": [
                        f"{n} is also in env; give each variable once (as text or from a secret)." for n in twice
                    ]
                }
            )
        return attrs

    def validate_max_runtime_seconds(self, value):
        limit = settings.PORTAL_JOB_MAX_RUNTIME_SECONDS
        if value > limit:
            raise serializers.ValidationError(f"At most {limit} seconds ({limit / 3600:g} hours) on this portal.")
        return value

    def submit_fields(self) -> dict:
        """The validated request as jobs.actions.submit_job takes it (SUBMIT_FIELDS)."""
        return submit_fields(self.validated_data)

    def resubmit_data(self, job: Job, overrides) -> dict:
        """The request a resubmission of ``job`` with ``overrides`` (a body of this serializer's writable fields)
        amounts to: the job's own spec, as this serializer shows it, with the overrides on top. Validated with
        ``JobSerializer(data=...)`` exactly like a new job."""
        writable = [name for name, field in self.fields.items() if not field.read_only]
        shown = JobSerializer(job, context=self.context).data
        return {name: shown[name] for name in writable if name in shown} | dict(overrides)


def submit_fields(data: Mapping) -> dict:
    """A job's validated request (JobSerializer's validated data) as jobs.actions.submit_job takes it
    (SUBMIT_FIELDS)."""
    return {
        "name": data["name"],
        "image": data["image"],
        "command": data["command"],
        "args": data["args"],
        "env": data["env"],
        "secret_env": data.get("secret_env", []),
        "secret_files": data.get("secret_files", []),
        "count": data["count"],
        "cpu_millicores": data["cpu_millicores"],
        "memory_mb": data["memory_mb"],
        "priority": data["priority"],
        "preemptible": data.get("preemptible", False),
        "max_runtime_seconds": data["max_runtime_seconds"],
        "labels": data["labels"],
        "working_dir": data["working_dir"],
        "volumes": data.get("volumes") or [],
        "shm_mb": data.get("shm_mb"),
        "architecture": data.get("architecture", ""),
        "clusters": data.get("clusters") or [],
        "kind": data["kind"],
        "workers": data["workers"],
        "topology_key": data.get("topology_key", ""),
        "topology_mode": data.get("topology_mode", ""),
        "max_retries": data["max_retries"],
        "checkpoint": data.get("checkpoint") or {},
    }


#: Every job the API answers with (a detail, a page of the list, the job an action returns).
JOB_ANSWERS = KeptAnswers(JobSerializer, "api:job-detail")
#: Every job submission that reads well (POST /api/v1/jobs/).
JOB_REQUESTS = KeptChecks(JobSerializer)

#: A job's own columns its answer does not show (nor reads through ``state_label``, ``gpu_units`` or
#: ``estimated_start``): the cluster's bookkeeping, the idempotency record and what the cycle keeps for itself.
JOB_NOT_SHOWN = (
    "image_cuda", "state_changed_at", "preempt_at", "attempts", "workload_uid", "workload_created_at", "pod_name",
    "idempotency_key", "request_hash", "charged_gpu_seconds", "notebook",
)  # fmt: skip

#: What a job's answer reads of the rows it joins: the team's slug, the owner's name, the class's id, GPU fraction
#: and display name (``ResourceClass.display_name``: the alias, else the name made of the product, kind, profile,
#: replicas, sharing and key) and the cluster's name.
JOB_ANSWER_JOINS = (
    "team__slug", "owner__username", "resource_class__alias", "resource_class__product", "resource_class__kind",
    "resource_class__profile", "resource_class__replicas", "resource_class__sharing_strategy",
    "resource_class__key", "resource_class__gpu_fraction", "cluster__name",
)  # fmt: skip


def answered(jobs: QuerySet) -> QuerySet:
    """``jobs`` with the rows their answers join, reading only the columns the answers show: about 130 columns
    become 73, and compiling the query is most of a detail request's CPU (bench/api_cpu.py --profile detail). A
    column missed here would be read by a query of its own per job (tests/unit/jobs/test_api_queries.py counts
    them)."""
    own = [field.name for field in Job._meta.concrete_fields if field.name not in JOB_NOT_SHOWN]
    return jobs.select_related("team", "owner", "resource_class", "cluster").only(*own, *JOB_ANSWER_JOINS)


class JobArraySerializer(serializers.ModelSerializer):
    """A job array: its tasks' summary by state; the tasks are jobs (GET /api/v1/jobs/?array=<id>)."""

    url = serializers.HyperlinkedIdentityField(view_name="api:job-array-detail")
    team = serializers.CharField(source="team.slug", read_only=True)
    owner = serializers.CharField(source="owner.username", read_only=True)
    counts = serializers.SerializerMethodField(help_text='Tasks per state, e.g. {"running": 3, "queued": 10}.')
    summary = serializers.SerializerMethodField(help_text="The counts in words: 3 running, 10 queued, 1 failed.")
    tasks = serializers.SerializerMethodField(help_text="The tasks' job ids, by index.")

    class Meta:
        model = JobArray
        fields = ["url", "id", "team", "owner", "name", "size", "parallelism", "created", "counts", "summary", "tasks"]
        read_only_fields = fields

    def get_counts(self, array) -> dict[str, int]:
        return array.state_counts()

    def get_summary(self, array) -> str:
        return array.summary_text(array.state_counts())

    def get_tasks(self, array) -> list[int]:
        return list(array.tasks.order_by("array_index").values_list("pk", flat=True))


class JobArrayCreateSerializer(JobSerializer):
    """A job array's request: a job's fields plus ``size`` and ``parallelism``, checked exactly as a job's."""

    size = serializers.IntegerField(min_value=1, help_text="Number of tasks (at most PORTAL_JOB_ARRAY_MAX_SIZE).")
    parallelism = serializers.IntegerField(
        min_value=1, required=False, allow_null=True, default=None,
        help_text="Most tasks admitted at once; null: no cap.",
    )  # fmt: skip

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "size", "parallelism"]


class PrioritySerializer(serializers.Serializer):
    priority = PriorityField(help_text="low, normal or high (members: up to the portal's member limit).")


class CheckpointReportSerializer(serializers.Serializer):
    at = serializers.DateTimeField(
        required=False, allow_null=True, default=None,
        help_text="When the checkpoint was written (ISO 8601); empty: now. Not in the future, not before the "
        "current attempt started.",
    )  # fmt: skip


class StopReasonSerializer(serializers.Serializer):
    reason = serializers.CharField(
        required=False, allow_blank=True, default="", max_length=500,
        help_text="Why (required when it is someone else's work; the owner is told).",
    )  # fmt: skip


class JobEventSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobEvent
        fields = ["id", "at", "kind", "message", "data"]
