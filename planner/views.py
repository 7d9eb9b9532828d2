"""The planner's pages: the runs list, the new-run form, a run's progress and results, cancel and CSV export.
Admins see and do everything; team leads read runs (their teams' rows only, planner.access); everybody else
gets 404, as for any page they may not see."""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from gpus.models import Node
from jobs.cycle.admit import FleetKeys

from . import access, runs, validation
from .api.views import csv_response
from .forms import PlanForm
from .models import PlanRun

#: Nodes listed with a "Preview this carve" link per MIG change (the rest are counted).
PREVIEW_NODES = 8
#: Never-ran entries shown per scenario (the API and the CSV have them all).
NEVER_RAN_SHOWN = 50


def _readers_only(user) -> None:
    if not access.can_read(user):
        raise Http404


def _admins_only(user) -> None:
    if not access.can_run(user):
        raise Http404


@login_required
def run_list(request):
    _readers_only(request.user)
    page = Paginator(PlanRun.objects.select_related("created_by").defer("results"), 50).get_page(
        request.GET.get("page")
    )
    return render(request, "planner/run_list.html", {"page": page, "can_run": access.can_run(request.user)})


@login_required
def run_new(request):
    _admins_only(request.user)
    form = PlanForm(request.POST if request.method == "POST" else None)
    if request.method == "POST":
        checked = None
        try:
            checked = validation.validate_request(form.to_request())
        except validation.PlanInvalid as invalid:
            form.add_plan_errors(invalid.errors)
        if checked is not None and not form.has_errors:
            try:
                run = runs.create_run(request.user, checked)
            except PermissionDenied:
                raise Http404 from None
            messages.success(request, f"Plan run #{run.pk} queued; this page follows its progress.")
            return redirect(run)
    return render(request, "planner/run_form.html", {"form": form})


@login_required
def run_detail(request, pk: int):
    _readers_only(request.user)
    run = get_object_or_404(PlanRun.objects.select_related("created_by"), pk=pk)
    results = access.results_for(request.user, run.results)
    context = {"run": run, "results": results, "can_run": access.can_run(request.user)}
    if results:
        context.update(_result_context(results, request.user))
    return render(request, "planner/run_detail.html", context)


@login_required
@require_POST
def run_cancel(request, pk: int):
    _admins_only(request.user)
    run = get_object_or_404(PlanRun, pk=pk)
    try:
        runs.cancel_run(request.user, run)
    except runs.RunEnded as ended:
        messages.info(request, str(ended))
    else:
        messages.success(request, f"Plan run #{run.pk} is being cancelled.")
    return redirect(run)


@login_required
def run_csv(request, pk: int):
    _readers_only(request.user)
    run = get_object_or_404(PlanRun, pk=pk)
    if run.results is None:
        raise Http404
    return csv_response(run, access.results_for(request.user, run.results))


def _layout_text(layout: dict | None) -> str:
    if not layout:
        return "off"
    return ", ".join(f"{count}x{profile}" if count > 1 else profile for profile, count in layout.items() if count)


def carve_links(change: dict, gpu_counts: dict[tuple[str, str], int], home: str) -> list[dict]:
    """For a MIG change, a link per node (the first PREVIEW_NODES) to its configure page with the layout filled in
    and previewed (gpus.views.node_configure's prefill): the admin still previews, confirms and applies there. A
    change names nodes by their fleet key ("<cluster>/<node>", plain for the ``home`` cluster); ``gpu_counts`` is by
    (cluster, node)."""
    links = []
    for key in change.get("nodes", [])[:PREVIEW_NODES]:
        cluster, _, name = key.rpartition("/")
        cluster = cluster or home
        if (cluster, name) not in gpu_counts:
            continue  # a node the proposal adds, or one gone since
        query = {"cluster": cluster} if cluster != home else {}
        query["kind"] = "mig"
        if change.get("preset"):
            query["preset"] = change["preset"]
        else:
            per_gpu = list(change.get("per_gpu") or [])
            if len(per_gpu) == 1:
                per_gpu *= gpu_counts[cluster, name]
            for index, layout in enumerate(per_gpu[: gpu_counts[cluster, name]]):
                query[f"gpu_{index}"] = _layout_text(layout)
        links.append({"node": key, "url": reverse("gpus:node-configure", args=[name]) + "?" + urlencode(query)})
    return links


#: Characters of a scenario's short name (its name up to the first ": "), as tables show it.
SHORT_NAME_CHARS = 32


def labelled(scenarios: list[dict]) -> list[dict]:
    """Each scenario with a letter (A for the first, the baseline) and a short name for the tables' headers and
    rows; the full name, which for a suggested layout spells out the whole layout, goes to the legend and titles."""
    out = []
    for index, scenario in enumerate(scenarios):
        short = str(scenario.get("name", "")).split(": ", 1)[0]
        if len(short) > SHORT_NAME_CHARS:
            short = short[: SHORT_NAME_CHARS - 1] + "…"
        out.append({**scenario, "code": chr(ord("A") + index) if index < 26 else str(index + 1), "short": short})
    return out


def _result_context(results: dict, user) -> dict:
    scenarios = labelled(results.get("scenarios", []))
    home = FleetKeys().home
    counts = Node.objects.present().values_list("cluster__name", "name", "gpu_count")
    gpu_counts = {(cluster, name): count for cluster, name, count in counts}
    carve = []
    if access.can_run(user):
        for scenario in scenarios:
            if scenario.get("origin") == "baseline":
                continue
            for change in scenario.get("changes", []):
                if change.get("type") == "mig":
                    links = carve_links(change, gpu_counts, home)
                    more = max(0, len(change.get("nodes", [])) - PREVIEW_NODES)
                    carve.append({"scenario": scenario["name"], "change": change, "links": links, "more": more})
    # Per-team and per-class tables: a group of rows per team (class), one row per scenario, so that the tables
    # keep six columns however many scenarios a run has (up to 1 + MAX_PROPOSALS + MAX_SUGGEST).
    team_rows, class_rows = _pivot(scenarios, "teams", "team"), _pivot(scenarios, "classes", "class")
    never_ran = [
        {
            "scenario": s["name"],
            "code": s["code"],
            "rows": s.get("never_ran", [])[:NEVER_RAN_SHOWN],
            "total": s.get("totals", {}).get("never_ran", 0),
            "listed": len(s.get("never_ran", [])),
        }
        for s in scenarios
    ]
    cluster_rows = _pivot(scenarios, "clusters", "cluster")
    for row in cluster_rows:
        row["name"] = row["key"] or "the cluster"
    return {
        "scenarios": scenarios,
        # A table per cluster when the replay held several (one cluster's figures are the totals).
        "cluster_rows": cluster_rows if len(cluster_rows) > 1 else [],
        "fidelity": results.get("fidelity") or {},
        "suggestions": results.get("suggestions") or {},
        "team_rows": team_rows,
        "class_rows": class_rows,
        "never_ran": never_ran,
        "carve": carve,
        "team_names": {row["key"]: row["name"] for row in team_rows},
        "class_names": {row["key"]: row["name"] for row in class_rows},
    }


def _pivot(scenarios: list[dict], part: str, key: str) -> list[dict]:
    rows: dict = {}
    for index, scenario in enumerate(scenarios):
        for row in scenario.get(part, []):
            entry = rows.setdefault(
                row[key], {"key": row[key], "name": row.get("name", ""), "cells": [None] * len(scenarios)}
            )
            entry["cells"][index] = row
    for entry in rows.values():
        entry["lines"] = [{"scenario": s, "cell": cell} for s, cell in zip(scenarios, entry["cells"], strict=True)]
    return sorted(rows.values(), key=lambda r: str(r["name"]).lower())
