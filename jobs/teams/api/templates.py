"""The REST endpoints of a team's workload templates (jobs.workload_templates holds the rules): any member lists
and reads them, the team's leads and admins save (a new version each time) and remove them. A spec is checked as
the create API of the template's kind checks it (POST /api/v1/jobs/, /notebooks/, /services/), every problem at
once, before anything is stored. Submitting from a template is that create API with ``template``
(jobs.workload_templates.merged)."""

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
from jobs.choices import ServiceState, TemplateKind
from jobs.models import InferenceService, Job, Notebook, WorkloadTemplate, WorkloadTemplateVersion
from jobs.notebook.api.serializers import NotebookSerializer
from jobs.notebook.api.views import launch_problems
from jobs.service.api.serializers import ServiceCreateSerializer, ServiceFieldsMixin
from jobs.service.api.views import create_problems
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
        fields = ["team", "name", "kind", "description", "created_at", "updated_at", "latest", "versions"]

    @extend_schema(exclude=True)
    def get_latest(self, template) -> int | None:
        numbers = [v.number for v in template.versions.all()]
        return max(numbers) if numbers else None


#: What a template may be saved from: the field, the kind it makes, and what it names.
SOURCES = {"from_job": TemplateKind.JOB, "from_notebook": TemplateKind.NOTEBOOK, "from_service": TemplateKind.SERVICE}


class TemplateSaveSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=60, help_text="Lower-case letters, digits and hyphens.")
    description = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")
    kind = serializers.ChoiceField(
        choices=TemplateKind.choices, required=False,
        help_text="What it makes: job (default), notebook or service; from_notebook and from_service say it.",
    )  # fmt: skip
    spec = serializers.DictField(
        required=False,
        help_text="A spec as the create API of its kind takes it (POST /api/v1/jobs/, /notebooks/ or /services/; "
        "without team); or give from_job, from_notebook or from_service.",
    )
    from_job = serializers.IntegerField(required=False, help_text="Save the spec of this job of the team's.")
    from_notebook = serializers.IntegerField(required=False, help_text="Save the spec of this notebook of the team's.")
    from_service = serializers.IntegerField(required=False, help_text="Save the spec of this service of the team's.")

    def validate(self, attrs):
        given = [name for name in ("spec", *SOURCES) if name in attrs]
        if len(given) != 1:
            raise serializers.ValidationError(
                {"spec": ["Give either spec or from_job, from_notebook or from_service (an id): exactly one."]}
            )
        source = given[0]
        kind = attrs.get("kind") or SOURCES.get(source, TemplateKind.JOB)
        if source in SOURCES and kind != SOURCES[source]:
            raise serializers.ValidationError({"kind": [f"{source} saves a {SOURCES[source]} template, not a {kind}."]})
        attrs["kind"] = kind
        return attrs


def _shown(data) -> dict:
    """A serializer's answer in JSON's own types (numbers, not Decimals)."""
    return json.loads(json.dumps(data, cls=JSONEncoder))


def writable_spec(job: Job, context: dict) -> dict:
    """What POST /api/v1/jobs/ would take to make ``job`` again: the serializer's writable fields as it shows them."""
    shown = _shown(JobSerializer(job, context=context).data)
    writable = {name for name, field in JobSerializer().fields.items() if not field.read_only}
    spec = {name: value for name, value in shown.items() if name in writable}
    spec["resource_class"] = job.resource_class.key  # the key, as a person reads and writes it (the API shows the id)
    return workload_templates.kept(spec)


def notebook_spec(notebook: Notebook, context: dict) -> dict:
    """What POST /api/v1/notebooks/ would take to launch ``notebook`` again (under another name)."""
    shown = _shown(NotebookSerializer(notebook, context=context).data)
    writable = {name for name, field in NotebookSerializer().fields.items() if not field.read_only}
    spec = {name: value for name, value in shown.items() if name in writable and value is not None}
    spec["resource_class"] = notebook.resource_class.key
    return workload_templates.kept(spec)


def service_spec(service: InferenceService) -> dict:
    """What POST /api/v1/services/ would take to start ``service`` again (under another name): its replica spec
    (its job's) and its own fields, each as the create API writes it."""
    job, spec = service.job, {}
    for name, field in ServiceCreateSerializer().fields.items():
        if field.read_only or name in workload_templates.NOT_KEPT:
            continue
        owner = service if name in (*ServiceFieldsMixin.SERVICE_FIELD_NAMES, "name") else job
        value = getattr(owner, field.source)
        if name in ("readiness", "liveness"):
            spec[name] = dict(value) if value else None  # as stored; {} is "none", which the API writes as null
        else:
            spec[name] = None if value is None else field.to_representation(value)
    spec["resource_class"] = job.resource_class.key
    return _shown(spec)


def _job_problems(user, team: Team, spec: dict, context: dict) -> dict:
    body = JobSerializer(data={**spec, "team": team.slug}, context=context)
    if not body.is_valid():
        return every_problem(body, "A job", functools.partial(spec_problems, user))
    return spec_problems(user, body)


def _notebook_problems(user, team: Team, spec: dict, context: dict) -> dict:
    body = NotebookSerializer(data={**spec, "team": team.slug}, context=context)
    if not body.is_valid():
        problems = every_problem(body, "A notebook", functools.partial(launch_problems, user))
    else:
        problems = launch_problems(user, body)
    # The name a template keeps is the one a submitter gets unless they give another: it may be in use now (the
    # notebook it was saved from has it), which launching from it says.
    if Notebook.objects.filter(team=team, name=spec.get("name")).exists():
        problems.pop("name", None)
    return problems


def _service_problems(user, team: Team, spec: dict, context: dict) -> dict:
    body = ServiceCreateSerializer(data={**spec, "team": team.slug}, context=context)
    if not body.is_valid():
        problems = every_problem(body, "A service", functools.partial(create_problems, user))
    else:
        problems = create_problems(user, body)
    live = InferenceService.objects.filter(team=team, name=spec.get("name")).exclude(state=ServiceState.STOPPED)
    if live.exists():  # as for a notebook: the name a template keeps may be in use now
        problems.pop("name", None)
    return problems


PROBLEMS = {
    TemplateKind.JOB: _job_problems,
    TemplateKind.NOTEBOOK: _notebook_problems,
    TemplateKind.SERVICE: _service_problems,
}


def spec_problems_for(user, team: Team, spec: dict, context: dict, kind: str = TemplateKind.JOB) -> dict:
    """Field → messages: what the create API of ``kind`` would refuse in ``spec`` for ``team`` now (a name in use
    aside); empty when it would take it."""
    return PROBLEMS[kind](user, team, workload_templates.kept(spec), context)


def problem_words(problems: dict) -> str:
    """Field → messages (a probe's nested too) in one line: "port: Ensure …; readiness.path: …"."""

    def lines(prefix: str, messages) -> list[str]:
        if isinstance(messages, dict):
            return [line for key, inner in messages.items() for line in lines(f"{prefix}.{key}", inner)]
        texts = messages if isinstance(messages, list | tuple) else [messages]
        return [f"{prefix}: {' '.join(str(m) for m in texts)}"]

    return "; ".join(line for field, messages in problems.items() for line in lines(str(field), messages))


def checked_spec(user, team: Team, spec: dict, context: dict, kind: str = TemplateKind.JOB) -> dict:
    """``spec`` if the create API of ``kind`` would take it for ``team`` now (a name in use aside); else
    ValidationError with every problem."""
    spec = workload_templates.kept(spec)
    if problems := spec_problems_for(user, team, spec, context, kind):
        raise serializers.ValidationError({"spec": problems})
    return spec


def source_spec(user, team: Team, field: str, pk: int, context: dict) -> tuple[dict, Job | Notebook | InferenceService]:
    """The spec of the job, notebook or service ``field`` (from_job, from_notebook, from_service) names among the
    team's that ``user`` sees, with that job, notebook or service; ValidationError when there is none."""
    if field == "from_job":
        job = access.visible_jobs(user).filter(pk=pk, team=team).first()
        if job is None:
            raise serializers.ValidationError({field: [f"No job #{pk} of team {team.slug}."]})
        return writable_spec(job, context), job
    if field == "from_notebook":
        notebook = access.visible_notebooks(user).filter(pk=pk, team=team).select_related("resource_class").first()
        if notebook is None:
            raise serializers.ValidationError({field: [f"No notebook #{pk} of team {team.slug}."]})
        return notebook_spec(notebook, context), notebook
    services = access.visible_to(InferenceService.objects.all(), user).select_related("job__resource_class")
    service = services.filter(pk=pk, team=team).first()
    if service is None:
        raise serializers.ValidationError({field: [f"No service #{pk} of team {team.slug}."]})
    return service_spec(service), service


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
        kind, context = data["kind"], {"request": request}
        spec, source = data.get("spec"), None
        if field := next((name for name in SOURCES if name in data), None):
            spec, source = source_spec(request.user, team, field, data[field], context)
        spec = checked_spec(request.user, team, spec, context, kind)
        try:
            workload_templates.save(
                request.user, team, data["name"], spec, data["description"], kind=kind, source=source
            )
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
