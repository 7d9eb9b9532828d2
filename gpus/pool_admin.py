"""Admins see the node pools of the inventory and declare, per pool, the taints GPU work should tolerate there beside
the GPU conventions the portal recognises itself (issue 31, item 16). The page changes a declaration only through
gpus.node_pools.declare_taints, which audits it; placement and rendering read it on their next cycle. Where the
pool's cluster serves resource.k8s.io/v1, the page also offers how the pool's GPUs are requested (issue 33), through
gpus.node_pools.choose_gpu_request, which validates and audits it, and which MIG profiles teams may claim from the
pool's dynamic-MIG GPUs, through gpus.node_pools.choose_mig_profiles, likewise."""

from __future__ import annotations

import functools

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from vocab.taints import CONVENTIONS, Taint

from .choices import GpuRequestMode
from .forms import NodePoolTaintsForm
from .models import Cluster
from .node_pools import choose_gpu_request, choose_mig_profiles, declare_taints, pool_rows


def _staff_only(view):
    @functools.wraps(view)
    @login_required
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def _anchor(cluster: str, pool: str) -> str:
    return f"pool-{cluster}-{pool or 'unlabelled'}"


def _page(
    request,
    failed: NodePoolTaintsForm | None = None,
    status: int = 200,
    refused: tuple[str, str, str, list[str]] | None = None,
    mig_refused: tuple[str, str, list[str] | None, list[str]] | None = None,
):
    """The page; ``failed``: a taints form that did not validate; ``refused``: (cluster, pool, the mode asked for,
    every problem) of a GPU-request choice that was refused; ``mig_refused``: the same of a MIG policy."""
    rows = []
    all_pools = pool_rows()
    for row in all_pools:
        anchor = _anchor(row.cluster.name, row.name)
        form = NodePoolTaintsForm(
            auto_id=f"id_{anchor}_%s",
            initial={"cluster": row.cluster.name, "pool": row.name, "taints": "\n".join(str(t) for t in row.declared)},
        )
        if failed is not None and (failed.data.get("cluster", ""), failed.data.get("pool", "")) == (
            row.cluster.name, row.name
        ):  # fmt: skip
            form = failed
        mine = refused is not None and refused[:2] == (row.cluster.name, row.name)
        mig_mine = mig_refused is not None and mig_refused[:2] == (row.cluster.name, row.name)
        rows.append(
            {
                "pool": row,
                "form": form,
                "anchor": anchor,
                "request_chosen": refused[2] if mine else row.gpu_request,
                "request_errors": refused[3] if mine else [],
                "mig_chosen": mig_refused[2] if mig_mine else row.mig_profiles,
                "mig_errors": mig_refused[3] if mig_mine else [],
            }
        )
    context = {
        "rows": rows,
        "conventions": CONVENTIONS,
        "fleet": len({row.cluster.pk for row in all_pools}) > 1,
        "request_modes": GpuRequestMode.choices,
    }
    return render(request, "gpus/nodepool_list.html", context, status=status)


@_staff_only
def nodepool_list(request):
    return _page(request)


def _posted_pool(request) -> tuple[str, str, Cluster]:
    """The node pool a form names (``cluster``, ``pool``): its cluster's name, its name and its cluster; 404 when
    the page lists no such pool."""
    cluster_name, pool = request.POST.get("cluster", ""), request.POST.get("pool", "")
    known = {(row.cluster.name, row.name): row.cluster for row in pool_rows()}
    if (cluster_name, pool) not in known:
        raise Http404("No such node pool.")
    return cluster_name, pool, known[cluster_name, pool]


@_staff_only
@require_POST
def nodepool_taints(request):
    cluster_name, pool, cluster = _posted_pool(request)
    anchor = _anchor(cluster_name, pool)
    form = NodePoolTaintsForm(request.POST, auto_id=f"id_{anchor}_%s")
    if not form.is_valid():
        return _page(request, form, status=400)
    taints: list[Taint] = form.cleaned_data["taints"]
    row = declare_taints(request.user, cluster, pool, taints)
    listed = ", ".join(str(t) for t in taints) or "none beside the GPU conventions"
    messages.success(request, f"Node pool {row} of {cluster_name}: GPU work now tolerates {listed}.")
    return redirect(reverse("gpus:nodepool-list") + f"#{anchor}")


@_staff_only
@require_POST
def nodepool_gpu_request(request):
    cluster_name, pool, cluster = _posted_pool(request)
    mode = request.POST.get("gpu_request", "")
    try:
        row = choose_gpu_request(request.user, cluster, pool, mode)
    except ValidationError as error:
        return _page(request, status=400, refused=(cluster_name, pool, mode, error.messages))
    messages.success(
        request, f"Node pool {row} of {cluster_name}: GPUs are requested through {row.get_gpu_request_display()}."
    )
    return redirect(reverse("gpus:nodepool-list") + f"#{_anchor(cluster_name, pool)}")


@_staff_only
@require_POST
def nodepool_mig_profiles(request):
    cluster_name, pool, cluster = _posted_pool(request)
    profiles = None if request.POST.get("all") else request.POST.getlist("profiles")
    try:
        row = choose_mig_profiles(request.user, cluster, pool, profiles)
    except ValidationError as error:
        return _page(request, status=400, mig_refused=(cluster_name, pool, profiles, error.messages))
    allowed = (
        "every MIG profile its GPUs support"
        if row.mig_profiles is None
        else (", ".join(row.mig_profiles) or "no MIG profile")
    )
    messages.success(request, f"Node pool {row} of {cluster_name}: teams may claim {allowed}.")
    return redirect(reverse("gpus:nodepool-list") + f"#{_anchor(cluster_name, pool)}")
