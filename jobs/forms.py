"""Browser forms for submitting jobs and setting quotas. Shape checks live here; whether a request could ever
run (quota, node sizes, CUDA) is decided by jobs.services, whose errors are put back on these fields."""

from __future__ import annotations

import shlex
import uuid
from decimal import Decimal

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from gpus.models import ResourceClass

from .choices import Priority
from .models import Quota
from .validation import parse_env_text, parse_image, validate_argv, validate_env, validate_job_name

#: services' field names → this form's
SERVICE_FIELDS = {"cpu_millicores": "cpu", "max_runtime_seconds": "max_runtime_hours"}

IMAGE_SUGGESTIONS = [
    "nvcr.io/nvidia/pytorch:24.01-py3",
    "nvcr.io/nvidia/pytorch:24.03-py3",
    "nvcr.io/nvidia/tensorflow:24.01-tf2-py3",
    "nvidia/cuda:12.2.2-runtime-ubuntu22.04",
    "nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04",
]


class ResourceClassChoice(forms.ModelChoiceField):
    def label_from_instance(self, rc: ResourceClass) -> str:
        return f"{rc.display_name} — {rc.free} of {rc.allocatable} free"


class JobForm(forms.Form):
    team = forms.ModelChoiceField(queryset=None, empty_label=None)
    name = forms.CharField(
        max_length=40, help_text="Lowercase letters, digits and '-'; part of the Kubernetes Job name."
    )
    image = forms.CharField(
        max_length=255, help_text="A container image, e.g. nvcr.io/nvidia/pytorch:24.01-py3.",
        widget=forms.TextInput(attrs={"list": "image-suggestions", "autocapitalize": "none", "spellcheck": "false"}),
    )  # fmt: skip
    command = forms.CharField(
        required=False, max_length=4096, help_text="Split like a shell line; empty runs the image's entrypoint.",
        widget=forms.TextInput(attrs={"placeholder": "python train.py --epochs 10", "spellcheck": "false"}),
    )  # fmt: skip
    args = forms.CharField(required=False, max_length=4096, widget=forms.TextInput(attrs={"spellcheck": "false"}))
    env = forms.CharField(
        required=False, label="Environment", help_text="One NAME=value per line.",
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "placeholder": "WANDB_MODE=offline"}),
    )  # fmt: skip
    resource_class = ResourceClassChoice(queryset=None, empty_label=None)
    count = forms.IntegerField(min_value=1, max_value=64, initial=1, help_text="All on one node.")
    cpu = forms.DecimalField(
        label="CPU cores", min_value=Decimal("0.1"), max_value=Decimal(256), decimal_places=3, initial=2
    )
    memory_mb = forms.IntegerField(label="Memory (MiB)", min_value=64, max_value=4 * 1024 * 1024, initial=8192)
    priority = forms.TypedChoiceField(choices=Priority.choices, coerce=int, initial=Priority.NORMAL)
    preemptible = forms.BooleanField(
        required=False,
        help_text="May run on idle capacity above your team's guarantee, and be stopped and requeued when a team "
        "within its guarantee needs the GPUs back.",
    )
    max_runtime_hours = forms.DecimalField(
        label="Maximum runtime (hours)", min_value=Decimal("0.0167"), decimal_places=3, initial=4,
        help_text="Kubernetes stops the job after this long.",
    )  # fmt: skip
    idempotency_key = forms.CharField(widget=forms.HiddenInput, required=False, max_length=100)

    def __init__(self, *args, user, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.fields["team"].queryset = teams
        if teams.count() == 1:
            self.fields["team"].initial = teams.first()
        classes = ResourceClass.objects.filter(present=True, quotas__team__in=teams, quotas__limit__gt=0).distinct()
        if not user.is_staff:
            classes = classes.filter(hidden=False)
        self.fields["resource_class"].queryset = classes.order_by("kind", "product", "profile")
        if not self.is_bound:
            self.initial.setdefault("idempotency_key", uuid.uuid4().hex)

    def clean_max_runtime_hours(self):
        hours = self.cleaned_data["max_runtime_hours"]
        most = Decimal(settings.PORTAL_JOB_MAX_RUNTIME_SECONDS) / 3600
        if hours > most:
            raise ValidationError(f"At most {most:g} hours.")
        return hours

    def clean_name(self):
        validate_job_name(self.cleaned_data["name"])
        return self.cleaned_data["name"]

    def clean_image(self):
        parse_image(self.cleaned_data["image"])
        return self.cleaned_data["image"].strip()

    def _argv(self, field: str) -> list[str]:
        try:
            words = shlex.split(self.cleaned_data[field])
        except ValueError as error:
            raise ValidationError(f"Cannot split this like a shell line: {error}.") from None
        validate_argv(words, field)
        return words

    def clean_command(self):
        return self._argv("command")

    def clean_args(self):
        return self._argv("args")

    def clean_env(self):
        env = parse_env_text(self.cleaned_data["env"])
        validate_env(env)
        return env

    def submit_fields(self) -> dict:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "image": data["image"],
            "command": data["command"],
            "args": data["args"],
            "env": data["env"],
            "count": data["count"],
            "cpu_millicores": int(data["cpu"] * 1000),
            "memory_mb": data["memory_mb"],
            "priority": data["priority"],
            "preemptible": data["preemptible"],
            "max_runtime_seconds": max(60, int(data["max_runtime_hours"] * 3600)),
        }

    def add_service_errors(self, error: ValidationError) -> None:
        for field, messages in error.message_dict.items():
            name = SERVICE_FIELDS.get(field, field)
            for message in messages:
                self.add_error(name if name in self.fields else None, message)


class QuotaForm(forms.Form):
    guaranteed = forms.IntegerField(min_value=0, max_value=100_000)
    limit = forms.IntegerField(min_value=0, max_value=100_000)
    monthly_gpu_hours = forms.DecimalField(
        required=False, min_value=0, max_digits=10, decimal_places=1, label="Monthly GPU-hours",
        help_text="Normalised GPU-hours per calendar month; empty for no budget.",
    )  # fmt: skip

    def clean(self):
        data = super().clean()
        if data.get("limit") is not None and data.get("guaranteed") is not None and data["limit"] < data["guaranteed"]:
            self.add_error(
                "limit", f"The limit ({data['limit']}) must be at least the guaranteed amount ({data['guaranteed']})."
            )
        return data


class NewQuotaForm(QuotaForm):
    resource_class = forms.ModelChoiceField(queryset=None, empty_label="Pick a resource class")

    def __init__(self, *args, team, **kwargs):
        super().__init__(*args, **kwargs)
        taken = Quota.objects.filter(team=team).values("resource_class")
        self.fields["resource_class"].queryset = ResourceClass.objects.filter(present=True).exclude(pk__in=taken)
