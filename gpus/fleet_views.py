"""The fleet's pages: every cluster with its health and what it offers (everyone signed in), and registering,
changing, checking and removing one (admins; the rules are gpus.fleet's)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q, Sum
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from . import fleet, pages
from .forms import ClusterForm
from .models import Cluster, Node
from .views import _staff_required


def _clusters():
    present = Q(nodes__gone_at__isnull=True)
    return Cluster.objects.annotate(
        node_total=Count("nodes", filter=present), gpu_total=Sum("nodes__gpu_count", filter=present)
    ).order_by("name")


@login_required
def cluster_list(request):
    clusters = list(_clusters())
    return render(
        request,
        "gpus/cluster_list.html",
        {
            "clusters": clusters,
            "unreachable": [c for c in clusters if c.health == "unreachable"],
            "gpus": sum(c.gpu_total or 0 for c in clusters),
        },
    )


@login_required
def cluster_detail(request, name: str):
    cluster = get_object_or_404(_clusters(), name=name)
    nodes = Node.objects.visible_to(request.user).present().filter(cluster=cluster).order_by("name")[:200]
    context = {"cluster": cluster, "nodes": nodes, **pages.cluster_detail_context(request, cluster)}
    return render(request, "gpus/cluster_detail.html", context)


def _input(form: ClusterForm, existing: Cluster | None) -> fleet.ClusterInput:
    data = dict(form.cleaned_data)
    if existing is not None:
        data["name"] = existing.name
    return fleet.ClusterInput(**{k: v for k, v in data.items() if k in fleet.ClusterInput.__dataclass_fields__})


def _show_problems(form: ClusterForm, problems: dict[str, list[str]]) -> None:
    for name, messages_ in problems.items():
        for message in messages_:
            form.add_error(name if name in form.fields else None, message)


@_staff_required
def cluster_new(request):
    form = ClusterForm(request.POST or None, scenarios=fleet.scenarios())
    if request.method == "POST" and form.is_valid():
        data = _input(form, None)
        problems = fleet.problems(data)
        if not problems:
            try:
                cluster = fleet.register(request.user, data)
            except fleet.Problems as found:
                problems = found.errors
            else:
                messages.success(request, f"Cluster {cluster.name} registered; its inventory is read on the next pass.")
                return redirect(cluster)
        _show_problems(form, problems)
    elif request.method == "POST":
        # Format problems are shown; the connection's own rules are checked too, so every problem shows at once.
        raw = {k: v for k, v in request.POST.items() if k in fleet.ClusterInput.__dataclass_fields__ and k != "labels"}
        _show_problems(
            form, {k: v for k, v in fleet.problems(fleet.ClusterInput(**raw)).items() if k not in form.errors}
        )
    return render(request, "gpus/cluster_form.html", {"form": form, "cluster": None})


@_staff_required
def cluster_edit(request, name: str):
    cluster = get_object_or_404(Cluster, name=name)
    if cluster.connection == "settings":
        messages.error(request, "The cluster configured in settings is changed in the portal's settings, not here.")
        return redirect(cluster)
    initial = {field: getattr(cluster, field) for field in ("name", *fleet.EDITABLE)}
    initial["labels"] = "\n".join(f"{k}={v}" for k, v in (cluster.labels or {}).items())
    form = ClusterForm(request.POST or None, initial=initial, scenarios=fleet.scenarios(), editing=True)
    if request.method == "POST" and form.is_valid():
        try:
            fleet.change(request.user, cluster, _input(form, cluster))
        except fleet.Problems as found:
            _show_problems(form, found.errors)
        else:
            messages.success(request, f"Cluster {cluster.name} saved.")
            return redirect(cluster)
    return render(request, "gpus/cluster_form.html", {"form": form, "cluster": cluster})


@_staff_required
@require_POST
def cluster_remove(request, name: str):
    cluster = get_object_or_404(Cluster, name=name)
    try:
        fleet.remove(request.user, cluster)
    except fleet.Refused as refused:
        messages.error(request, str(refused))
        return redirect(cluster)
    messages.success(request, f"Cluster {name} removed.")
    return redirect("gpus:cluster-list")


@_staff_required
@require_POST
def cluster_check(request, name: str):
    cluster = get_object_or_404(Cluster, name=name)
    if fleet.sync(cluster) is None:
        messages.error(request, f"Cluster {cluster.name} could not be reached: {cluster.last_error}")
    else:
        messages.success(request, f"Cluster {cluster.name} reached; its inventory is up to date.")
    return redirect(cluster)
