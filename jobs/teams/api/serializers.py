"""The REST representations of what a team holds besides its work: quotas, volumes, datasets, secrets and
registry credentials (jobs.teams.api.views). Split out of jobs.api.serializers, whose shared fields these use."""

from decimal import Decimal

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from accounts.api.serializers import TEAM_NOT_FOUND
from accounts.models import Team
from core.api.fields import NamedRelatedField
from gpus.models import Cluster, ResourceClass
from jobs import actions, guarantees
from jobs.api.serializers import team_field
from jobs.models import Dataset, Quota, RegistryCredential, TeamSecret, TeamVolume


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": {"type": "integer", "minimum": 0},
        "example": {"cloud": 4},
        "description": "Cluster name → the most units of the class the team may hold on that cluster (at most the "
        "limit). The quota stays fleet-wide; clusters without a cap are limited by the quota alone. On a write the "
        "caps become exactly these ({} removes them all); leave it out to keep them.",
    }
)
class ClusterCapsField(serializers.Field):
    """A quota's per-cluster caps as an object, cluster name → units (the rows are jobs.models.QuotaClusterCap)."""

    def __init__(self, **kwargs):
        super().__init__(source="*", required=False, **kwargs)

    def to_representation(self, quota) -> dict[str, int]:
        return {cap.cluster.name: cap.limit for cap in quota.cluster_caps.all()}

    def to_internal_value(self, data) -> dict:
        if not isinstance(data, dict):
            raise serializers.ValidationError('Give the caps as an object of cluster name → units, e.g. {"cloud": 4}.')
        return {"cluster_caps": data}


class QuotaSerializer(serializers.ModelSerializer):
    team = NamedRelatedField(
        slug_field="slug", queryset=Team.objects.all(), error_messages={"does_not_exist": TEAM_NOT_FOUND}
    )
    resource_class = serializers.PrimaryKeyRelatedField(
        queryset=ResourceClass.objects.all(),
        error_messages={
            "does_not_exist": "No resource class {pk_value}. GET /api/v1/resource-classes/ lists them with their ids."
        },
    )
    resource_class_name = serializers.CharField(source="resource_class.display_name", read_only=True)
    resource_class_key = serializers.CharField(
        source="resource_class.key", read_only=True, help_text="What a job's resource_class names the class by."
    )
    used = serializers.IntegerField(
        read_only=True,
        help_text="Units of this class the team holds now, as admission counts them: its admitted, running and "
        "preempting jobs (workers × GPUs each) and the replicas its services were granted above their minimum.",
    )
    updated_by = serializers.CharField(source="updated_by.username", read_only=True, default=None, allow_null=True)
    guaranteed = serializers.IntegerField(min_value=0, max_value=100_000)
    limit = serializers.IntegerField(min_value=0, max_value=100_000)
    monthly_gpu_hours = serializers.DecimalField(
        max_digits=10, decimal_places=1, min_value=Decimal(0), required=False, allow_null=True,
        help_text="GPU-hours per calendar month (UTC); null for no budget.",
    )  # fmt: skip
    cluster_caps = ClusterCapsField()
    confirm_oversubscription = serializers.BooleanField(
        write_only=True, required=False, default=False,
        help_text="true: save a guarantee that takes the sum of all teams' guarantees of the class above its "
        "schedulable capacity (then if every team claims its guarantee at once, some will wait). Without it such a "
        "change is a 400 that says so.",
    )  # fmt: skip

    class Meta:
        model = Quota
        fields = [
            "id", "team", "resource_class", "resource_class_name", "resource_class_key", "guaranteed", "limit",
            "monthly_gpu_hours", "cluster_caps", "used", "updated", "updated_by", "confirm_oversubscription",
        ]  # fmt: skip
        validators = []  # uniqueness is explained in validate(), not with DRF's generic message

    def validate(self, attrs):
        team = attrs.get("team", getattr(self.instance, "team", None))
        rc = attrs.get("resource_class", getattr(self.instance, "resource_class", None))
        guaranteed = attrs.get("guaranteed", getattr(self.instance, "guaranteed", 0))
        limit = attrs.get("limit", getattr(self.instance, "limit", 0))
        errors: dict[str, list[str]] = {}
        if limit < guaranteed:
            errors["limit"] = [f"The limit ({limit}) must be at least the guaranteed amount ({guaranteed})."]
        if self.instance is None:
            existing = Quota.objects.filter(team=team, resource_class=rc).first()
            if existing is not None:
                errors["resource_class"] = [
                    f"Team {team.slug} already has quota #{existing.pk} for this class; "
                    f"change it with PATCH /api/v1/quotas/{existing.pk}/."
                ]
        else:
            for name in ("team", "resource_class"):
                if name in attrs and attrs[name] != getattr(self.instance, name):
                    errors[name] = ["A quota's team and resource class cannot change; create another quota."]
        caps = attrs.get("cluster_caps")
        if caps is not None:
            clusters = {c.name: c for c in Cluster.objects.filter(name__in=list(caps))}
            if problems := actions.cap_problems(caps, limit, rc, clusters):
                errors["cluster_caps"] = problems
        if team is not None and rc is not None and not attrs.get("confirm_oversubscription"):
            message = guarantees.oversubscription(team, rc, guaranteed)
            if message:
                errors["confirm_oversubscription"] = [
                    f'{message} Send "confirm_oversubscription": true to save it anyway.'
                ]
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class TeamVolumeSerializer(serializers.ModelSerializer):
    """A claim in a team's namespace on one cluster as the inventory last saw it, and what mounts it now."""

    team = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    cluster = serializers.SlugRelatedField(
        slug_field="name", read_only=True, help_text="The cluster that holds the claim; work mounting it runs there."
    )
    dataset = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    notebook = serializers.PrimaryKeyRelatedField(read_only=True, allow_null=True)
    read_only_only = serializers.BooleanField(read_only=True, help_text="Can be mounted read-only only.")
    used_by = serializers.SerializerMethodField()

    class Meta:
        model = TeamVolume
        fields = [
            "id", "team", "cluster", "name", "phase", "capacity", "capacity_bytes", "access_modes", "storage_class",
            "volume_name", "notebook", "dataset", "read_only_only", "created_at", "seen_at", "used_by",
        ]  # fmt: skip
        read_only_fields = fields

    @extend_schema_field(
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "kind": {"type": "string", "enum": ["job", "notebook"]},
                    "id": {"type": "integer"},
                    "name": {"type": "string"},
                    "path": {"type": "string"},
                },
            },
        }
    )
    def get_used_by(self, volume) -> list[dict]:
        users = self.context.get("users", {}).get(volume.team_id, {})
        return [{k: u[k] for k in ("kind", "id", "name", "path")} for u in users.get(volume.name, [])]


class DatasetSerializer(serializers.ModelSerializer):
    """A dataset an admin publishes read-only to teams (jobs.storage.volumes)."""

    teams = NamedRelatedField(
        slug_field="slug", many=True, queryset=Team.objects.all(), required=False,
        error_messages={"does_not_exist": TEAM_NOT_FOUND},
    )  # fmt: skip
    clusters = NamedRelatedField(
        slug_field="name", many=True, queryset=Cluster.objects.all(), required=False,
        help_text="The clusters it is published on (those whose nodes reach its storage); a new dataset without "
        "them goes on the cluster configured in settings.",
        error_messages={"does_not_exist": "No cluster {value}; GET /api/v1/clusters/ lists them."},
    )  # fmt: skip
    claim_name = serializers.CharField(read_only=True, help_text="The claim each team mounts.")
    capacity_gib = serializers.IntegerField(min_value=1, max_value=1_000_000)

    class Meta:
        model = Dataset
        fields = ["id", "name", "description", "source", "server", "path", "capacity_gib", "teams", "clusters",
                  "claim_name", "created"]  # fmt: skip
        read_only_fields = ["created"]
        validators = []


class TeamSecretSerializer(serializers.ModelSerializer):
    """A team secret as the API shows it: names, keys, who and when. ``data`` is write-only: it goes to the
    Kubernetes Secret and is never returned."""

    url = serializers.HyperlinkedIdentityField(view_name="api:secret-detail")
    team = team_field()
    data = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        write_only=True,
        help_text='The values, {"key": "value"}; stored only in the Kubernetes Secret, never shown again.',
    )
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None, allow_null=True)
    rotated_by = serializers.CharField(source="rotated_by.username", read_only=True, default=None, allow_null=True)

    class Meta:
        model = TeamSecret
        fields = [
            "id", "url", "team", "name", "description", "keys", "data", "created_at", "created_by", "rotated_at",
            "rotated_by",
        ]  # fmt: skip
        read_only_fields = ["keys", "created_at", "rotated_at"]
        validators = []  # a taken name is explained by jobs.storage.secrets, with what to do instead
        extra_kwargs = {"name": {"validators": []}}


class SecretRotateSerializer(serializers.Serializer):
    data = serializers.DictField(
        child=serializers.CharField(allow_blank=True, trim_whitespace=False),
        help_text="The new values; they replace every key (keys left out are removed).",
    )


class RegistryCredentialSerializer(serializers.ModelSerializer):
    """A registry credential: registry, user name, the Secret's name, who and when. ``token`` is write-only."""

    url = serializers.HyperlinkedIdentityField(view_name="api:registry-credential-detail")
    team = team_field()
    registry = serializers.CharField(
        max_length=300, help_text="host[:port] as image names start with it: nvcr.io, registry.example.com:5000."
    )
    # Blank values pass here so jobs.storage.secrets reports them together with the other problems (all at once).
    username = serializers.CharField(max_length=300, allow_blank=True)
    token = serializers.CharField(
        write_only=True,
        allow_blank=True,
        trim_whitespace=False,
        help_text="Password or access token; for nvcr.io an NGC API key with username $oauthtoken. Never shown.",
    )
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None, allow_null=True)
    rotated_by = serializers.CharField(source="rotated_by.username", read_only=True, default=None, allow_null=True)

    class Meta:
        model = RegistryCredential
        fields = [
            "id", "url", "team", "registry", "username", "token", "secret_name", "created_at", "created_by",
            "rotated_at", "rotated_by",
        ]  # fmt: skip
        read_only_fields = ["secret_name", "created_at", "rotated_at"]
        validators = []


class RegistryRotateSerializer(serializers.Serializer):
    token = serializers.CharField(trim_whitespace=False, help_text="The new password or token.")
    username = serializers.CharField(required=False, help_text="A new user name; the current one when left out.")


class MemberShareSerializer(serializers.Serializer):
    """One member's fair share in their team (jobs.teams.shares.Share)."""

    user = serializers.CharField(source="username")
    role = serializers.CharField()
    weight = serializers.FloatField(help_text="Set by the team's leads; 1 is an equal share, 2 twice one.")
    recent_gpus = serializers.FloatField(
        help_text="Normalised GPUs the member's jobs of the team held lately: the decayed average, halving every "
        "half_life_seconds."
    )
    use_share = serializers.FloatField(help_text="Their part of the team's recent use (0 to 1).")
    weight_share = serializers.FloatField(help_text="Their part of the members' weights (0 to 1).")
    ratio = serializers.FloatField(
        help_text="use_share / weight_share: 1 is exactly their share; a waiting job's reason quotes it."
    )


class MemberSharesSerializer(serializers.Serializer):
    team = serializers.CharField()
    member_share = serializers.BooleanField(
        help_text="Whether a team's queue goes member by member (settings.PORTAL_MEMBER_FAIR_SHARE)."
    )
    half_life_seconds = serializers.FloatField()
    members = MemberShareSerializer(many=True)


class MemberWeightsSerializer(serializers.Serializer):
    weights = serializers.DictField(
        child=serializers.JSONField(),
        help_text='User name → weight, a number above 0 and at most 100, e.g. {"alice": 2}. Members left out keep '
        "theirs; 1 sets an equal share again.",
    )
