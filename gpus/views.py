import functools

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from vocab.mig import product_geometry
from vocab.names import is_nvidia

from . import dra_carving, fleet, nodeconfig, nodeconfig_plan, pages
from .choices import ACTIVE_CONFIG_STATES, NodeConfigState, NodeHealth
from .filtersets import NodeConfigOperationFilterSet, NodeFilterSet, ResourceClassFilterSet
from .forms import NodeConfigForm
from .models import GPU, Cluster, MigPartition, Node, NodeConfigOperation, ResourceClass
from .nodeconfig_control import drain_preview


@login_required
def node_list(request):
    nodes = Node.objects.visible_to(request.user).select_related("team", "cluster")
    if "gone" not in request.GET:
        nodes = nodes.present()
    filterset = NodeFilterSet(request.GET, queryset=nodes, request=request)
    page = Paginator(filterset.qs, 50).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    pages.annotate_node_list(request, page.object_list)
    products = (
        Node.objects.visible_to(request.user).present().exclude(product="").values_list("product", flat=True).distinct()
    )
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "gpus/node_list.html",
        {
            "filterset": filterset,
            "page": page,
            "products": sorted(set(products)),
            "health_choices": NodeHealth.choices,
            "clusters": list(Cluster.objects.order_by("name").values_list("name", flat=True)),
            "querystring": query.urlencode(),
        },
    )


def _slot_rows(gpu: GPU, slots: int) -> list[dict]:
    """Cells for drawing a MIG GPU as memory slots 0..slots-1: one cell per partition (spanning its size) or
    per empty slot."""
    cells, slot = [], 0
    partitions = sorted(gpu.mig_partitions.all(), key=lambda p: p.start)
    while slot < slots:
        part = next((p for p in partitions if p.start == slot), None)
        if part:
            cells.append({"partition": part, "start": slot, "span": part.size})
            slot += part.size
        else:
            cells.append({"partition": None, "start": slot, "span": 1})
            slot += 1
    return cells


@login_required
def node_detail(request, name: str):
    nodes = Node.objects.visible_to(request.user).prefetch_related(
        Prefetch(
            "gpus",
            queryset=GPU.objects.prefetch_related(Prefetch("mig_partitions", MigPartition.objects.order_by("start"))),
        )
    )
    try:
        node = nodes.named(name, request.GET.get("cluster", ""))
    except (Node.DoesNotExist, Node.MultipleObjectsReturned) as error:
        raise Http404(str(error)) from error
    geometry = product_geometry(node.product)
    slots = geometry.memory_slices if geometry else 8
    gpus = [{"gpu": g, "cells": _slot_rows(g, slots) if g.mig_enabled else []} for g in node.gpus.all()]
    gpu_resources = sorted(
        (k, v, node.allocatable.get(k, "0"), node.gpu_in_use.get(k, 0))
        for k, v in node.capacity.items()
        if is_nvidia(k)
    )
    return render(
        request,
        "gpus/node_detail.html",
        {
            "node": node,
            "gpus": gpus,
            # A MIG-capable node with MIG off on every GPU gets no slot drawing (its facts say "MIG: off").
            "any_mig": any(g["gpu"].mig_enabled for g in gpus),
            "slot_numbers": list(range(slots)),
            "gpu_resources": gpu_resources,
            "labels": sorted(node.labels.items()),
            **pages.node_detail_context(request, node, gpus),
            "classes": ResourceClass.objects.visible_to(request.user).on_node(node) if node.product_label else [],
            "operations": node.config_operations.all()[:5] if request.user.is_staff else [],
            "smoke_tests": node.smoke_tests.select_related("requested_by")[:5] if request.user.is_staff else [],
            "active_operation": node.config_operations.filter(state__in=ACTIVE_CONFIG_STATES).first(),
        },
    )


@login_required
def resourceclass_list(request):
    classes = ResourceClass.objects.visible_to(request.user)
    filterset = ResourceClassFilterSet(request.GET, queryset=classes, request=request)
    return render(
        request,
        "gpus/resourceclass_list.html",
        {
            "filterset": filterset,
            "classes": filterset.qs,
            "caveat": nodeconfig_plan.TIME_SLICING_CAVEAT,
            "mps_caveat": nodeconfig_plan.MPS_CAVEAT,
            "mps_max_clients": nodeconfig_plan.MPS_MAX_CLIENTS,
            "gke_mps_keys": Node.objects.gke_mps_class_keys(),
            "gke_mps_note": ResourceClass.GKE_MPS_NOTE,
        },
    )


def _staff_required(view):
    """Admin-only pages: others get 404, as if the page did not exist."""

    @functools.wraps(view)
    @login_required
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def _drawing(geometry, placements: list[list]) -> list[dict]:
    """Per GPU, the cells of the slot drawing for a layout given as [[profile, start], ...] (empty: MIG off)."""
    out = []
    slots = geometry.memory_slices if geometry else 8
    for index, gpu in enumerate(placements):
        if not gpu:
            out.append({"index": index, "off": True, "cells": []})
            continue
        taken = {int(start): name for name, start in gpu}
        cells, slot = [], 0
        while slot < slots:
            if slot in taken:
                profile = geometry.profile(taken[slot]) if geometry else None
                size = profile.size if profile else 1
                cells.append({"profile": taken[slot], "start": slot, "span": size, "end": slot + size - 1,
                              "compute": profile.compute if profile else 0})  # fmt: skip
                slot += size
            else:
                cells.append({"profile": None, "start": slot, "span": 1})
                slot += 1
        out.append({"index": index, "off": False, "cells": cells})
    return out


def present_node_or_404(request, name: str) -> Node:
    """The present node called ``name``, in the cluster ``?cluster=`` names where several have one of that name."""
    try:
        return Node.objects.present().named(name, request.GET.get("cluster", ""))
    except (Node.DoesNotExist, Node.MultipleObjectsReturned) as error:
        raise Http404(str(error)) from error


def drain_preview_here(node: Node):
    """What draining ``node`` touches, read from its own cluster; None while that cluster cannot be reached."""
    if node.operated_here():
        return None
    return drain_preview(fleet.backend_of(node.cluster), node)


@_staff_required
def node_configure(request, name: str):
    node = present_node_or_404(request, name)
    geometry = product_geometry(node.product)
    current = nodeconfig_plan.current_mig_placements(node) if node.mig_capable else []
    active = node.config_operations.filter(state__in=ACTIVE_CONFIG_STATES).first()
    # A GET with ``kind`` (and preset / gpu_N / replicas, the form's own fields) fills the form in and shows its
    # preview, as pressing Preview would: how the capacity planner hands over a layout. Nothing is applied from a
    # GET: applying is a POST with the confirmation ticked, as always.
    prefill = request.method == "GET" and "kind" in request.GET
    data = request.POST if request.method == "POST" else (_prefill_data(request.GET) if prefill else None)
    form = NodeConfigForm(data, node=node, current=current)
    plan, errors, preview = None, [], None
    # A node whose DRA driver carves its GPUs itself (dynamic MIG) is not carved here: the page says why and shows
    # what can be claimed now under its pool's policy instead of the form (a POST is refused the same way).
    dra_refusal = dra_carving.carve_refusal(node)
    if dra_refusal and request.method == "POST":
        errors = [dra_refusal]
    elif (request.method == "POST" or prefill) and form.is_valid():
        try:
            plan = nodeconfig_plan.plan_from_request(node, **form.request_args())
        except nodeconfig_plan.ConfigRefused as refused:
            errors = refused.errors
        if plan is not None and (problem := node.operated_here()):
            errors, plan = [problem], None
        if plan is not None:
            preview = drain_preview_here(node)
        if plan is not None and "apply" in request.POST and not request.POST.get("confirm"):
            # Apply asks first: the admin ticks the box under the preview of what the drain touches.
            errors = [
                "Tick “I understand what this drain does” under the preview to apply: the node is drained first, "
                "and the work listed there is requeued or holds the drain up."
            ]
        elif plan is not None and "apply" in request.POST:
            try:
                op = nodeconfig.request_operation(request.user, node, plan)
            except nodeconfig_plan.ConfigRefused as refused:
                errors = refused.errors
            else:
                messages.success(request, f"Reconfiguration of {node.name} requested; it is drained first.")
                return redirect(op)
    proposed = _drawing(geometry, plan.requested.get("placements", [])) if plan and plan.kind == "mig" else []
    return render(
        request,
        "gpus/node_configure.html",
        {
            "node": node,
            "dra_refusal": dra_refusal,
            "claimable": dra_carving.claimable_now(node) if dra_refusal else None,
            "form": form,
            "plan": plan,
            "preview": preview,
            "errors": errors,
            "active": active,
            "current": _drawing(geometry, current) if node.mig_capable else [],
            "proposed": proposed,
            "slot_numbers": list(range(geometry.memory_slices if geometry else 8)),
            "profiles": geometry.profiles if geometry and node.mig_capable else [],
            "caveat": nodeconfig_plan.TIME_SLICING_CAVEAT,
            "mps_caveat": nodeconfig_plan.MPS_CAVEAT,
            "mps_max_clients": nodeconfig_plan.MPS_MAX_CLIENTS,
            "current_resources": sorted((k, v) for k, v in node.capacity.items() if is_nvidia(k) and str(v) != "0"),
        },
        status=400 if dra_refusal and request.method == "POST" else 200,
    )


def _prefill_data(query) -> dict:
    """The configure form's own fields from a query string (anything else, such as apply or confirm, is dropped)."""
    keep = {"kind", "preset", "replicas", "sharing", "rename"}
    return {k: query.get(k) for k in query if k in keep or (k.startswith("gpu_") and k[4:].isdigit() and len(k) <= 6)}


@_staff_required
def nodeconfig_list(request):
    filterset = NodeConfigOperationFilterSet(
        request.GET,
        queryset=NodeConfigOperation.objects.select_related("node__cluster", "requested_by"),
        request=request,
    )
    page = Paginator(filterset.qs, 50).get_page(request.GET.get("page"))
    clusters = list(Cluster.objects.order_by("name").values_list("name", flat=True))
    return render(request, "gpus/nodeconfig_list.html", {"filterset": filterset, "page": page, "clusters": clusters})


@_staff_required
def nodeconfig_detail(request, pk: int):
    op = get_object_or_404(
        NodeConfigOperation.objects.select_related("node__cluster", "requested_by", "revert_of"), pk=pk
    )
    geometry = product_geometry(op.node.product)
    return render(
        request,
        "gpus/nodeconfig_detail.html",
        {
            "op": op,
            "requested": _drawing(geometry, op.requested.get("placements") or []) if op.kind == "mig" else [],
            "previous": _drawing(geometry, op.previous.get("placements") or []) if op.kind == "mig" else [],
            "slot_numbers": list(range(geometry.memory_slices if geometry else 8)),
            "caveat": nodeconfig_plan.TIME_SLICING_CAVEAT,
            "mps_caveat": nodeconfig_plan.MPS_CAVEAT,
            "mps_max_clients": nodeconfig_plan.MPS_MAX_CLIENTS,
            "reverts": op.reverts.all(),
            # While draining: what holds it up and what is requeued, as links (the log names them as text).
            "preview": drain_preview_here(op.node) if op.state == NodeConfigState.DRAINING else None,
        },
    )


@_staff_required
@require_POST
def nodeconfig_revert(request, pk: int):
    op = get_object_or_404(NodeConfigOperation, pk=pk)
    try:
        new = nodeconfig.request_revert(request.user, op)
    except nodeconfig_plan.ConfigRefused as refused:
        for error in refused.errors:
            messages.error(request, error)
        return redirect(op)
    messages.success(request, f"Reverting {op.node.name} to its previous layout.")
    return redirect(new)
