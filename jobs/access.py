"""Who may do what with jobs and notebooks: one rule, used by services, notebooks, pages, the API and the
telemetry seam.

- See: admins see everything; a member (or lead) of a team sees its jobs and notebooks.
- Submit: any member of the team (admins too).
- Manage (cancel, resubmit, change a queued job's priority, stop, start, extend): the owner, a lead of the
  team, or an admin.
- Priority: leads and admins may give any priority; members up to PORTAL_MEMBER_MAX_PRIORITY (default high).
- Team secrets and registry credentials: members (and admins) see names and keys; leads and admins manage them.

A notebook follows the rule of its team and owner exactly as a job does; its sessions are jobs of that team.
A user's role in a team, and whether it leads, is accounts.roles' answer.
"""

from __future__ import annotations

from django.conf import settings

from accounts.models import Team
from accounts.roles import leads, role_given, team_role, teams_of
from jobs.choices import Priority
from jobs.models import Job, JobArray, Notebook


def can_submit(user, team: Team) -> bool:
    return team_role(user, team) is not None


def _sees(role: str | None) -> bool:
    """The see rule on a role in the team (accounts.roles): any role at all."""
    return role is not None


def _may_see(user, team: Team) -> bool:
    return _sees(team_role(user, team))


def _may_manage(user, team: Team, owner_id: int | None) -> bool:
    role = team_role(user, team)
    return leads(role) or (role is not None and owner_id == user.pk)


def can_see_job(user, job: Job) -> bool:
    return _may_see(user, job.team)


def can_see_job_given(user, membership_role: str | None) -> bool:
    """``can_see_job`` when the caller read the user's membership role in the job's team (None: none) with the job
    itself: the API's detail and long-poll read both in one statement (jobs.api.answer_read)."""
    return _sees(role_given(user, membership_role))


def can_manage_job(user, job: Job) -> bool:
    """Cancel or resubmit: the owner, a lead of the job's team, or an admin."""
    return _may_manage(user, job.team, job.owner_id)


def can_manage_array(user, array: JobArray) -> bool:
    """Cancel a job array as a group: the owner, a lead of its team, or an admin."""
    return _may_manage(user, array.team, array.owner_id)


def max_priority(user, team: Team) -> int:
    """The highest priority ``user`` may give a job of ``team`` (at submission and when changing it)."""
    if leads(team_role(user, team)):
        return Priority.HIGH
    name = str(settings.PORTAL_MEMBER_MAX_PRIORITY).strip().upper()
    return Priority[name] if name in Priority.names else Priority.NORMAL


def can_see_notebook(user, notebook: Notebook) -> bool:
    return _may_see(user, notebook.team)


def can_manage_notebook(user, notebook: Notebook) -> bool:
    """Stop, start again, extend: the owner, a lead of the notebook's team, or an admin."""
    return _may_manage(user, notebook.team, notebook.owner_id)


def can_see_secrets(user, team: Team) -> bool:
    """The names and keys of a team's secrets and registry credentials: its members and admins (never values)."""
    return _may_see(user, team)


def can_manage_secrets(user, team: Team) -> bool:
    """Create, rotate and delete a team's secrets and registry credentials: a lead of the team, or an admin."""
    return leads(team_role(user, team))


def visible_teams(user):
    """The teams ``user`` may see and submit for: all of them for admins, else those they belong to."""
    return teams_of(user)


def visible_to(queryset, user):
    """The see rule as a filter over rows that belong to a team (jobs, arrays, notebooks, volumes, secrets,
    registry credentials): everything for admins, the rows of the user's teams for everyone else."""
    if not user.is_authenticated:
        return queryset.none()
    if user.is_staff:
        return queryset
    return queryset.filter(team__memberships__user=user)


def visible_jobs(user):
    """The jobs ``user`` may see, as a queryset (the list pages, the overview and the API start from it)."""
    return visible_to(Job.objects.all(), user)


def visible_arrays(user):
    return visible_to(JobArray.objects.all(), user)


def visible_notebooks(user):
    return visible_to(Notebook.objects.all(), user)


def job_visible(user, job_id: int) -> bool:
    """May ``user`` see job ``job_id``? (telemetry's question, through telemetry.seams)"""
    return visible_jobs(user).filter(pk=job_id).exists()
