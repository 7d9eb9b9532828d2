"""Dataset pages for admins: the published datasets, publishing one to chosen teams, changing its teams or
description, and unpublishing it after a confirmation. Every change goes through jobs.storage.volumes.save_dataset /
delete_dataset (admin check, validation, audit); the cluster follows on the volume reconcile they kick.

Members never reach these pages (404, as other admin pages): they see the datasets published to their teams,
read-only, on the Volumes page."""

from __future__ import annotations

from functools import wraps

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render

from accounts.models import Team
from gpus.models import Cluster, settings_cluster_pk
from jobs.models import Dataset, TeamVolume
from jobs.storage.volumes import (
    AUDIT_FIELDS,
    DATASET_NAME_HELP,
    check_dataset,
    delete_dataset,
    save_dataset,
    volume_users,
)


class DatasetForm(forms.Form):
    """What an admin describes to publish a dataset: where the data is, how big it is, and for which teams."""

    name = forms.CharField(max_length=40, help_text=DATASET_NAME_HELP + " Teams see it as claim dataset-<name>.")
    description = forms.CharField(max_length=200, required=False, help_text="What is in it, for the teams.")
    source = forms.ChoiceField(choices=Dataset.Source.choices, initial=Dataset.Source.NFS)
    server = forms.CharField(
        max_length=253, label="Server or driver", help_text="NFS: the server's host name. CSI: the driver's name."
    )
    path = forms.CharField(
        max_length=1024, label="Export path or volume handle", help_text="NFS: the exported directory. CSI: the handle."
    )
    capacity_gib = forms.IntegerField(label="Size (GiB)", min_value=1, max_value=1_000_000, initial=100)
    teams = forms.ModelMultipleChoiceField(
        queryset=Team.objects.order_by("name"),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="Each team gets a read-only claim on it in its namespace; untick a team to unpublish it there.",
    )

    clusters = forms.ModelMultipleChoiceField(
        queryset=Cluster.objects.order_by("name"),
        widget=forms.CheckboxSelectMultiple,
        help_text="The clusters whose nodes can reach the storage: the dataset is published to its teams on each.",
    )

    def __init__(self, *args, instance: Dataset | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.instance = instance
        if not self.is_bound:
            chosen = list(instance.clusters.all()) if instance is not None else []
            self.fields["clusters"].initial = chosen or [settings_cluster_pk()]
        for name in ("name", "server", "path"):
            self.fields[name].widget.attrs.update(autocapitalize="none", autocomplete="off", spellcheck="false")

    def clean(self):
        """Also what jobs.storage.volumes.check_dataset says about the fields that passed their own checks, so one round
        shows every problem."""
        data = super().clean()
        for key, problems in check_dataset(data, self.instance).items():
            if key in self.fields and key not in self.errors and key in data:
                self.add_error(key, problems)
        return data

    def save(self, user) -> Dataset | None:
        """Save through jobs.storage.volumes.save_dataset; its errors land on these fields (None when there were
        any)."""
        data = self.cleaned_data
        fields = {name: data[name] for name in AUDIT_FIELDS}
        try:
            return save_dataset(
                user, fields, list(data["teams"]), instance=self.instance, clusters=list(data["clusters"])
            )
        except ValidationError as error:
            for key, problems in error.message_dict.items():
                self.add_error(key if key in self.fields else None, problems)
        return None


def _admin_required(view):
    """Admin pages answer 404 to everyone else, like the other admin pages (they are not there for them)."""

    @login_required
    @wraps(view)
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def _claims_by_dataset() -> dict[int, list[TeamVolume]]:
    claims: dict[int, list[TeamVolume]] = {}
    for volume in TeamVolume.objects.filter(dataset__isnull=False).select_related("team").order_by("team__name"):
        claims.setdefault(volume.dataset_id, []).append(volume)
    return claims


@_admin_required
def dataset_list(request):
    """The datasets with the teams they are published to and each team's claim as the cluster shows it."""
    form = DatasetForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            dataset = form.save(request.user)
        except PermissionDenied as error:
            form.add_error(None, str(error))
            dataset = None
        if dataset is not None:
            teams = ", ".join(t.name for t in dataset.teams.all()) or "no team yet"
            messages.success(request, f"Dataset {dataset.name} is published to {teams}; the claims appear shortly.")
            return redirect("jobs:dataset-list")
    datasets = Dataset.objects.prefetch_related(Prefetch("teams", queryset=Team.objects.order_by("name")))
    claims = _claims_by_dataset()
    rows = [{"dataset": d, "claims": {c.team_id: c for c in claims.get(d.pk, [])}} for d in datasets]
    for row in rows:
        row["teams"] = [(team, row["claims"].get(team.pk)) for team in row["dataset"].teams.all()]
    return render(request, "jobs/dataset_list.html", {"rows": rows, "form": form, "current": "datasets"})


@_admin_required
def dataset_edit(request, pk: int):
    """Change a dataset's teams (publish to more, unpublish from some), its description, source or size."""
    dataset = get_object_or_404(Dataset, pk=pk)
    initial = {name: getattr(dataset, name) for name in AUDIT_FIELDS} | {"teams": list(dataset.teams.all())}
    form = DatasetForm(request.POST or None, initial=initial, instance=dataset)
    if request.method == "POST" and form.is_valid():
        if form.save(request.user) is not None:
            messages.success(request, f"Dataset {dataset.name} is saved; the teams' claims follow shortly.")
            return redirect("jobs:dataset-list")
    return render(request, "jobs/dataset_form.html", {"dataset": dataset, "form": form, "current": "datasets"})


@_admin_required
def dataset_unpublish(request, pk: int):
    """GET: what unpublishing removes and who mounts it now; POST: unpublish from every team and forget it."""
    dataset = get_object_or_404(Dataset, pk=pk)
    if request.method == "POST":
        delete_dataset(request.user, dataset)
        messages.success(
            request, f"Dataset {dataset.name} is unpublished: its claims are removed from every team; the data is kept."
        )
        return redirect("jobs:dataset-list")
    teams = list(dataset.teams.order_by("name"))
    users = [{**user, "team": team} for team in teams for user in volume_users(team).get(dataset.claim_name, [])]
    return render(
        request,
        "jobs/dataset_unpublish.html",
        {"dataset": dataset, "teams": teams, "users": users, "current": "datasets"},
    )
