from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .. import access
from ..choices import PlanState
from ..models import PlanRun


class PlanRequestSerializer(serializers.Serializer):
    """The request's shape, for the schema and the client; planner.validation checks it (all problems at once)."""

    days = serializers.IntegerField(
        required=False, min_value=1, max_value=90, help_text="The window: the last N days (or give start and end)."
    )
    start = serializers.CharField(required=False, help_text="Window start: a date or ISO date-time (UTC).")
    end = serializers.CharField(required=False, help_text="Window end (default now); not in the future.")
    cluster = serializers.CharField(
        required=False,
        allow_blank=True,
        help_text="Replay this cluster of the fleet only (its name); absent or empty: the whole fleet.",
    )
    proposals = serializers.ListField(
        child=serializers.JSONField(),
        max_length=5,
        required=False,
        help_text='Up to 5, each {"name": str, "cluster": str, "changes": [{"type": "mig"|"time_slicing"|"quota"|'
        '"add_nodes"|"remove_nodes", ...}]}; a proposal\'s node names are its cluster\'s (default: the run\'s '
        "cluster, or the default cluster for a fleet run). docs/api.md has one of each.",
    )
    options = serializers.JSONField(
        required=False, help_text='{"preemption": bool, "borrowing": bool, "suggest": 0-5 MIG layouts from demand}'
    )


class PlanRunSerializer(serializers.ModelSerializer):
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    state = serializers.ChoiceField(choices=PlanState.choices, read_only=True)
    state_display = serializers.CharField(source="get_state_display", read_only=True)
    url = serializers.SerializerMethodField()

    class Meta:
        model = PlanRun
        fields = [
            "id",
            "url",
            "state",
            "state_display",
            "progress",
            "message",
            "cancel_requested",
            "error",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "window_start",
            "window_end",
            "cluster",
            "proposals",
            "options",
        ]
        read_only_fields = fields

    def get_url(self, run) -> str:
        return run.get_absolute_url()


class PlanRunDetailSerializer(PlanRunSerializer):
    results = serializers.SerializerMethodField()

    class Meta(PlanRunSerializer.Meta):
        fields = [*PlanRunSerializer.Meta.fields, "results"]
        read_only_fields = fields

    @extend_schema_field(
        {
            "type": "object",
            "nullable": True,
            "description": 'The engine\'s results once succeeded: window, cluster ("" for the fleet) and clusters '
            "replayed, scenarios (baseline, proposals, suggested layouts; each with totals, teams, classes, clusters, "
            "series, never_ran), fidelity, seconds. A team lead sees "
            "the team rows and never-ran entries of their own teams only.",
        }
    )
    def get_results(self, run):
        return access.results_for(self.context["request"].user, run.results)
