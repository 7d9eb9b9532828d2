"""A team's workload templates (issue 35, item 4): named specs of jobs (distributed jobs and job arrays included),
notebooks and inference services, versioned, that the team's leads save and remove and every member submits from
("new from template" in the browser, ``template`` in POST /api/v1/jobs/, /job-arrays/, /notebooks/ and /services/,
``gpuportal submit --template NAME``).

A template has a kind (TemplateKind: job, notebook, service) and its spec is kept in the shape of that kind's create
API (``WorkloadTemplateVersion.spec``), checked by the caller with that API's own validation before it is saved
(jobs.teams.api.templates), so submitting from a template is an ordinary submission of that spec with the
submitter's changes on top, checked again in full: a template saved before a quota or a policy changed is never a
way around it. A template of another kind is refused where it cannot be used. Saving a name that exists adds a
version of the same kind; a version never changes. A reference is ``NAME`` (the latest version) or ``NAME@N``.
"""

from __future__ import annotations

import re

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from accounts.models import Team
from accounts.roles import is_lead_or_admin, team_role
from core import audit
from jobs import access
from jobs.choices import JobAuditAction, TemplateKind
from jobs.models import InferenceService, Job, Notebook, WorkloadTemplate, WorkloadTemplateVersion

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{0,58}[a-z0-9])?$")
REF_RE = re.compile(r"^(?P<name>[^@]+)(@(?P<number>[0-9]+))?$")
#: What a spec never carries: the team is the template's, and these are per submission.
NOT_KEPT = ("team", "idempotency_key", "template")
#: Where each kind of template is used, in words for a refusal.
USED_BY = {
    TemplateKind.JOB: "a job (POST /api/v1/jobs/ or /api/v1/job-arrays/, the New job form)",
    TemplateKind.NOTEBOOK: "a notebook (POST /api/v1/notebooks/, the Notebooks page's launch form)",
    TemplateKind.SERVICE: "a service (POST /api/v1/services/, the New service form)",
}
NOUN = {TemplateKind.JOB: "a job", TemplateKind.NOTEBOOK: "a notebook", TemplateKind.SERVICE: "a service"}


def can_manage(user, team: Team) -> bool:
    """Save and remove a team's templates: a lead of the team, or an admin."""
    return is_lead_or_admin(user, team)


def can_use(user, team: Team) -> bool:
    """See a team's templates and submit from them: its members and admins."""
    return team_role(user, team) is not None


def name_problems(name: str, description: str = "") -> dict[str, list[str]]:
    problems: dict[str, list[str]] = {}
    if not NAME_RE.match(name or ""):
        problems["name"] = [
            "Use 1–60 lower-case letters, digits and hyphens, starting and ending with a letter or digit "
            "(for example llama-finetune)."
        ]
    if len(description or "") > 300:
        problems["description"] = ["At most 300 characters."]
    return problems


def kept(spec: dict) -> dict:
    """``spec`` without what a template never keeps (NOT_KEPT)."""
    return {key: value for key, value in spec.items() if key not in NOT_KEPT}


def save(
    user,
    team: Team,
    name: str,
    spec: dict,
    description: str = "",
    source_job: Job | None = None,
    *,
    kind: str = TemplateKind.JOB,
    source: Job | Notebook | InferenceService | None = None,
) -> WorkloadTemplateVersion:
    """Save ``spec`` (already checked as a ``kind`` of ``team`` by that kind's create API) as the next version of the
    template ``name``; ``source`` (a job, a notebook, a service; or ``source_job``) is what it was saved from. Raises
    PermissionDenied (not a lead of the team) or ValidationError (field → messages; nothing stored), also when
    ``name`` is a template of another kind. Audited."""
    if not can_manage(user, team):
        raise PermissionDenied(f"Only a lead of team {team.name} or an admin saves its templates.")
    if problems := name_problems(name, description):
        raise ValidationError(problems)
    if isinstance(source, Job):
        source_job = source
    now = timezone.now()
    with transaction.atomic():
        template, created = WorkloadTemplate.objects.select_for_update().get_or_create(
            team=team, name=name,
            defaults={"kind": kind, "description": description, "created_at": now, "updated_at": now},
        )  # fmt: skip
        if not created and template.kind != kind:
            raise ValidationError({"name": [
                f"Template {name} of team {team.slug} makes {TemplateKind(template.kind).label.lower()}s, not "
                f"{TemplateKind(kind).label.lower()}s: choose another name."
            ]})  # fmt: skip
        if not created:
            template.updated_at = now
            template.description = description or template.description
            template.save(update_fields=["updated_at", "description"])
        number = (template.versions.aggregate(n=Max("number"))["n"] or 0) + 1
        version = WorkloadTemplateVersion.objects.create(
            template=template, number=number, spec=kept(spec), created_by=user, created_at=now, source_job=source_job
        )
        after = {"version": number, "kind": kind, "from_job": source_job.pk if source_job else None}
        if isinstance(source, Notebook):
            after["from_notebook"] = source.pk
        elif isinstance(source, InferenceService):
            after["from_service"] = source.pk
        audit.record(user, JobAuditAction.TEMPLATE_SAVE, template, team=team, after={**after, "spec": version.spec})
    return version


def delete(user, template: WorkloadTemplate) -> None:
    """Remove a template with every version (jobs submitted from it keep their spec). Audited."""
    if not can_manage(user, template.team):
        raise PermissionDenied(f"Only a lead of team {template.team.name} or an admin removes its templates.")
    with transaction.atomic():
        audit.record(
            user, JobAuditAction.TEMPLATE_DELETE, template, team=template.team,
            before={"versions": template.versions.count()},
        )  # fmt: skip
        template.delete()


def find(user, team: Team | None, ref: str, kind: str | None = None) -> WorkloadTemplateVersion:
    """The version ``ref`` names (``NAME`` or ``NAME@N``) among the templates of ``team`` (None: of the teams the
    user belongs to, where the name must say which); with ``kind``, a template of another kind is refused, saying
    where it is used. Raises ValidationError with what to fix."""
    match = REF_RE.match((ref or "").strip())
    if not match:
        raise ValidationError({"template": ["Name a template as NAME or NAME@VERSION (for example finetune@2)."]})
    name, number = match["name"], match["number"]
    templates = WorkloadTemplate.objects.filter(name=name).select_related("team")
    if team is not None:
        templates = templates.filter(team=team)
    found = [t for t in templates if can_use(user, t.team)]
    if not found:
        where = f"team {team.slug}" if team is not None else "your teams"
        raise ValidationError({"template": [f"No template {name!r} in {where}; `gpuportal templates` lists them."]})
    if len(found) > 1:
        teams = ", ".join(sorted(t.team.slug for t in found))
        raise ValidationError({"template": [f"Template {name!r} exists in teams {teams}: say which team."]})
    template = found[0]
    if kind is not None and template.kind != kind:
        raise ValidationError({"template": [
            f"Template {name!r} makes {USED_BY[template.kind]}, not {NOUN[kind]}: start it "
            f"there, or with `gpuportal submit --template {name}`."
        ]})  # fmt: skip
    versions = template.versions.select_related("template__team")
    version = versions.filter(number=int(number)).first() if number else versions.order_by("-number").first()
    if version is None:
        raise ValidationError({"template": [f"Template {name!r} has no version {number}."]})
    return version


def merged(user, data: dict, kind: str) -> dict:
    """A create request that names a template (``template``: NAME or NAME@VERSION, of the team the request names,
    else of the user's teams) as the create API of ``kind`` takes it: the template's spec, its team, and the
    request's fields on top. The caller checks the whole as any request. Raises ValidationError (no such team or
    template, or a template of another kind)."""
    team = None
    if data.get("team"):
        team = access.visible_teams(user).filter(slug=str(data["team"])).first()
        if team is None:
            raise ValidationError({"team": [f"No team {data['team']!r} that you belong to."]})
    version = find(user, team, str(data["template"]), kind)
    given = {key: value for key, value in data.items() if key != "template"}
    return {**version.spec, "team": version.template.team.slug, **given}
