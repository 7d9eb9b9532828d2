"""Browser forms for inference services: "New service" (the job form's replica fields — image, command, env,
secrets, volumes, class, GPUs/CPU/memory per replica — plus the port, probes, replica bounds and the autoscaling
metric), "Change image" and "Scale". They check the shape of what was typed; jobs.service.ops decides whether it
may run (quota, capacity, the class's nodes) and its errors land next to these fields, every problem at once."""

from __future__ import annotations

from django import forms
from django.core.exceptions import ValidationError

from jobs.choices import ServiceMetric
from jobs.forms import JobSubmitForm, split_words
from jobs.service.ops import service_errors
from jobs.validation import parse_image

PROBE_TYPES = [("http", "HTTP GET on a path"), ("tcp", "TCP connect")]
#: The job form's fields a service has no use for: a service runs until stopped, one kind, no arrays or retries.
JOB_ONLY_FIELDS = (
    "kind", "workers", "topology_key", "topology_mode", "max_retries", "preemptible", "max_runtime_hours",
    "array_size", "array_parallelism", "idempotency_key", "resubmit_of",
)  # fmt: skip
#: Keys of jobs.service.ops' errors → the form field they are shown next to.
SERVICE_ERROR_FIELDS = {
    "cpu_millicores": "cpu",
    "readiness": "readiness_path",
    "liveness": "liveness_path",
    "spec": None,
}
MAX_PORT = 65535


def _probe_type(*, optional: bool) -> forms.ChoiceField:
    types = [("", "None"), *PROBE_TYPES] if optional else PROBE_TYPES
    return forms.ChoiceField(label="Check", choices=types, required=not optional, initial="" if optional else "http")


def _probe_path(initial: str) -> forms.CharField:
    return forms.CharField(
        label="Path", max_length=255, required=False, initial=initial,
        help_text="For an HTTP check: the path answered with 2xx or 3xx when healthy, e.g. /health.",
    )  # fmt: skip


def _probe_port() -> forms.IntegerField:
    return forms.IntegerField(
        label="Port", min_value=1, max_value=MAX_PORT, required=False, help_text="Empty: the service's port."
    )


def _probe_delay(initial: int | None) -> forms.IntegerField:
    return forms.IntegerField(
        label="Initial delay (seconds)", min_value=0, max_value=3600, required=False, initial=initial,
        help_text="Wait this long after the container starts (model loading) before the first check.",
    )  # fmt: skip


class ServiceForm(JobSubmitForm):
    """What a person fills in to start a service. ``spec()`` and ``service_fields()`` give
    jobs.service.ops.create_service its two dicts."""

    SERVICE_FIELDS = {**JobSubmitForm.SERVICE_FIELDS, **{k: v for k, v in SERVICE_ERROR_FIELDS.items() if v}}

    command = forms.CharField(
        max_length=8000,
        required=False,
        help_text="Optional: one line split into words like a shell does, e.g. python serve.py --port 8000. "
        "Empty: the image's own entrypoint.",
    )
    port = forms.IntegerField(
        min_value=1, max_value=MAX_PORT, initial=8000,
        help_text="The container port the server listens on; the Service forwards to it.",
    )  # fmt: skip
    readiness_type = _probe_type(optional=False)
    readiness_path = _probe_path("/health")
    readiness_port = _probe_port()
    readiness_delay = _probe_delay(10)
    liveness_type = _probe_type(optional=True)
    liveness_path = _probe_path("")
    liveness_port = _probe_port()
    liveness_delay = _probe_delay(None)
    min_replicas = forms.IntegerField(
        label="Minimum replicas", min_value=1, max_value=64, initial=1,
        help_text="Always running; admitted against your team's quota like a job (waits if quota is short).",
    )  # fmt: skip
    max_replicas = forms.IntegerField(
        label="Maximum replicas", min_value=1, max_value=64, initial=2,
        help_text="The autoscaler adds replicas up to this, each only when quota and a node allow.",
    )  # fmt: skip
    metric = forms.ChoiceField(label="Scale on", choices=ServiceMetric.choices, initial=ServiceMetric.CPU)
    metric_name = forms.CharField(
        label="Metric name", max_length=253, required=False,
        help_text="For a custom or external metric, e.g. requests_per_second (served by the metrics adapter).",
    )  # fmt: skip
    metric_target = forms.FloatField(
        label="Target", min_value=0.001, initial=70,
        help_text="CPU: utilisation % per replica (1 to 100); a metric: its target average per replica.",
    )  # fmt: skip

    def __init__(self, *args, user, teams, **kwargs):
        super().__init__(*args, user=user, teams=teams, **kwargs)
        for name in JOB_ONLY_FIELDS:
            self.fields.pop(name, None)
        self.fields["count"].label = "GPUs per replica"
        self.fields["count"].help_text = "Units of the class for each replica, all on the replica's node."
        self.fields["cpu"].help_text = "Cores reserved for each replica, e.g. 4 or 0.5."
        self.fields["memory_mb"].help_text = "For each replica; 1024 MiB = 1 GiB."
        self.fields["architecture"].help_text = (
            "Pin the replicas to amd64 or arm64 nodes (the image must be built for it); Any runs them on any node "
            "of the class."
        )
        self.fields["labels"].help_text = (
            "Optional, one key=value per line, e.g. model=llama-3-8b (Kubernetes label grammar). They are put on "
            "the Deployment and every replica pod."
        )
        self.fields["clusters"].help_text = self.fields["clusters"].help_text.replace(
            "It starts on the first with room", "Every replica runs on one cluster: the first with room for the minimum"
        )
        self.fields["name"].max_length = 40
        self.fields["name"].help_text = (
            "Lowercase letters, digits and '-', e.g. llama-chat. It names the Deployment and the Service, so it is "
            "part of the service's address."
        )

    def clean_command(self):
        return split_words(self.cleaned_data.get("command", ""), "command")

    def _probe(self, prefix: str) -> dict:
        data = self.cleaned_data
        kind = data.get(f"{prefix}_type") or ""
        if not kind:
            return {}
        probe: dict = {"type": kind}
        if data.get(f"{prefix}_port"):  # else the service's port, whatever it becomes
            probe["port"] = data[f"{prefix}_port"]
        if data.get(f"{prefix}_delay") is not None:
            probe["initial_delay_seconds"] = data[f"{prefix}_delay"]
        if kind == "http":
            path = (data.get(f"{prefix}_path") or "").strip()
            if not path.startswith("/"):
                self.add_error(f"{prefix}_path", "Give the path to check, starting with /, e.g. /health.")
            probe["path"] = path
        return probe

    def clean(self):
        data = super().clean()
        data["readiness"] = self._probe("readiness")
        data["liveness"] = self._probe("liveness")
        needed = ("team", "resource_class")
        if all(name in data for name in needed):
            fields = self.service_fields() | ({"count": data["count"]} if "count" in data else {})
            errors = service_errors(fields, data["resource_class"], data["team"])
            if errors:
                self.add_service_errors(ValidationError(errors))
        return data

    def add_service_errors(self, error: ValidationError) -> None:
        """Like the job form, without showing one sentence twice next to a field (the form's own check and the
        service's may say the same)."""
        if not hasattr(error, "error_dict"):
            return super().add_service_errors(error)
        fresh = {}
        for key, messages in error.message_dict.items():
            field = self.SERVICE_FIELDS.get(key, key)
            shown = set(self.errors.get(field if field in self.fields else "__all__", []))
            if new := [m for m in messages if m not in shown]:
                fresh[key] = new
        if fresh:
            super().add_service_errors(ValidationError(fresh))

    def spec(self) -> dict:
        """The replica spec (jobs.actions' submit fields a service uses)."""
        data = self.cleaned_data
        return {
            "name": data["name"],
            "image": data["image"],
            "command": data["command"],
            "args": data["args"],
            "env": data["env"],
            "secret_env": data["secret_env"],
            "secret_files": data["secret_files"],
            "count": data["count"],
            "cpu_millicores": int(data["cpu"] * 1000),
            "memory_mb": data["memory_mb"],
            "priority": data["priority"],
            "labels": data["labels"],
            "working_dir": data["working_dir"],
            "volumes": data["volumes"],
            "shm_mb": data.get("shm_mb"),
            "architecture": data.get("architecture") or "",
            "clusters": data.get("clusters") or [],
        }

    def service_fields(self) -> dict:
        data = self.cleaned_data
        return {
            "port": data.get("port"),
            "readiness": data.get("readiness") or {},
            "liveness": data.get("liveness") or {},
            "min_replicas": data.get("min_replicas"),
            "max_replicas": data.get("max_replicas"),
            "metric": data.get("metric") or ServiceMetric.CPU,
            "metric_name": (data.get("metric_name") or "").strip(),
            "metric_target": data.get("metric_target"),
        }


class ServiceImageForm(forms.Form):
    """ "Change image": a new image (and optionally a new command) rolled out replica by replica."""

    image = forms.CharField(max_length=255)

    def clean_image(self):
        image = self.cleaned_data["image"].strip()
        parse_image(image)
        return image


class ServiceScaleForm(forms.Form):
    min_replicas = forms.IntegerField(label="Minimum replicas", min_value=1, max_value=64)
    max_replicas = forms.IntegerField(label="Maximum replicas", min_value=1, max_value=64)

    def clean(self):
        data = super().clean()
        low, high = data.get("min_replicas"), data.get("max_replicas")
        if low is not None and high is not None and high < low:
            self.add_error("max_replicas", f"Give a maximum of at least the minimum ({low}).")
        return data
