"""Team administration in the portal (issue 18), instead of Django's admin: the admin area's front page, a new
team and its name (admins), a team's members (its leads and admins) and its notebook policy in hours (admins).

Who may do what: admins everything; a team's leads its members page; anyone else gets 404 for a team they cannot
see and for admin pages, and 403 on the members page of a team they are only a member of. The rules themselves
are in accounts.teams and jobs.teams.policy, which audit every change.
"""

from __future__ import annotations

import functools

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts import teams as team_services
from accounts.models import Membership, Team
from jobs import access
from jobs.models import NotebookPolicy
from jobs.teams import policy as teamadmin
from jobs.teams import shares
from jobs.teams.admin_forms import MemberAddForm, MemberRoleForm, NotebookPolicyForm, TeamCreateForm, TeamEditForm
from vocab.durations import WORDS, duration_text


def staff_only(view):
    """Admin pages: others get 404, as if the page did not exist (as gpus.views does)."""

    @functools.wraps(view)
    @login_required
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def _visible_team(request, slug: str) -> Team:
    team = access.visible_teams(request.user).filter(slug=slug).first()
    if team is None:
        raise Http404("No such team.")
    return team


@staff_only
def admin_home(request):
    """The admin area: what admins manage in the portal, and a link to Django's admin for the rest."""
    return render(request, "jobs/admin_home.html", {"teams": Team.objects.order_by("slug")})


# -- teams ----------------------------------------------------------------------------------------------------


@staff_only
def team_new(request):
    form = TeamCreateForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            team = team_services.create_team(
                request.user, data["slug"], data["name"], data["namespace"], data["description"]
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(
                request,
                f"Team {team.name} created; its workloads run in namespace {team.namespace}. "
                "Add its members and give it quotas below.",
            )
            return redirect("jobs:team-members", slug=team.slug)
    return render(request, "jobs/team_form.html", {"form": form, "team": None}, status=400 if form.errors else 200)


@staff_only
def team_edit(request, slug: str):
    team = get_object_or_404(Team, slug=slug)
    form = TeamEditForm(request.POST or None, initial={"name": team.name, "description": team.description})
    if request.method == "POST" and form.is_valid():
        try:
            team_services.update_team(request.user, team, form.cleaned_data["name"], form.cleaned_data["description"])
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(request, f"Team {team.slug} saved.")
            return redirect("jobs:team-detail", slug=team.slug)
    return render(request, "jobs/team_form.html", {"form": form, "team": team}, status=400 if form.errors else 200)


# -- members --------------------------------------------------------------------------------------------------


def _managed_team(request, slug: str) -> Team:
    team = _visible_team(request, slug)
    if not team_services.can_manage_members(request.user, team):
        raise PermissionDenied("Only the team's leads and admins manage its members.")
    return team


def _members_page(request, team: Team, *, add_form=None, role_errors=None, weight_errors=None, weights=None,
                  status=200):  # fmt: skip
    # Leads first; service accounts are listed and managed on their own page.
    members = list(
        team.memberships.select_related("user")
        .filter(user__service_account__isnull=True)
        .order_by("role", "user__username")
    )
    found = {share.user_id: share for share in shares.member_shares(team)}
    for m in members:
        m.share = found.get(m.user_id)
        # What the lead typed stays in the field when the page comes back with problems.
        m.weight_value = (weights or {}).get(m.user.get_username(), f"{m.share.weight:g}" if m.share else "1")
    context = {
        "team": team,
        "members": members,
        "weight_errors": weight_errors or {},
        "member_share": settings.PORTAL_MEMBER_FAIR_SHARE,
        "half_life": duration_text(settings.PORTAL_FAIR_SHARE_HALF_LIFE, WORDS),
        "add_form": add_form or MemberAddForm(),
        "role_errors": role_errors or {},
        "lead_count": sum(1 for m in members if m.role == "lead"),
        "is_admin": request.user.is_staff,
    }
    return render(request, "jobs/team_members.html", context, status=status)


@login_required
def team_members(request, slug: str):
    team = _managed_team(request, slug)
    if request.method != "POST":
        return _members_page(request, team)
    form = MemberAddForm(request.POST)
    if form.is_valid():
        try:
            membership = team_services.add_member(
                request.user, team, form.cleaned_data["username"], form.cleaned_data["role"]
            )
        except ValidationError as error:
            form.add_service_errors(error)
        else:
            messages.success(
                request, f"{membership.user.get_username()} is now a {membership.role} of team {team.name}."
            )
            return redirect("jobs:team-members", slug=team.slug)
    return _members_page(request, team, add_form=form, status=400)


def _membership(team: Team, pk: int) -> Membership:
    return get_object_or_404(Membership.objects.select_related("user", "team"), pk=pk, team=team)


@login_required
@require_POST
def member_role(request, slug: str, pk: int):
    team = _managed_team(request, slug)
    membership = _membership(team, pk)
    form = MemberRoleForm(request.POST)
    try:
        if not form.is_valid():
            raise ValidationError({"role": ["Pick member or lead."]})
        membership = team_services.set_role(request.user, membership, form.cleaned_data["role"])
    except ValidationError as error:
        problems = [m for ms in getattr(error, "message_dict", {"": error.messages}).values() for m in ms]
        return _members_page(request, team, role_errors={membership.pk: problems}, status=400)
    messages.success(request, f"{membership.user.get_username()} is now a {membership.role} of team {team.name}.")
    return redirect("jobs:team-members", slug=team.slug)


@login_required
@require_POST
def member_remove(request, slug: str, pk: int):
    team = _managed_team(request, slug)
    membership = _membership(team, pk)
    try:
        team_services.remove_member(request.user, membership)
    except ValidationError as error:
        return _members_page(request, team, role_errors={membership.pk: error.messages}, status=400)
    messages.success(
        request,
        f"{membership.user.get_username()} is no longer in team {team.name}. Their running work goes on; "
        "they cannot start any more in this team.",
    )
    if membership.user_id == request.user.pk and not request.user.is_staff:
        return redirect("jobs:team-list")
    return redirect("jobs:team-members", slug=team.slug)


@login_required
@require_POST
def member_weights(request, slug: str):
    """The members' fair-share weights, all in one form (jobs.teams.shares: every problem at once, audited)."""
    team = _managed_team(request, slug)
    prefix = "weight-"
    weights = {key[len(prefix) :]: value.strip() for key, value in request.POST.items() if key.startswith(prefix)}
    try:
        shares.set_weights(request.user, team, weights)
    except ValidationError as error:
        return _members_page(request, team, weight_errors=error.message_dict, weights=weights, status=400)
    messages.success(request, f"Fair-share weights of team {team.name} saved.")
    return redirect("jobs:team-members", slug=team.slug)


# -- notebook policy ------------------------------------------------------------------------------------------


def _defaults() -> list[tuple[str, str]]:
    return [
        ("Session length", duration_text(settings.PORTAL_NOTEBOOK_TTL_SECONDS, WORDS)),
        ("Longest session", duration_text(settings.PORTAL_NOTEBOOK_MAX_TTL_SECONDS, WORDS)),
        ("Idle timeout", duration_text(settings.PORTAL_NOTEBOOK_IDLE_TIMEOUT_SECONDS, WORDS)),
        ("Longest idle timeout", duration_text(settings.PORTAL_NOTEBOOK_MAX_IDLE_TIMEOUT_SECONDS, WORDS)),
    ]


@staff_only
def notebook_policy(request, slug: str):
    team = get_object_or_404(Team, slug=slug)
    policy = NotebookPolicy.for_team(team)
    initial = {field: getattr(policy, field) for field in teamadmin.POLICY_FIELDS}
    form = NotebookPolicyForm(request.POST or None, initial=initial)
    if request.method == "POST":
        if form.is_valid():
            try:
                teamadmin.set_notebook_policy(request.user, team, form.cleaned_data)
            except ValidationError as error:
                form.add_service_errors(error)
            else:
                messages.success(request, f"Notebook policy of team {team.name} saved.")
                return redirect("jobs:team-notebook-policy", slug=team.slug)
        else:
            # The service also names what the form could not parse, so every problem shows at once.
            values = {f: form.cleaned_data.get(f) for f in teamadmin.POLICY_FIELDS if f not in form.errors}
            for field, problems in teamadmin.policy_problems(values).items():
                if field not in form.errors and values.get(field) is not None:
                    form.add_error(field, problems)
    context = {"team": team, "form": form, "has_row": policy.pk is not None, "defaults": _defaults()}
    return render(request, "jobs/team_policy.html", context, status=400 if form.errors else 200)


@staff_only
@require_POST
def notebook_policy_reset(request, slug: str):
    team = get_object_or_404(Team, slug=slug)
    teamadmin.reset_notebook_policy(request.user, team)
    messages.success(request, f"Team {team.name} now has the portal's default notebook policy.")
    return redirect("jobs:team-notebook-policy", slug=team.slug)
