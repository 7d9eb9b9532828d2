"""The notebook API's serializers (apart from jobs.api.serializers, which holds the job's and the shared fields)."""

from decimal import Decimal

from django.utils import timezone
from rest_framework import serializers

from core.api.strict_body import unknown_field_errors
from jobs.api.serializers import (
    CoresField,
    EnvField,
    ResourceClassRefField,
    VolumeMountsField,
    django_check,
    team_field,
)
from jobs.choices import StopReason, WorkspaceKind
from jobs.models import Notebook
from jobs.notebook.workspaces import workspace_problems
from jobs.validation import parse_image


class NotebookSerializer(serializers.ModelSerializer):
    """A notebook with its address and the time left under each limit. ``token`` appears only in the answer to
    a create or start, once: the portal keeps just its hash."""

    url = serializers.HyperlinkedIdentityField(view_name="api:notebook-detail")
    team = team_field()
    owner = serializers.CharField(source="owner.username", read_only=True)
    stop_reason = serializers.ChoiceField(
        choices=StopReason.choices, allow_blank=True, read_only=True, help_text="Why it stopped; blank while active."
    )
    resource_class = ResourceClassRefField()
    template = serializers.CharField(
        write_only=True, required=False, max_length=80,
        help_text="Start from this notebook template of the team's (NAME or NAME@VERSION; "
        "GET /api/v1/teams/{slug}/templates/): the fields given here change its spec.",
    )  # fmt: skip
    workspace = serializers.CharField(
        max_length=32, required=False, default=WorkspaceKind.JUPYTER,
        help_text="jupyter (default), code-server (VS Code) or rstudio; the last two need portal sign-in.",
    )  # fmt: skip
    image = serializers.CharField(
        max_length=255, required=False,
        help_text="Default: the workspace's image (jupyter: the first of the admin's list).",
    )  # fmt: skip
    count = serializers.IntegerField(min_value=1, max_value=8, default=1)
    cpu = CoresField(
        source="cpu_millicores", min_value=Decimal("0.1"), max_value=Decimal(256), required=False, default=4000,
        help_text="CPU cores (0.1 to 256), e.g. 4 or 0.5.",
    )  # fmt: skip
    memory_mb = serializers.IntegerField(min_value=256, max_value=4 * 1024 * 1024, required=False, default=16384)
    volume_gib = serializers.IntegerField(min_value=1, max_value=1024, required=False)
    ttl_seconds = serializers.IntegerField(min_value=60, required=False, help_text="Default: the team's policy.")
    idle_timeout_seconds = serializers.IntegerField(min_value=60, required=False)
    env = EnvField(required=False, default=list)
    volumes = VolumeMountsField(required=False, default=list)
    clusters = serializers.ListField(
        child=serializers.CharField(max_length=63), required=False, default=list, max_length=16,
        help_text="Clusters of the fleet its sessions may run on, most preferred first (GET /api/v1/clusters/ lists "
        "them); empty: the portal chooses. The first session's cluster keeps the home volume, so every later "
        "session runs there. A cluster that is unreachable now may be named: the session waits for it.",
    )  # fmt: skip
    cluster = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True,
        help_text="The cluster of its home volume, where its sessions run; null until the first session is placed.",
    )  # fmt: skip
    status = serializers.CharField(read_only=True, help_text="Stopped, or the session's state (queued, running …).")
    notebook_url = serializers.CharField(source="url", read_only=True, help_text="Where the server answers.")
    session = serializers.PrimaryKeyRelatedField(read_only=True, help_text="The current (or last) session's job id.")
    ttl_seconds_left = serializers.SerializerMethodField()
    idle_seconds_left = serializers.SerializerMethodField()

    class Meta:
        model = Notebook
        fields = [
            "id", "url", "team", "owner", "name", "template", "workspace", "image", "resource_class", "count", "cpu",
            "memory_mb", "volume_gib",
            "env", "volumes", "clusters", "cluster", "ttl_seconds", "idle_timeout_seconds", "state", "status",
            "notebook_url", "session",
            "created", "running_since", "expires_at", "ttl_seconds_left", "last_activity_at", "idle_deadline",
            "idle_seconds_left", "ttl_warned_at", "idle_warned_at", "stop_reason", "stopped_at",
        ]  # fmt: skip
        # The name's uniqueness per team is checked by jobs.notebook.sessions (with words that say what to do); DRF's
        # generated check would make "team" required even for someone in one team.
        validators = []
        read_only_fields = [
            "state", "created", "running_since", "expires_at", "last_activity_at", "idle_deadline", "ttl_warned_at",
            "idle_warned_at", "stop_reason", "stopped_at",
        ]  # fmt: skip

    def to_internal_value(self, data):
        # As for a job: a field the notebook does not take is refused, not ignored, and listed with every other
        # problem of the request in one answer (audit finding 6).
        errors = unknown_field_errors(self, data, "A notebook")
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as error:
            if errors and isinstance(error.detail, dict):
                raise serializers.ValidationError({**error.detail, **errors}) from error
            raise
        if errors:
            raise serializers.ValidationError(errors)
        return value

    def validate_workspace(self, value):
        if problems := workspace_problems(value, portal_access=True):  # the sign-in is judged with the launch
            raise serializers.ValidationError(problems)
        return value

    def validate_image(self, value):
        django_check(parse_image, value)
        return value

    def _left(self, notebook, deadline) -> int | None:
        if not notebook.is_active or deadline is None:
            return None
        return max(0, int((deadline - timezone.now()).total_seconds()))

    def get_ttl_seconds_left(self, notebook) -> int | None:
        return self._left(notebook, notebook.expires_at)

    def get_idle_seconds_left(self, notebook) -> int | None:
        return self._left(notebook, notebook.idle_deadline)


class NotebookExtendSerializer(serializers.Serializer):
    # At most ten years: a notebook's age is capped by its team far below that; past it a timedelta overflows.
    seconds = serializers.IntegerField(
        min_value=60,
        max_value=10 * 365 * 24 * 3600,
        required=False,
        help_text="Default PORTAL_NOTEBOOK_EXTEND_SECONDS.",
    )
