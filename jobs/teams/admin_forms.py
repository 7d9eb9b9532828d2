"""Browser forms of team administration (issue 18): a new team and its name (admins), members (leads, admins),
and a team's notebook policy written in hours (admins). They check the shape of what was typed; accounts.teams
and jobs.teams.policy decide whether it may be stored, and their errors land on these fields."""

from __future__ import annotations

import re

from django import forms
from django.core.exceptions import ValidationError

from accounts.choices import MembershipRole
from vocab.durations import WORDS, duration_text


class ServiceErrorsMixin:
    """Put a service's ValidationError on the fields it names (the rest above the form)."""

    def add_service_errors(self, error: ValidationError) -> None:
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for key, messages in error.message_dict.items():
            self.add_error(key if key in self.fields else None, messages)


class TeamCreateForm(ServiceErrorsMixin, forms.Form):
    """Nothing is required here: accounts.teams.team_problems names every missing or wrong field at once."""

    slug = forms.CharField(
        label="Short name",
        required=False,
        max_length=40,
        help_text="Lowercase letters, digits and '-', e.g. vision. Used in URLs and the API.",
    )
    name = forms.CharField(max_length=100, required=False, help_text="What people call the team, e.g. Computer Vision.")
    namespace = forms.CharField(
        max_length=63,
        required=False,
        help_text="The Kubernetes namespace every workload of the team runs in. Leave empty to use the short name. "
        "It cannot change after the team is created.",
    )
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)


class TeamEditForm(ServiceErrorsMixin, forms.Form):
    name = forms.CharField(max_length=100, required=False)
    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)


ROLE_CHOICES = [(MembershipRole.MEMBER, "Member"), (MembershipRole.LEAD, "Lead")]


class MemberAddForm(ServiceErrorsMixin, forms.Form):
    """Only shapes here: accounts.teams.add_member names every problem (unknown user, wrong role) at once."""

    username = forms.CharField(
        label="User name", max_length=150, required=False, help_text="Someone who has signed in once."
    )
    role = forms.CharField(
        widget=forms.Select(choices=ROLE_CHOICES),
        required=False,
        initial=MembershipRole.MEMBER,
        help_text="Leads manage the team's members, secrets and any of its jobs; members their own jobs.",
    )


class MemberRoleForm(ServiceErrorsMixin, forms.Form):
    role = forms.ChoiceField(choices=ROLE_CHOICES)


_UNITS = {
    "d": 86400, "day": 86400, "days": 86400,
    "h": 3600, "hr": 3600, "hrs": 3600, "hour": 3600, "hours": 3600,
    "m": 60, "min": 60, "mins": 60, "minute": 60, "minutes": 60,
}  # fmt: skip
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_duration(text: str) -> int:
    """ "8 hours", "8h", "1.5 hours", "90 minutes", "2 days" or a bare number of hours → seconds."""
    match = _DURATION.match((text or "").lower())
    if not match or match.group(2) not in {**_UNITS, "": 0}:
        raise ValidationError('Write a number with a unit, e.g. "8 hours", "90 minutes" or "2 days".')
    unit = _UNITS.get(match.group(2), 3600)
    return round(float(match.group(1)) * unit)


class DurationField(forms.CharField):
    """A duration typed in words ("8 hours"); cleans to seconds and shows seconds back as hours."""

    def prepare_value(self, value):
        return duration_text(value, WORDS) if isinstance(value, int) else value

    def to_python(self, value):
        value = super().to_python(value)
        return parse_duration(value) if value not in self.empty_values else None


class NotebookPolicyForm(ServiceErrorsMixin, forms.Form):
    SERVICE_FIELDS = ("ttl_seconds", "max_ttl_seconds", "idle_timeout_seconds", "max_idle_timeout_seconds")

    ttl_seconds = DurationField(
        label="Session length", help_text="How long a notebook session runs before it is stopped, e.g. 8 hours."
    )
    max_ttl_seconds = DurationField(
        label="Longest session",
        help_text="How far Extend may push a session, counted from its start; at least the session length.",
    )
    idle_timeout_seconds = DurationField(
        label="Idle timeout", help_text="A session with no GPU or kernel activity this long is stopped, e.g. 1 hour."
    )
    max_idle_timeout_seconds = DurationField(
        label="Longest idle timeout", help_text="The most a launch may ask for; at least the idle timeout."
    )
