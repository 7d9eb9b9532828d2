"""Browser pages for teams: the team list, a team's page with its quotas and usage (and the admins' quota forms),
and the volumes list. Split out of jobs.views, whose team and quota-usage helpers these use; jobs.urls names
them as before."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Max, Q
from django.http import Http404, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_POST
from rest_framework import serializers

from accounts import roles
from accounts import teams as team_services
from accounts.models import Membership, Team
from core.api.bounds import is_id
from gpus.models import ResourceClass
from jobs import access, actions, checkpoints, guarantees, workload_templates
from jobs.choices import ACTIVE_STATES, JobState
from jobs.models import Dataset, Quota, TeamVolume
from jobs.storage.presence import presence_of
from jobs.storage.volumes import volume_users
from jobs.teams import shares
from jobs.teams.api.templates import SOURCES, problem_words, source_spec, spec_problems_for
from jobs.teams.forms import PeopleUsageForm, QuotaAddForm, QuotaForm, UsageRangeForm
from jobs.usage import (
    energy_figures,
    member_usage_rows,
    month_start,
    months_back,
    people_scope,
    people_usage,
    team_usage_rows,
    write_usage_csv,
)
from jobs.views import quota_usages

# -- teams and quotas -----------------------------------------------------------------------------------------


@login_required
def team_list(request):
    teams = access.visible_teams(request.user).annotate(
        member_count=Count("memberships", distinct=True),
        active_jobs=Count("jobs", filter=Q(jobs__state__in=ACTIVE_STATES), distinct=True),
        queued_jobs=Count("jobs", filter=Q(jobs__state=JobState.QUEUED), distinct=True),
    )
    roles = dict(Membership.objects.filter(user=request.user).values_list("team_id", "role"))
    usages = quota_usages(teams, include_hidden=request.user.is_staff)
    rows = [{"team": t, "role": roles.get(t.pk), "quotas": usages.get(t.pk, [])} for t in teams]
    # The admins' quota overview: per class, every team's guarantees against what the cluster can hold.
    class_totals = list(guarantees.class_guarantees().values()) if request.user.is_staff else []
    return render(request, "jobs/team_list.html", {"rows": rows, "class_totals": class_totals})


def visible_team(request, slug: str) -> Team:
    team = access.visible_teams(request.user).filter(slug=slug).first()
    if team is None:
        raise Http404("No such team.")
    return team


def _team_page(request, team: Team, *, edit_forms: dict | None = None, add_form: QuotaAddForm | None = None):
    is_admin = request.user.is_staff
    usages = quota_usages([team], include_hidden=is_admin).get(team.pk, [])
    edit_forms = edit_forms or {}
    rows = []
    for usage in usages:
        form = None
        if is_admin:
            quota = usage.quota
            form = edit_forms.get(quota.pk) or QuotaForm(
                prefix=f"quota-{quota.pk}",
                initial={
                    "guaranteed": quota.guaranteed,
                    "limit": quota.limit,
                    "monthly_gpu_hours": quota.monthly_gpu_hours,
                    "cluster_caps": QuotaForm.caps_text(usage.caps),
                },
            )
        rows.append({"usage": usage, "form": form})
    jobs = (
        team.jobs.filter(state__in=[JobState.QUEUED, *ACTIVE_STATES])
        .select_related("owner", "resource_class")
        .order_by("state", "queue_position", "submitted_at")
    )
    members = list(team.memberships.select_related("user").order_by("-role", "user__username"))
    found = {share.user_id: share for share in shares.member_shares(team)}
    for membership in members:
        membership.share = found.get(membership.user_id)  # fair share among the members (jobs.teams.shares)
    context = {
        "team": team,
        "volumes": _volume_rows([team]),
        "presence": presence_of(team),
        "members": members,
        "rows": rows,
        "jobs": jobs,
        "live_every": settings.PORTAL_LIVE_POLL_SECONDS if jobs else 0,
        "is_admin": is_admin,
        "add_form": (add_form or QuotaAddForm(team=team, prefix="add")) if is_admin else None,
        "month": month_start(timezone.now()),
        "my_role": roles.team_role(request.user, team),
        "can_manage_members": team_services.can_manage_members(request.user, team),
        "min_runtime_minutes": checkpoints.min_runtime(team) // 60,
        "templates": team.workload_templates.annotate(latest=Max("versions__number")).order_by("name"),
        "can_manage_templates": workload_templates.can_manage(request.user, team),
        **_usage_context(request, team),
    }
    return render(request, "jobs/team_detail.html", context)


@login_required
@require_POST
def template_save(request, slug: str):
    """Save a job, a notebook or a service of the team as a template ("Save as template" on its page; the team's
    leads, admins): a new version when the name exists (jobs.workload_templates). The spec is checked as its create
    API checks it, as the templates API does."""
    team = visible_team(request, slug)
    field = next((name for name in ("job", "notebook", "service") if name in request.POST), "job")
    source_id = request.POST.get(field, "")
    if not is_id(source_id):
        raise Http404(f"No such {field}.")
    context = {"request": request}
    try:
        spec, source = source_spec(request.user, team, f"from_{field}", int(source_id), context)
    except serializers.ValidationError:
        raise Http404(f"No such {field} of team {team.slug}.") from None
    if not workload_templates.can_manage(request.user, team):
        raise PermissionDenied(f"Only a lead of team {team.name} or an admin saves its templates.")
    kind = SOURCES[f"from_{field}"]
    try:
        if problems := spec_problems_for(request.user, team, spec, context, kind):
            raise ValidationError({"spec": [f"its spec would not be accepted now ({problem_words(problems)})."]})
        version = workload_templates.save(
            request.user, team, request.POST.get("name", "").strip(), spec,
            request.POST.get("description", "").strip(), kind=kind, source=source,
        )  # fmt: skip
    except ValidationError as error:
        messages.error(request, "Template not saved: " + " ".join(m for ms in error.message_dict.values() for m in ms))
        return redirect(source)
    what = f"job #{source.pk}" if field == "job" else f"{field} {source.name}"
    messages.success(request, f"Saved {what} as template {version.template.name} (version {version.number}).")
    return redirect(reverse("jobs:team-detail", args=[team.slug]) + "#templates-title")


@login_required
@require_POST
def template_delete(request, slug: str, name: str):
    """Remove a template with its versions (the team's leads, admins)."""
    team = visible_team(request, slug)
    template = get_object_or_404(team.workload_templates, name=name)
    workload_templates.delete(request.user, template)  # refuses (403) anyone but a lead or an admin
    messages.success(request, f"Template {name} removed.")
    return redirect(reverse("jobs:team-detail", args=[team.slug]) + "#templates-title")


def _usage_context(request, team: Team) -> dict:
    now = timezone.now()
    today = now.date()
    form = UsageRangeForm(request.GET) if "start" in request.GET or "end" in request.GET else None
    if form is not None and form.is_valid():
        start, end = form.cleaned_data["start"], form.cleaned_data["end"]
    else:
        start, end = today - timedelta(days=13), today
    rows = team_usage_rows(team, start, end, now)
    allocated = sum(r["allocated"] for r in rows)
    used = sum(r["used"] for r in rows)
    lost = sum(r["lost"] for r in rows)
    known = [r["joules"] for r in rows if r["joules"] is not None]
    # Per member: a lead or an admin sees everyone's GPU-hours, any other member their own (ux-walk 2).
    sees_all = roles.is_lead_or_admin(request.user, team)
    members = member_usage_rows([team], start, end, now, only_user=None if sees_all else request.user)
    return {
        "usage_members": members,
        "usage_members_all": sees_all,
        "usage_form": form or UsageRangeForm(initial={"start": start, "end": end}),
        "usage_rows": rows,
        "usage_start": start,
        "usage_end": end,
        "usage_allocated": allocated,
        "usage_used": used,
        "usage_lost": lost,
        "usage_energy": energy_figures(sum(known) if known else None, allocated),
        "usage_efficiency": round(100 * used / allocated) if allocated else None,
    }


@login_required
def team_usage_csv(request, slug: str):
    """Showback: allocated and used GPU-hours per day of one team, as CSV (?start=YYYY-MM-DD&end=YYYY-MM-DD)."""
    team = visible_team(request, slug)
    form = UsageRangeForm(request.GET)
    if not form.is_valid():
        problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return HttpResponse(
            f"Cannot export: {problems}. Example: ?start=2026-11-01&end=2026-11-30\n",
            status=400,
            content_type="text/plain; charset=utf-8",
        )
    start, end = form.cleaned_data["start"], form.cleaned_data["end"]
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="gpu-usage-{team.slug}-{start}-{end}.csv"'
    write_usage_csv(response, team_usage_rows(team, start, end, timezone.now()))
    return response


@login_required
def team_detail(request, slug: str):
    return _team_page(request, visible_team(request, slug))


@login_required
@require_POST
def min_runtime(request, slug: str):
    """A team's minimum runtime before preemption, in whole minutes (its leads, admins; jobs.checkpoints)."""
    team = visible_team(request, slug)
    text = request.POST.get("min_runtime_minutes", "").strip()
    top = settings.PORTAL_MIN_RUNTIME_MAX // 60
    minutes = int(text) if text.isdigit() else -1
    if not 0 <= minutes <= top:
        messages.error(request, f"Minimum runtime not saved: a whole number of minutes from 0 (none) to {top}, "
                       f"not {text!r}.")  # fmt: skip
    else:
        checkpoints.set_min_runtime(request.user, team, minutes * 60)  # refuses (403) anyone but a lead or an admin
        messages.success(request, f"Team {team.name}: minimum runtime before preemption is now {minutes} min.")
    return redirect(reverse("jobs:team-detail", args=[team.slug]) + "#preemption-title")


@login_required
@require_POST
def quota_add(request, slug: str):
    team = visible_team(request, slug)
    if not request.user.is_staff:
        raise PermissionDenied("Only admins can change quotas.")
    form = QuotaAddForm(request.POST, team=team, prefix="add")
    if form.is_valid() and not form.needs_confirmation(
        guarantees.oversubscription(team, form.cleaned_data["resource_class"], form.cleaned_data["guaranteed"])
    ):
        data = form.cleaned_data
        try:
            actions.set_quota(
                request.user,
                team,
                data["resource_class"],
                data["guaranteed"],
                data["limit"],
                data["monthly_gpu_hours"],
                cluster_caps=data["cluster_caps"],
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(request, f"Team {team.name} now has a quota for {data['resource_class'].display_name}.")
            return redirect("jobs:team-detail", slug=team.slug)
    return _team_page(request, team, add_form=form)


@login_required
@require_POST
def quota_edit(request, slug: str, pk: int):
    team = visible_team(request, slug)
    if not request.user.is_staff:
        raise PermissionDenied("Only admins can change quotas.")
    quota = get_object_or_404(Quota.objects.select_related("resource_class"), pk=pk, team=team)
    form = QuotaForm(request.POST, prefix=f"quota-{quota.pk}")
    if form.is_valid() and not form.needs_confirmation(
        guarantees.oversubscription(team, quota.resource_class, form.cleaned_data["guaranteed"])
    ):
        data = form.cleaned_data
        try:
            actions.set_quota(
                request.user,
                team,
                quota.resource_class,
                data["guaranteed"],
                data["limit"],
                data["monthly_gpu_hours"],
                cluster_caps=data["cluster_caps"],
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(request, f"Quota for {quota.resource_class.display_name} saved.")
            return redirect(reverse("jobs:team-detail", args=[team.slug]) + f"#quota-{quota.pk}")
    return _team_page(request, team, edit_forms={quota.pk: form})


@login_required
@require_POST
def quota_delete(request, slug: str, pk: int):
    team = visible_team(request, slug)
    quota = get_object_or_404(Quota.objects.select_related("resource_class"), pk=pk, team=team)
    actions.delete_quota(request.user, quota)
    messages.success(
        request,
        f"Team {team.name} no longer has a quota for {quota.resource_class.display_name}. Running jobs go on; "
        "queued ones of that class wait until a quota is given again.",
    )
    return redirect("jobs:team-detail", slug=team.slug)


def _volume_rows(teams) -> list[dict]:
    """The teams' volumes with who mounts each now, for the team page and the volumes page."""
    rows = []
    users = {team.pk: volume_users(team) for team in teams}
    volumes = TeamVolume.objects.filter(team__in=teams).select_related("team", "cluster", "dataset", "notebook")
    for volume in volumes:
        rows.append({"volume": volume, "users": users.get(volume.team_id, {}).get(volume.name, [])})
    return rows


@login_required
def volume_list(request):
    """The claims in the namespaces of the user's teams (admins: all), reconciled from the cluster."""
    teams = list(access.visible_teams(request.user))
    mine = {team.pk for team in teams}
    datasets = [  # read-only for members; admins change them on the Datasets page
        (dataset, [team for team in dataset.teams.all() if team.pk in mine])
        for dataset in Dataset.objects.filter(teams__in=teams).distinct().prefetch_related("teams")
    ]
    context = {"rows": _volume_rows(teams), "teams": teams, "datasets": datasets}
    return render(request, "jobs/volume_list.html", context)


# -- usage per person ---------------------------------------------------------------------------------------------


@login_required
def usage(request):
    """Usage per person, class and month (``?team=``: a team's, ``all``: every team's; none: your own): the same
    report as GET /api/v1/usage/people/, with the same refusals (403 for ``all`` to anyone but an admin, 404 for a
    team that is not yours)."""
    form = PeopleUsageForm(request.GET)
    valid = form.is_valid()
    data = form.cleaned_data if valid else {}
    scope, jobs = people_scope(request.user, data.get("team") or "")
    now = timezone.now()
    months = months_back(data.get("month") or now, data.get("months") or 1)
    teams = access.visible_teams(request.user).order_by("slug")
    led = {t.pk for t in teams} if request.user.is_staff else roles.led_team_ids(request.user)
    report = people_usage(months, jobs, now)
    # The class as people read it (its alias or name), with its key beside: one query for the classes shown.
    names = {
        rc.key: rc.display_name for rc in ResourceClass.objects.filter(key__in={r["class"] for r in report["rows"]})
    }
    for row in report["rows"]:
        row["class_name"] = names.get(row["class"], row["product"])
    context = {
        "form": form,
        "scope": scope,
        "report": report,
        "scopes": [("", "My usage")]
        + [(t.slug, f"Team {t.slug}" + ("" if t.pk in led else " (my jobs)")) for t in teams]
        + ([("all", "Every team")] if request.user.is_staff else []),
        "month_value": months[-1].strftime("%Y-%m"),
        "months_value": len(months),
        "shows_people": scope == "all" or (scope != "me" and scope in {t.slug for t in teams if t.pk in led}),
    }
    return render(request, "jobs/usage.html", context)
