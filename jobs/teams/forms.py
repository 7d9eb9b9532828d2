"""Browser forms for what a team holds: its quotas (admins), the usage range, and its secrets and registry
credentials. Split out of jobs.forms. They check the shape of what was typed; the services decide whether it
may be stored, and their errors land on these fields."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError

from core.api.bounds import BoundedDateField
from gpus.models import ResourceClass


class QuotaForm(forms.Form):
    """Change one quota of a team (admins)."""

    guaranteed = forms.IntegerField(min_value=0, max_value=100_000)
    limit = forms.IntegerField(min_value=0, max_value=100_000)
    monthly_gpu_hours = forms.DecimalField(
        label="Monthly GPU-hours", required=False, min_value=Decimal(0), max_digits=10, decimal_places=1
    )
    cluster_caps = forms.CharField(
        label="Per-cluster caps",
        required=False,
        max_length=2000,
        help_text="Optional: the most units the team may hold on a cluster, as cluster=units, e.g. cloud=4, onprem=8. "
        "The limit counts the whole fleet; a cap only narrows it on one cluster. Leave empty for no caps.",
    )

    confirm_oversubscription = forms.BooleanField(
        required=False,
        label="Guarantee more than the cluster holds",
        help_text="I understand that if every team claims its guarantee at once, some of them will wait.",
    )

    #: Set by the view when the guarantee takes the class's total over its schedulable capacity.
    oversubscription = ""

    def clean_cluster_caps(self) -> dict[str, int]:
        """``cluster=units`` entries, separated by commas or spaces, as a dict (every malformed entry at once);
        whether the clusters exist and the caps are within the limit is the service's answer (set_quota)."""
        caps, problems = {}, []
        for entry in self.cleaned_data["cluster_caps"].replace(",", " ").split():
            name, sep, units = entry.partition("=")
            if not sep or not name or not (units.isascii() and units.isdigit()):
                problems.append(f"{entry!r}: write cluster=units, e.g. cloud=4.")
            elif name in caps:
                problems.append(f"{name} is given twice.")
            else:
                caps[name] = int(units)
        if problems:
            raise ValidationError(problems)
        return caps

    @staticmethod
    def caps_text(caps) -> str:
        """A quota's caps ((cluster, units) pairs) as the field shows them."""
        return ", ".join(f"{cluster}={units}" for cluster, units in caps)

    def needs_confirmation(self, message: str) -> bool:
        """Whether to stop and show ``message`` (jobs.guarantees.oversubscription) with the confirm box."""
        self.oversubscription = message
        return bool(message) and not self.cleaned_data.get("confirm_oversubscription")

    def add_service_errors(self, error: ValidationError) -> None:
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for key, messages in error.message_dict.items():
            self.add_error(key if key in self.fields else None, messages)


class QuotaAddForm(QuotaForm):
    """Give a team a quota for a resource class it has none for (admins)."""

    resource_class = forms.ModelChoiceField(
        queryset=ResourceClass.objects.none(), label="Resource class", empty_label="Pick a resource class"
    )

    field_order = [
        "resource_class", "guaranteed", "limit", "monthly_gpu_hours", "cluster_caps", "confirm_oversubscription"
    ]  # fmt: skip

    def __init__(self, *args, team, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["resource_class"].queryset = ResourceClass.objects.filter(present=True).exclude(quotas__team=team)
        self.fields["guaranteed"].help_text = "Units the team can always get."
        self.fields["limit"].help_text = "Most units at once; above the guarantee only preemptible jobs run."
        self.fields["monthly_gpu_hours"].help_text = "Leave empty for no budget."
        self.fields["resource_class"].label_from_instance = lambda rc: (
            f"{rc.display_name}{' (hidden)' if rc.hidden else ''} · {rc.allocatable} in the cluster"
        )


class UsageRangeForm(forms.Form):
    """A date range (UTC days, both inclusive) for usage reports and the CSV export."""

    MAX_DAYS = 366

    start = BoundedDateField(help_text="First day, YYYY-MM-DD (UTC).")
    end = BoundedDateField(help_text="Last day, YYYY-MM-DD (UTC), inclusive.")

    def clean(self):
        data = super().clean()
        start, end = data.get("start"), data.get("end")
        if start and end:
            if start > end:
                raise ValidationError("The start day is after the end day; swap them.")
            if (end - start).days + 1 > self.MAX_DAYS:
                raise ValidationError(f"At most {self.MAX_DAYS} days per report; split the range.")
        return data


class PeopleUsageForm(forms.Form):
    """The per-person usage report's query: whose (``team``: a team's slug, ``all``; empty: your own), the last
    month (YYYY-MM, UTC; default this one) and how many months back from it."""

    MAX_MONTHS = 12

    team = forms.SlugField(required=False, max_length=50)
    month = forms.RegexField(
        regex=r"^\d{4}-(0[1-9]|1[0-2])$",
        required=False,
        error_messages={"invalid": "Give a month as YYYY-MM, e.g. 2026-11."},
        help_text="The last month shown, YYYY-MM (UTC); default this month.",
    )
    months = forms.IntegerField(required=False, min_value=1, max_value=MAX_MONTHS, help_text="Months back, 1-12.")

    def clean_month(self):
        value = self.cleaned_data.get("month")
        if not value:
            return None
        year, month = (int(part) for part in value.split("-"))
        if not 2000 <= year <= 2100:
            raise ValidationError("Give a month between 2000-01 and 2100-12.")
        return datetime(year, month, 1, tzinfo=UTC)


def parse_secret_values(text: str) -> dict[str, str]:
    """``KEY=value`` lines as a secret's data (a value runs to the end of its line; nothing is trimmed from it)."""
    data: dict[str, str] = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        if "=" not in line:
            raise ValidationError(f"Line {number}: write KEY=value.", code="data")
        key, value = line.split("=", 1)
        key = key.strip()
        if key in data:
            raise ValidationError(f"Line {number}: {key} is given twice.", code="data")
        data[key] = value
    return data


class SecretForm(forms.Form):
    """A new team secret (leads). The values go to the cluster; the form never renders them back."""

    SERVICE_FIELDS = {"data": "values"}

    name = forms.CharField(max_length=253, help_text="Lowercase letters, digits, '-' and '.', e.g. wandb or hf-token.")
    description = forms.CharField(max_length=200, required=False)
    values = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "autocomplete": "off", "spellcheck": "false"}),
        help_text="One KEY=value per line, e.g. token=…. Values are stored only in the Kubernetes Secret and never "
        "shown again. For values over several lines use the API.",
    )

    def clean_values(self):
        return parse_secret_values(self.cleaned_data["values"])

    def add_service_errors(self, error: ValidationError) -> None:
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for key, messages in error.message_dict.items():
            field = self.SERVICE_FIELDS.get(key, key)
            self.add_error(field if field in self.fields else None, messages)


class SecretRotateForm(SecretForm):
    """New values for an existing secret: every key is replaced."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self.fields["name"], self.fields["description"]


class RegistryCredentialForm(forms.Form):
    SERVICE_FIELDS: dict[str, str] = {}

    registry = forms.CharField(
        max_length=300, help_text="As image names start with it: nvcr.io, registry.example.com:5000 (docker.io)."
    )
    username = forms.CharField(
        max_length=255,
        required=False,
        help_text="For nvcr.io (NVIDIA NGC) the user name is literally $oauthtoken and the token an NGC API key.",
    )
    token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Password or access token with pull access; never shown again.",
    )
    add_service_errors = SecretForm.add_service_errors


class RegistryRotateForm(RegistryCredentialForm):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        del self.fields["registry"]
        self.fields["username"].help_text = "Leave empty to keep the current user name."
