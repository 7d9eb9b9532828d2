"""Forms of the inventory pages: choosing how a node's GPUs are carved up, and the taints GPU work tolerates in a
node pool."""

from __future__ import annotations

import json

from django import forms

from vocab import mig
from vocab.taints import Taint, parse_taints

from .choices import ClusterConnection, NodeConfigKind
from .models import Node


class NodeConfigForm(forms.Form):
    """A MIG preset or a layout per GPU (typed as ``profile@slot`` lists), or sharing replicas (time-slicing or
    MPS)."""

    kind = forms.ChoiceField(choices=NodeConfigKind.choices, widget=forms.RadioSelect, initial=NodeConfigKind.MIG)
    preset = forms.ChoiceField(required=False, label="Preset for every GPU")
    replicas = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=64,
        label="Replicas (clients) per GPU",
        help_text="1 turns sharing off (whole GPUs).",
    )
    sharing = forms.ChoiceField(
        required=False,
        choices=[("time-slicing", "Time-slicing (take turns)"), ("mps", "MPS (run at once, memory and compute split)")],
        initial="time-slicing",
        widget=forms.RadioSelect,
        label="How the GPUs are shared",
    )
    rename = forms.BooleanField(
        required=False, label="Advertise as nvidia.com/gpu.shared", help_text="Keeps nvidia.com/gpu for whole GPUs."
    )

    def __init__(self, *args, node: Node, current: list[list[list]] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.node = node
        geometry = mig.product_geometry(node.product)
        self.geometry = geometry
        layouts = mig.preset_layouts(geometry) if geometry and node.mig_capable else {}
        presets = list(layouts)
        self.fields["preset"].choices = [("", "Custom layout per GPU (below)")] + [(p, p) for p in presets]
        # What each preset puts on every GPU, as the per-GPU fields type it: the fields show the preset picked
        # (portal.js fills them in as it changes; a form sent back with a preset shows them filled here).
        self.preset_texts = {
            name: ", ".join(f"{p.profile}@{p.start}" for p in mig.place(geometry, layout)) if layout else "off"
            for name, layout in layouts.items()
        }
        self.fields["preset"].widget.attrs["data-preset-layouts"] = json.dumps(self.preset_texts)
        picked = self.data.get("preset") if self.is_bound else None
        if picked in self.preset_texts:
            self.data = self.data.copy()
            for index in range(node.gpu_count):
                self.data[f"gpu_{index}"] = self.preset_texts[picked]
        if not presets:
            self.fields["kind"].choices = [(NodeConfigKind.TIME_SLICING, NodeConfigKind.TIME_SLICING.label)]
            self.fields["kind"].initial = NodeConfigKind.TIME_SLICING
        # The time-slicing kind covers both of the device plugin's sharing modes.
        self.fields["kind"].choices = [
            (value, "Sharing (time-slicing or MPS)" if value == NodeConfigKind.TIME_SLICING else label)
            for value, label in self.fields["kind"].choices
        ]
        self.fields["replicas"].initial = node.replicas if node.sharing_strategy in ("time-slicing", "mps") else 1
        self.fields["sharing"].initial = "mps" if node.sharing_strategy == "mps" else "time-slicing"
        current = current or []
        for index in range(node.gpu_count if presets else 0):
            placed = current[index] if index < len(current) else []
            self.fields[f"gpu_{index}"] = forms.CharField(
                required=False,
                label=f"GPU {index}",
                initial=", ".join(f"{name}@{start}" for name, start in placed) or "off",
                widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
            )

    @property
    def gpu_fields(self):
        return [self[name] for name in self.fields if name.startswith("gpu_")]

    def request_args(self) -> dict:
        data = self.cleaned_data
        if data["kind"] == NodeConfigKind.TIME_SLICING:
            return {
                "kind": data["kind"],
                "replicas": data.get("replicas"),
                "rename": data.get("rename", False),
                "mps": data.get("sharing") == "mps",
            }
        if data.get("preset"):
            return {"kind": data["kind"], "preset": data["preset"]}
        return {"kind": data["kind"], "gpus": [data.get(f"gpu_{i}", "") for i in range(self.node.gpu_count)]}


class ClusterForm(forms.Form):
    """Registering or changing a cluster of the fleet (gpus.fleet holds the rules; this only reads the fields)."""

    name = forms.SlugField(max_length=63, help_text="Lower-case letters, digits and hyphens; it cannot change later.")
    display_name = forms.CharField(max_length=100, required=False)
    region = forms.CharField(max_length=64, required=False, help_text="For example eu-west-1 or on-premise.")
    labels = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="One key=value per line, for example tier=cloud.",
    )
    connection = forms.ChoiceField(
        choices=[c for c in ClusterConnection.choices if c[0] != ClusterConnection.SETTINGS],
        widget=forms.RadioSelect,
        initial=ClusterConnection.TOKEN,
    )
    server = forms.URLField(
        max_length=500, required=False, assume_scheme="https", label="API server URL", help_text="https://…:6443"
    )
    ca_certificate = forms.CharField(
        required=False,
        strip=False,
        label="CA certificate (PEM)",
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="The kubeconfig's certificate-authority-data, base64-decoded. Empty: the system's trusted CAs.",
    )
    token = forms.CharField(
        required=False,
        widget=forms.PasswordInput(render_value=False),
        help_text="A service account token bound to the portal's ClusterRole. It is sealed and never shown again.",
    )
    kubeconfig_path = forms.CharField(max_length=500, required=False, label="Kubeconfig file on the portal's hosts")
    kube_context = forms.CharField(max_length=200, required=False, label="Kubeconfig context")
    sim_scenario = forms.ChoiceField(required=False, label="Simulated cluster's scenario")

    def __init__(self, *args, scenarios: list[str] = (), editing: bool = False, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.fields["sim_scenario"].choices = [("", "—")] + [(name, name) for name in scenarios]
        if editing:
            self.fields["name"].disabled = True
            self.fields["token"].help_text = "Leave empty to keep the stored token; a new one replaces it."

    def clean_labels(self) -> dict[str, str]:
        labels, bad = {}, []
        for line in (self.cleaned_data.get("labels") or "").splitlines():
            if not line.strip():
                continue
            key, sep, value = line.partition("=")
            if not sep or not key.strip():
                bad.append(line.strip())
                continue
            labels[key.strip()] = value.strip()
        if bad:
            raise forms.ValidationError(f"Write each label as key=value; these are not: {', '.join(bad)}.")
        return labels


class NodePoolTaintsForm(forms.Form):
    """The taints GPU work should tolerate in one node pool beside the conventions the portal knows, one
    ``key=value:Effect`` per line; every problem of every line is reported at once."""

    cluster = forms.CharField(required=False, widget=forms.HiddenInput, max_length=63)
    pool = forms.CharField(required=False, widget=forms.HiddenInput, max_length=253)
    taints = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false"}),
        label="Taints GPU work tolerates here",
        help_text="One per line, as kubectl writes them: key=value:NoSchedule, key:NoExecute. Leave empty to tolerate "
        "only the GPU taints the portal recognises itself (nvidia.com/gpu, sku=gpu).",
    )

    def clean_taints(self) -> list[Taint]:
        taints, problems = parse_taints(self.cleaned_data.get("taints", "").splitlines())
        if problems:
            raise forms.ValidationError(problems)
        return taints
