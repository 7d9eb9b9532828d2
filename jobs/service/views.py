"""Inference service pages: the list, "New service", one service (address, health, rollout, autoscaling, replicas,
timeline) and its buttons Scale / Pause / Resume / Roll back / Change image / Stop. Every change goes through
jobs.service.ops, which checks who may make it (owner, a lead of the team, or an admin) and audits it."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from gpus.models import Node
from jobs import access, actions, workload_templates
from jobs.choices import ServiceState, TemplateKind
from jobs.models import Job
from jobs.models.service import InferenceService
from jobs.service import summary as service_summary
from jobs.service.api.serializers import ServiceCreateSerializer
from jobs.service.forms import ServiceForm, ServiceImageForm, ServiceScaleForm
from jobs.service.ops import (
    create_service,
    pause_service,
    resume_service,
    rollback_service,
    scale_service,
    stop_service,
    update_service,
)
from jobs.views import is_live_poll, read_template


def visible_services(user):
    """The services ``user`` may see: those of their teams (admins: all)."""
    return access.visible_to(InferenceService.objects.all(), user).select_related(
        "team", "owner", "job", "job__resource_class"
    )


def _submit_teams(user):
    return access.visible_teams(user)


@login_required
def service_list(request):
    services = list(visible_services(request.user).exclude(state=ServiceState.STOPPED).distinct())
    if request.GET.get("stopped") == "1":
        services += list(visible_services(request.user).filter(state=ServiceState.STOPPED).distinct()[:50])
    rows = [
        {
            "service": service,
            "size": service_summary.size_text(service),
            "health": service_summary.health(service),
            "address": service_summary.dns_name_parts(service),
        }
        for service in services
    ]
    return render(
        request,
        "jobs/service_list.html",
        {
            "rows": rows,
            "show_stopped": request.GET.get("stopped") == "1",
            "can_create": _submit_teams(request.user).exists(),
            "current": "services",
            "live_every": settings.PORTAL_LIVE_POLL_SECONDS if rows else 0,
        },
    )


def _template_initial(request, ref: str) -> dict:
    """The form's initial values from the service template ``ref`` ("TEAM/NAME" or "TEAM/NAME@VERSION"): its spec
    read as POST /api/v1/services/ reads it. A template that no longer reads says why; the form starts empty."""
    if (read := read_template(request, ref, TemplateKind.SERVICE, ServiceCreateSerializer)) is None:
        return {}
    version, body = read
    team, name = version.template.team, version.template.name
    fields = actions.spec_defaults() | body.spec()
    job = Job(team=team, resource_class=body.validated_data["resource_class"], **fields)
    initial = ServiceForm.initial_from_job(job, list(body.spec()))
    initial.pop("resubmit_of", None)
    service = body.service_fields()
    initial.update({key: service[key] for key in ("port", "min_replicas", "max_replicas", "metric", "metric_name",
                                                  "metric_target") if key in service})  # fmt: skip
    for prefix in ("readiness", "liveness"):
        probe = service.get(prefix) or {}
        initial[f"{prefix}_type"] = probe.get("type", "")
        initial[f"{prefix}_path"] = probe.get("path", "")
        initial[f"{prefix}_port"] = probe.get("port")
        initial[f"{prefix}_delay"] = probe.get("initial_delay_seconds")
    messages.info(
        request, f"Filled in from template {name} (version {version.number}) of team {team.name}: give it a new name."
    )
    return initial


@login_required
def service_new(request):
    teams = _submit_teams(request.user)
    if not teams.exists():
        raise PermissionDenied("You are in no team, so you cannot start a service; ask a team lead to add you.")
    initial = {}
    if request.method != "POST" and request.GET.get("template"):
        initial = _template_initial(request, request.GET["template"])
    form = ServiceForm(request.POST or None, user=request.user, teams=teams, initial=initial)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            service = create_service(request.user, data["team"], data["resource_class"], form.spec(),
                                     form.service_fields())  # fmt: skip
        except PermissionDenied as error:
            form.add_error("team", str(error))
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(
                request,
                f"Service {service.name} is queued: its {service.min_replicas} minimum replica"
                f"{'s' if service.min_replicas != 1 else ''} start when admitted against team "
                f"{service.team.name}'s quota.",
            )
            return redirect(service.get_absolute_url())
    return render(
        request,
        "jobs/service_form.html",
        {
            "form": form,
            "current": "services",
            "image_suggestions": form.image_suggestions,
            "volume_choices": form.volume_choices(),
        },
    )


@login_required
def service_detail(request, pk: int):
    service = get_object_or_404(visible_services(request.user).distinct(), pk=pk)
    job = service.job
    rows = service_summary.replica_rows(service)
    if not is_live_poll(request) or rows:
        service_summary.with_utilisation(service, rows)
    visible = set(
        Node.objects.visible_to(request.user).filter(name__in={r.node for r in rows}).values_list("name", flat=True)
    )
    for row in rows:
        row.node_visible = row.node in visible
    live = service.state != ServiceState.STOPPED
    context = {
        "service": service,
        "job": job,
        "size": service_summary.size_text(service),
        "dns_name": service_summary.dns_name(service),
        "dns_parts": service_summary.dns_name_parts(service),
        "external_url": service_summary.external_url(service),
        "health": service_summary.health(service),
        "rollout": service_summary.rollout(service),
        "metric_text": service_summary.metric_text(service),
        "readiness_text": service_summary.probe_text(service.readiness, service.port),
        "liveness_text": service_summary.probe_text(service.liveness, service.port),
        "borrowed_text": service_summary.borrowed_text(service),
        "replica_rows": rows,
        "idle_suggestion": service_summary.idle_for_a_day(service),
        "events": job.events.all(),
        "can_manage": live and access.can_manage_job(request.user, job),
        "can_save_template": workload_templates.can_manage(request.user, service.team),
        "image_form": ServiceImageForm(initial={"image": job.image}),
        "scale_form": ServiceScaleForm(
            initial={"min_replicas": service.min_replicas, "max_replicas": service.max_replicas}
        ),
        "waiting": job.state in ("queued", "admitted"),
        "current": "services",
        "live_every": settings.PORTAL_LIVE_POLL_SECONDS if live else 0,
    }
    return render(request, "jobs/service_detail.html", context)


def _act(request, pk: int, action):
    """Run ``action(service)`` (a jobs.service.ops call returning the sentence to show); its refusal is shown as
    an error message on the service's page."""
    service = get_object_or_404(visible_services(request.user).distinct(), pk=pk)
    try:
        message = action(service)
    except PermissionDenied as error:
        messages.error(request, str(error) or "Only the service's owner, a lead of its team or an admin can do that.")
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, message)
    return redirect(service.get_absolute_url())


def _form_problems(form) -> str:
    return " ".join(f"{form.fields[k].label if k in form.fields else ''}: {' '.join(v)}".lstrip(": ")
                    for k, v in form.errors.items())  # fmt: skip


@login_required
@require_POST
def service_scale(request, pk: int):
    def scale(service):
        form = ServiceScaleForm(request.POST)
        if not form.is_valid():
            raise ValidationError(_form_problems(form))
        low, high = form.cleaned_data["min_replicas"], form.cleaned_data["max_replicas"]
        scale_service(request.user, service, low, high)
        return f"Service {service.name} now runs {low} to {high} replicas (more than {low} only as quota allows)."

    return _act(request, pk, scale)


@login_required
@require_POST
def service_image(request, pk: int):
    def change(service):
        form = ServiceImageForm(request.POST)
        if not form.is_valid():
            raise ValidationError(_form_problems(form))
        service = update_service(request.user, service, {"image": form.cleaned_data["image"]})
        return (
            f"Service {service.name} is rolling out {form.cleaned_data['image']} (revision {service.revision}): "
            "replicas are replaced one by one as the new ones become ready."
        )

    return _act(request, pk, change)


@login_required
@require_POST
def service_pause(request, pk: int):
    def pause(service):
        pause_service(request.user, service)
        return f"Service {service.name} is paused: its replicas keep serving; rollouts wait until you resume it."

    return _act(request, pk, pause)


@login_required
@require_POST
def service_resume(request, pk: int):
    def resume(service):
        resume_service(request.user, service)
        return f"Service {service.name} is resumed; a change made while paused rolls out now."

    return _act(request, pk, resume)


@login_required
@require_POST
def service_rollback(request, pk: int):
    def rollback(service):
        service = rollback_service(request.user, service)
        return f"Service {service.name} is rolling back to its previous spec (revision {service.revision})."

    return _act(request, pk, rollback)


@login_required
@require_POST
def service_stop(request, pk: int):
    def stop(service):
        stop_service(request.user, service, request.POST.get("reason", ""))
        return f"Service {service.name} is stopped: its Deployment, Service and autoscaler are removed."

    return _act(request, pk, stop)
