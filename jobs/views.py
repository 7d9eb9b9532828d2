"""Browser pages for jobs, the submit form and team quotas."""

from __future__ import annotations

from datetime import UTC, datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Q, Sum
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from cluster import get_backend
from cluster.base import ClusterError
from portal.models import Team

from . import services
from .choices import ACTIVE_STATES, JobState, WaitReason
from .forms import IMAGE_SUGGESTIONS, JobForm, NewQuotaForm, QuotaForm
from .models import Job, Quota


def _teams_of(user):
    return Team.objects.all() if user.is_staff else Team.objects.filter(memberships__user=user)


def quota_rows(team: Team) -> list[dict]:
    """Each quota of ``team`` with what its active jobs hold and, with a budget, the GPU-hours used this month."""
    quotas = list(Quota.objects.filter(team=team).select_related("resource_class"))
    held = dict(
        Job.objects.filter(team=team, state__in=ACTIVE_STATES)
        .values("resource_class")
        .annotate(units=Sum("count"))
        .values_list("resource_class", "units")
    )
    month = timezone.now().astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    rows = []
    for quota in quotas:
        used = held.get(quota.resource_class_id, 0)
        hours = None
        if quota.monthly_gpu_hours is not None:
            hours = _hours_this_month(team, quota.resource_class, month)
        track = max(quota.limit, used, 1)
        rows.append(
            {
                "quota": quota,
                "rc": quota.resource_class,
                "used": used,
                "used_pct": round(100 * used / track),
                "guaranteed_pct": round(100 * quota.guaranteed / track),
                "borrowing": used > quota.guaranteed,
                "hours": hours,
                "hours_pct": min(100, round(100 * hours / float(quota.monthly_gpu_hours)))
                if hours is not None and quota.monthly_gpu_hours
                else 0,
            }
        )
    return rows


def _hours_this_month(team, rc, month: datetime) -> float:
    now = timezone.now()
    jobs = Job.objects.filter(team=team, resource_class=rc, started_at__isnull=False).filter(
        Q(finished_at__isnull=True) | Q(finished_at__gte=month)
    )
    seconds = 0.0
    for job in jobs:
        start, end = max(job.started_at, month), job.finished_at or now
        seconds += max(0.0, (end - start).total_seconds()) * job.count * rc.gpu_fraction
    return round(seconds / 3600, 1)


@login_required
def job_list(request):
    jobs = Job.objects.visible_to(request.user).select_related("team", "owner", "resource_class")
    team, state = request.GET.get("team", ""), request.GET.get("state", "")
    if team:
        jobs = jobs.filter(team__slug=team)
    if state == "active":
        jobs = jobs.filter(state__in=[JobState.QUEUED, *ACTIVE_STATES])
    elif state:
        jobs = jobs.filter(state=state)
    page = Paginator(jobs, 50).get_page(request.GET.get("page"))
    return render(
        request,
        "jobs/job_list.html",
        {
            "page": page,
            "teams": _teams_of(request.user),
            "states": JobState.choices,
            "selected_team": team,
            "selected_state": state,
            "querystring": "&".join(f"{k}={v}" for k, v in (("team", team), ("state", state)) if v),
        },
    )


@login_required
def job_new(request):
    teams = _teams_of(request.user) if request.user.is_staff else Team.objects.filter(memberships__user=request.user)
    if not teams.exists():
        messages.warning(request, "You are not in a team yet; ask an admin to add you to one before submitting jobs.")
        return redirect("jobs:job-list")
    form = JobForm(request.POST or None, user=request.user, teams=teams)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            submission = services.submit_job(
                request.user, data["team"], data["resource_class"], form.submit_fields(), data["idempotency_key"]
            )
        except ValidationError as error:
            form.add_service_errors(error)
        except services.IdempotencyConflict as error:
            form.add_error(None, str(error))
        except PermissionDenied as error:
            form.add_error("team", str(error))
        else:
            job = submission.job
            if submission.created:
                messages.success(request, f"Job #{job.pk} {job.name} is queued.")
            return redirect(job)
    return render(
        request,
        "jobs/job_form.html",
        {
            "form": form,
            "image_suggestions": IMAGE_SUGGESTIONS,
            "team_quotas": [(team, quota_rows(team)) for team in teams.order_by("slug")[:10]],
        },
    )


def _visible_job(request, pk: int) -> Job:
    jobs = Job.objects.visible_to(request.user).select_related("team", "owner", "resource_class")
    return get_object_or_404(jobs, pk=pk)


@login_required
def job_detail(request, pk: int):
    job = _visible_job(request, pk)
    log, log_error = "", ""
    if job.pod_name:
        try:
            log = get_backend().pod_logs(job.team.namespace, job.pod_name, tail_lines=200)
        except ClusterError as error:
            log_error = str(error)
    waiting = job.state == JobState.QUEUED or (job.state == JobState.ADMITTED and job.wait_reason)
    return render(
        request,
        "jobs/job_detail.html",
        {
            "job": job,
            "events": job.events.all(),
            "log": log,
            "log_error": log_error,
            "waiting": waiting,
            "wait_label": WaitReason(job.wait_reason).label if job.wait_reason else "",
            "can_manage": services.can_manage(request.user, job),
        },
    )


@login_required
@require_POST
def job_cancel(request, pk: int):
    job = _visible_job(request, pk)
    try:
        services.cancel_job(request.user, job)
    except PermissionDenied as error:
        messages.error(request, str(error))
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, f"Job #{job.pk} cancelled; its GPUs are released.")
    return redirect(job)


@login_required
@require_POST
def job_resubmit(request, pk: int):
    job = _visible_job(request, pk)
    try:
        new = services.resubmit_job(request.user, job)
    except (PermissionDenied, ValidationError) as error:
        messages.error(request, " ".join(getattr(error, "messages", [str(error)])))
        return redirect(job)
    messages.success(request, f"Resubmitted as job #{new.pk}.")
    return redirect(new)


@login_required
def team_list(request):
    teams = _teams_of(request.user).prefetch_related("memberships")
    return render(request, "jobs/team_list.html", {"teams": [(t, quota_rows(t)) for t in teams]})


@login_required
def team_detail(request, slug: str):
    team = get_object_or_404(Team, slug=slug)
    if not request.user.is_staff and not team.memberships.filter(user=request.user).exists():
        raise Http404("No such team.")
    edit_forms: dict[int, QuotaForm] = {}
    new_form = NewQuotaForm(team=team) if request.user.is_staff else None
    if request.method == "POST":
        if not request.user.is_staff:
            raise PermissionDenied("Only admins can change quotas.")
        result = _quota_post(request, team)
        if result is True:
            return redirect("jobs:team-detail", slug=team.slug)
        kind, form = result
        if kind == "new":
            new_form = form
        else:
            edit_forms[kind] = form
    rows = quota_rows(team)
    for row in rows:
        quota = row["quota"]
        initial = {"guaranteed": quota.guaranteed, "limit": quota.limit, "monthly_gpu_hours": quota.monthly_gpu_hours}
        row["form"] = edit_forms.get(quota.pk) or QuotaForm(initial=initial, prefix=f"q{quota.pk}")
    jobs = team.jobs.filter(state__in=[JobState.QUEUED, *ACTIVE_STATES]).select_related("owner", "resource_class")
    return render(
        request,
        "jobs/team_detail.html",
        {
            "team": team,
            "members": team.memberships.select_related("user").order_by("-role", "user__username"),
            "rows": rows,
            "new_form": new_form,
            "jobs": jobs.order_by("state", "submitted_at"),
        },
    )


def _quota_post(request, team: Team):
    """Handle one quota form; True when it worked, else (form key, bound form with errors)."""
    action = request.POST.get("action", "")
    if action == "add":
        form = NewQuotaForm(request.POST, team=team)
        if not form.is_valid():
            return "new", form
        rc = form.cleaned_data["resource_class"]
        target = None
    else:
        quota = get_object_or_404(Quota, pk=request.POST.get("quota"), team=team)
        if action == "delete":
            services.delete_quota(request.user, quota)
            messages.success(request, f"Quota for {quota.resource_class.display_name} removed.")
            return True
        form = QuotaForm(request.POST, prefix=f"q{quota.pk}")
        if not form.is_valid():
            return quota.pk, form
        rc, target = quota.resource_class, quota.pk
    data = form.cleaned_data
    try:
        services.set_quota(request.user, team, rc, data["guaranteed"], data["limit"], data.get("monthly_gpu_hours"))
    except ValidationError as error:
        for field, errors in error.message_dict.items():
            for message in errors:
                form.add_error(field if field in form.fields else None, message)
        return ("new" if target is None else target), form
    messages.success(request, f"Quota for {rc.display_name}: {data['guaranteed']} guaranteed, limit {data['limit']}.")
    return True
