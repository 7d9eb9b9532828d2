"""The new-run page's form: a window, up to five proposals of up to six change rows each, and the options, all
picked from lists (nodes from the inventory or all nodes of a product, presets, teams, classes) so nobody writes
JSON. The form only turns what was picked into the API's request (to_request); planner.validation checks it,
and its problems come back next to the fields they are about (add_plan_errors).

Over a fleet: the window picks what is replayed (the whole fleet or one cluster), and each proposal its cluster.
Nodes are listed by their fleet keys ("<cluster>/<node>", plain names for the default cluster); a proposal with no
cluster picked is for the run's cluster, or else for the one cluster its picked nodes are in (the default cluster
when none are picked), and only that cluster's nodes of a product are taken for "every node of a product".
"""

from __future__ import annotations

import re

from django import forms

from accounts.models import Team
from gpus.models import Node, ResourceClass
from jobs.cycle.admit import FleetKeys
from vocab import mig

from .validation import CHANGE_FIELDS, MAX_PROPOSALS, MAX_SUGGEST

CHANGES_PER_PROPOSAL = 6
RANGES = [("7", "Last 7 days"), ("14", "Last 14 days"), ("30", "Last 30 days"), ("dates", "Between dates")]
CHANGE_TYPES = [
    ("", "—"),
    ("mig", "MIG layout"),
    ("time_slicing", "Time-slicing replicas"),
    ("quota", "Quota / guarantee"),
    ("add_nodes", "Add nodes like one"),
    ("remove_nodes", "Remove nodes"),
]
#: "2x1g.10gb", "1g.10gb×2", "3g.40gb": one instance kind of a per-GPU layout line.
LAYOUT_ITEM = re.compile(r"^(?:(\d{1,2})\s*[x×]\s*)?([0-9a-z.+]+?)(?:\s*[x×]\s*(\d{1,2}))?$", re.I)


def node_choices(fleet: FleetKeys):
    """Each node with GPUs by its fleet key, labelled with its cluster when the fleet has more than one."""
    nodes = (
        Node.objects.present()
        .filter(gpu_count__gt=0)
        .order_by("cluster__name", "name")
        .values_list("cluster_id", "name", "product", "gpu_count")
    )
    several = len(fleet.ids) > 1
    return [
        (
            fleet.key(cluster_id, name),
            f"{name}{f' in {fleet.cluster_name(cluster_id)}' if several else ''} "
            f"({gpus}× {product.removeprefix('NVIDIA-')})",
        )
        for cluster_id, name, product, gpus in nodes
    ]


def cluster_choices(fleet: FleetKeys, empty: str):
    names = sorted(fleet.ids, key=lambda name: (name != fleet.home, name))
    return [("", empty)] + [(name, f"{name} (default)" if name == fleet.home else name) for name in names]


def product_choices():
    products = Node.objects.present().filter(gpu_count__gt=0).exclude(product="").values_list("product", flat=True)
    return [("", "—")] + [(p, f"every {p.removeprefix('NVIDIA-')} node") for p in sorted(set(products))]


def preset_choices():
    names: set[str] = set()
    for product in Node.objects.present().filter(mig_capable=True).values_list("product", flat=True).distinct():
        geometry = mig.product_geometry(product)
        if geometry is not None:
            names.update(mig.preset_layouts(geometry))
    return [("", "Custom layout per GPU (below)")] + [(n, n) for n in sorted(names)]


def parse_layout_lines(text: str) -> tuple[list[dict | None], list[str]]:
    """The per-GPU box: one line per GPU (``3g.40gb, 2x1g.10gb``; ``off`` leaves MIG off on that GPU), as
    [{profile: count} or None], and what cannot be read. Which profiles the GPU has is planner.proposals' to check."""
    layouts, problems = [], []
    for number, line in enumerate(text.strip().splitlines(), start=1):
        line = line.strip()
        if line.lower() in ("off", "none", "disabled", "-", ""):
            layouts.append(None)
            continue
        layout: dict[str, int] = {}
        for item in line.replace(";", ",").split(","):
            item = item.strip()
            if not item:
                continue
            match = LAYOUT_ITEM.match(item)
            if not match:
                problems.append(f"Line {number}: {item!r} is not a profile with an optional count, e.g. 2x1g.10gb.")
                continue
            count = int(match.group(1) or match.group(3) or 1)
            layout[match.group(2).lower()] = layout.get(match.group(2).lower(), 0) + count
        layouts.append(layout)
    return layouts, problems


class WindowForm(forms.Form):
    range = forms.ChoiceField(choices=RANGES, initial="30", widget=forms.RadioSelect, label="History window")
    cluster = forms.ChoiceField(
        required=False,
        label="Replay",
        help_text="The whole fleet (each job placed where admission would place it), or one cluster with the work "
        "that ran there.",
    )
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}), label="From")
    end = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        label="To (included)",
        help_text="Leave empty for up to now.",
    )

    def to_request(self) -> dict:
        data = getattr(self, "cleaned_data", {})
        where = {"cluster": data["cluster"]} if data.get("cluster") else {}
        if data.get("range") is None:
            return where  # the choice itself was not one of the list: its own error says so
        if data["range"] != "dates":
            return {"days": int(data["range"]), **where}
        return {
            "start": data["start"].isoformat() if data.get("start") else "",
            "end": data["end"].isoformat() if data.get("end") else "",
            **where,
        }


class OptionsForm(forms.Form):
    preemption = forms.BooleanField(
        required=False,
        initial=True,
        label="Preemption",
        help_text="Reclaim borrowed capacity for guaranteed work, as the job cycle does.",
    )
    borrowing = forms.BooleanField(
        required=False,
        initial=True,
        label="Borrowing",
        help_text="Preemptible work may run above a team's guarantee, up to its limit.",
    )
    suggest = forms.IntegerField(
        min_value=0,
        max_value=MAX_SUGGEST,
        initial=0,
        label="Suggest MIG layouts",
        help_text="How many MIG layouts to search for from the window's demand, each "
        "replayed like a proposal (0: none).",
    )

    def to_request(self) -> dict:
        data = getattr(self, "cleaned_data", {})
        return {name: data[name] for name in ("preemption", "borrowing", "suggest") if data.get(name) is not None}


class ProposalForm(forms.Form):
    name = forms.CharField(required=False, max_length=60, label="Proposal name")
    cluster = forms.ChoiceField(required=False, label="Cluster", help_text="The cluster the changes are made to.")

    def has_content(self, changes: list[ChangeForm]) -> bool:
        return bool(self.data.get(self.add_prefix("name"), "").strip()) or any(c.has_content() for c in changes)


class ChangeForm(forms.Form):
    type = forms.ChoiceField(choices=CHANGE_TYPES, required=False, label="Change")
    nodes = forms.MultipleChoiceField(required=False, label="Nodes", widget=forms.SelectMultiple(attrs={"size": 4}))
    product = forms.ChoiceField(required=False, label="…or all nodes of a product")
    preset = forms.ChoiceField(required=False, label="MIG preset")
    per_gpu = forms.CharField(
        required=False,
        label="Layout per GPU",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "placeholder": "3g.40gb, 2x1g.10gb"}),
        help_text="One line per GPU (one line alone: every GPU the same); off leaves MIG off on that GPU.",
    )
    replicas = forms.IntegerField(
        required=False, min_value=1, max_value=64, label="Replicas per GPU", help_text="1 turns time-slicing off."
    )
    team = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label="Team")
    class_id = forms.TypedChoiceField(required=False, coerce=int, empty_value=None, label="Resource class")
    guaranteed = forms.IntegerField(required=False, min_value=0, label="Guaranteed")
    limit = forms.IntegerField(required=False, min_value=0, label="Limit")
    like = forms.ChoiceField(required=False, label="Like node")
    count = forms.IntegerField(required=False, min_value=1, max_value=500, label="How many")

    def __init__(self, *args, choices: dict, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["nodes"].choices = choices["nodes"]
        self.fields["like"].choices = [("", "—"), *choices["nodes"]]
        self.fields["product"].choices = choices["products"]
        self.fields["preset"].choices = choices["presets"]
        self.fields["team"].choices = choices["teams"]
        self.fields["class_id"].choices = choices["classes"]

    def has_content(self) -> bool:
        return bool(self.data.get(self.add_prefix("type")))

    def picked(self) -> list[str]:
        """The fleet keys of the nodes picked by name (not by product)."""
        data = getattr(self, "cleaned_data", {})
        kind = data.get("type")
        if kind not in CHANGE_FIELDS:
            return []
        keys = list(data.get("nodes") or []) if "nodes" in CHANGE_FIELDS[kind] else []
        return keys + ([data["like"]] if kind == "add_nodes" and data.get("like") else [])

    def to_change(self, node_products: dict[str, list[str]], at: str, fleet: FleetKeys) -> dict:
        """The change as the API's JSON (only the fields of its type), its nodes named in cluster ``at`` (a node of
        another cluster keeps its key, which that cluster's proposal does not have: the problem names it)."""
        data = getattr(self, "cleaned_data", {})
        kind = data.get("type") or self.data.get(self.add_prefix("type"))
        change: dict = {"type": kind}
        if kind not in CHANGE_FIELDS:
            return change

        def named(key: str) -> str:
            where, sep, name = key.partition("/")
            return name if sep and where == at else key

        if "nodes" in CHANGE_FIELDS[kind]:
            picked = [named(key) for key in data.get("nodes") or []]
            for key in node_products.get(data.get("product") or "", []):
                where, sep, name = key.partition("/")
                if (where if sep else fleet.home) == at and named(key) not in picked:
                    picked.append(named(key))
            change["nodes"] = picked
        if kind == "mig":
            if data.get("preset"):
                change["preset"] = data["preset"]
            else:
                layouts, problems = parse_layout_lines(data.get("per_gpu") or "")
                for problem in problems:
                    self.add_error("per_gpu", problem)
                change["per_gpu"] = layouts
        elif kind == "time_slicing":
            change["replicas"] = data.get("replicas")
        elif kind == "quota":
            change.update({name: data.get(name) for name in ("team", "class_id", "guaranteed", "limit")})
        elif kind == "add_nodes":
            change.update({"like": named(data["like"]) if data.get("like") else None, "count": data.get("count")})
        return change


class PlanForm:
    """The page's whole form: bound to POST (or empty), it validates its parts and builds the request."""

    def __init__(self, data=None):
        self.data = data
        self.fleet = FleetKeys()
        choices = {
            "nodes": node_choices(self.fleet),
            "products": product_choices(),
            "presets": preset_choices(),
            "teams": [("", "—")] + [(t.pk, t.name) for t in Team.objects.order_by("name")],
            "classes": [("", "—")]
            + [(rc.pk, rc.display_name) for rc in ResourceClass.objects.filter(present=True).order_by("key")],
        }
        self.window = WindowForm(data, prefix="w")
        self.window.fields["cluster"].choices = cluster_choices(self.fleet, "The whole fleet")
        self.options = OptionsForm(data, prefix="o", initial={"preemption": True, "borrowing": True, "suggest": 0})
        self.proposals = []
        for i in range(MAX_PROPOSALS):
            proposal = ProposalForm(data, prefix=f"p{i}")
            proposal.fields["cluster"].choices = cluster_choices(self.fleet, "The run's, or its nodes' cluster")
            proposal.changes = [
                ChangeForm(data, prefix=f"p{i}-c{j}", choices=choices) for j in range(CHANGES_PER_PROPOSAL)
            ]
            proposal.number = i + 1
            self.proposals.append(proposal)
        self.non_field_errors: list[str] = []
        #: The API request's proposal index → (proposal form, [change forms in the request's order]).
        self._sent: list[tuple[ProposalForm, list[ChangeForm]]] = []

    def forms(self):
        yield self.window
        yield self.options
        for proposal in self.proposals:
            yield proposal
            yield from proposal.changes

    def to_request(self) -> dict:
        """The API's request from what was picked. A field that could not even be read (a number that is not one)
        has its error already and is left out of the request, so planner.validation still checks everything
        else and every problem is shown at once (add_plan_errors does not repeat one on a field that has one)."""
        for form in self.forms():
            form.is_valid()
        node_products: dict[str, list[str]] = {}
        for cluster_id, name, product in (
            Node.objects.present().filter(gpu_count__gt=0).values_list("cluster_id", "name", "product")
        ):
            node_products.setdefault(product, []).append(self.fleet.key(cluster_id, name))
        request = {**self.window.to_request(), "proposals": [], "options": self.options.to_request()}
        for proposal in self.proposals:
            if not proposal.has_content(proposal.changes):
                continue
            used = [c for c in proposal.changes if c.has_content()]
            cleaned = getattr(proposal, "cleaned_data", {})
            name = cleaned.get("name", "")
            at = cleaned.get("cluster") or request.get("cluster") or ""
            if not at:  # the one cluster its picked nodes are in, or the default cluster
                found = {key.partition("/")[0] if "/" in key else self.fleet.home for c in used for key in c.picked()}
                at = found.pop() if len(found) == 1 else self.fleet.home
            request["proposals"].append(
                {"name": name, "cluster": at, "changes": [c.to_change(node_products, at, self.fleet) for c in used]}
            )
            self._sent.append((proposal, used))
        return request

    def add_plan_errors(self, errors: dict[str, list[str]]) -> None:
        """planner.validation's problems, each put next to the field (or the proposal, or the change) it names."""
        path = re.compile(r"^proposals\[(\d+)\](?:\.changes\[(\d+)\])?(?:\.(\w+))?")
        for key, messages in errors.items():
            match = path.match(key)
            target, field = None, None
            if key in ("days", "start", "end", "cluster"):
                target, field = self.window, "range" if key == "days" else key
            elif key.startswith("options"):
                target, field = self.options, key.partition(".")[2] or None
            elif match and int(match.group(1)) < len(self._sent):
                proposal, changes = self._sent[int(match.group(1))]
                target, field = proposal, match.group(3)
                if match.group(2) is not None and int(match.group(2)) < len(changes):
                    target, field = changes[int(match.group(2))], match.group(3)
                elif field == "changes":
                    field = None
            if target is None:
                self.non_field_errors.extend(messages)
                continue
            if field is not None and field not in target.fields:
                field = None
            if field is not None and field in target.errors:
                continue  # the field's own error (it could not be read) already says what to fix
            for message in messages:
                target.add_error(field, message)

    @property
    def has_errors(self) -> bool:
        return bool(self.non_field_errors) or any(form.errors for form in self.forms())
