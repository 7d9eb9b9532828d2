"""The REST endpoints of a team's workload templates (jobs.workload_templates holds the rules): any member lists
and reads them, the team's leads and admins save (a new version each time) and remove them. A spec is checked as
POST /api/v1/jobs/ checks a job, every problem at once, before anything is stored. Submitting from a template is
POST /api/v1/jobs/ with ``template`` (jobs.api.views.JobViewSet.from_template)."""

from __future__ import annotations

import functools
import json

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db.models import Prefetch
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder
from rest_framework.views import APIView

from accounts.models import Team
from core.api.strict_body import every_problem
from jobs import access, workload_templates
from jobs.api.serializers import JobSerializer
from jobs.api.views import ERROR_RESPONSES, spec_problems
from jobs.models import Job, WorkloadTemplate, WorkloadTemplateVersion
from jobs.teams.api.views import your_team


class TemplateVersionSerializer(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", read_only=True, default=None)
    source_job = serializers.IntegerField(source="source_job_id", read_only=True)

    class Meta:
        model = WorkloadTemplateVersion
        fields = ["number", "spec", "created_by", "created_at", "source_job"]


class TemplateSerializer(serializers.ModelSerializer):
    team = serializers.CharField(source="team.slug", read_only=True)
    latest = serializers.SerializerMethodField()
    versions = TemplateVersionSerializer(many=True, read_only=True)

    class Meta:
        model = WorkloadTemplate
        fields = ["team", "name", "description", "created_at", "updated_at", "latest", "versions"]

    @extend_schema(exclude=True)
    def get_latest(self, template) -> int | None:
        numbers = [v.number for v in template.versions.all()]
        return max(numbers) if numbers else None


class TemplateSaveSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60, help_text="Lower-case letters, digits and hyphens.")
    description = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    spec = serializers.DictField(
        required=False, help_text="A job spec as POST /api/v1/jobs/ takes it (without team); or give from_job."
    )
    from_job = serializers.IntegerField(required=False, help_text="Save the spec of this job of the team's.")

    def validate(self, attrs):
        if ("spec" in attrs) == ("from_job" in attrs):
            raise serializers.ValidationError({"spec": ["Give either spec or from_job (a job id), not both."]})
        return attrs


def writable_spec(job: Job, context: dict) -> dict:
    """What POST /api/v1/jobs/ would take to make ``job`` again: the serializer's writable fields as it shows them."""
    shown = json.loads(json.dumps(JobSerializer(job, context=context).data, cls=JSONEncoder))  # JSON's own types
    writable = {name for name, field in JobSerializer().fields.items() if not field.read_only}
    spec = {name: value for name, value in shown.items() if name in writable}
    spec["resource_class"] = job.resource_class.key  # the key, as a person reads and writes it (the API shows the id)
    return workload_templates.kept(spec)


def checked_spec(user, team: Team, spec: dict, context: dict) -> dict:
    """``spec`` if POST /api/v1/jobs/ would take it for ``team`` now; else ValidationError with every problem."""
    body = JobSerializer(data={**workload_templates.kept(spec), "team": team.slug}, context=context)
    if not body.is_valid():
        raise serializers.ValidationError(
            {"spec": every_problem(body, "A job", functools.partial(spec_problems, user))}
        )
    if problems := spec_problems(user, body):
        raise serializers.ValidationError({"spec": problems})
    return workload_templates.kept(spec)


def _templates(team: Team):
    versions = WorkloadTemplateVersion.objects.select_related("created_by").order_by("-number")
    return team.workload_templates.select_related("team").prefetch_related(Prefetch("versions", queryset=versions))


class TemplateListView(APIView):
    """A team's templates (members, admins); save one (leads, admins)."""

    @extend_schema(summary="A team's workload templates", responses=TemplateSerializer(many=True), tags=["teams"])
    def get(self, request, slug: str):
        return Response(TemplateSerializer(_templates(your_team(request, slug)), many=True).data)

    @extend_schema(
        summary="Save a workload template (a new version if the name exists; the team's leads, admins)",
        request=TemplateSaveSerializer,
        responses={201: TemplateSerializer, **ERROR_RESPONSES},
        tags=["teams"],
    )
    def post(self, request, slug: str):
        team = your_team(request, slug)
        if not workload_templates.can_manage(request.user, team):
            raise exceptions.PermissionDenied("Only the team's leads and admins save its templates.")
        body = TemplateSaveSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        source = None
        context = {"request": request}
        if "from_job" in data:
            source = access.visible_jobs(request.user).filter(pk=data["from_job"], team=team).first()
            if source is None:
                raise serializers.ValidationError({"from_job": [f"No job #{data['from_job']} of team {team.slug}."]})
            spec = writable_spec(source, context)
        else:
            spec = checked_spec(request.user, team, data["spec"], context)
        try:
            workload_templates.save(request.user, team, data["name"], spec, data["description"], source)
        except DjangoPermissionDenied as error:
            raise exceptions.PermissionDenied(str(error)) from None
        except DjangoValidationError as error:
            raise serializers.ValidationError(error.message_dict) from None
        template = _templates(team).get(name=data["name"])
        return Response(TemplateSerializer(template).data, status=status.HTTP_201_CREATED)


class TemplateDetailView(APIView):
    """One template with its versions (members, admins); remove it (leads, admins)."""

    @extend_schema(summary="A workload template and its versions", responses=TemplateSerializer, tags=["teams"])
    def get(self, request, slug: str, name: str):
        template = _templates(your_team(request, slug)).filter(name=name).first()
        if template is None:
            raise exceptions.NotFound(f"No template {name!r} in team {slug}.")
        return Response(TemplateSerializer(template).data)

    @extend_schema(
        summary="Remove a workload template (the team's leads, admins)",
        responses={204: OpenApiResponse(description="Removed."), **ERROR_RESPONSES},
        tags=["teams"],
    )
    def delete(self, request, slug: str, name: str):
        template = _templates(your_team(request, slug)).filter(name=name).first()
        if template is None:
            raise exceptions.NotFound(f"No template {name!r} in team {slug}.")
        try:
            workload_templates.delete(request.user, template)
        except DjangoPermissionDenied as error:
            raise exceptions.PermissionDenied(str(error)) from None
        return Response(status=status.HTTP_204_NO_CONTENT)
