from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.shortcuts import get_object_or_404, render

from . import telemetry
from .choices import NodeHealth
from .filtersets import NodeFilterSet, ResourceClassFilterSet
from .mig import product_geometry
from .models import GPU, MigPartition, Node, ResourceClass


@login_required
def node_list(request):
    nodes = Node.objects.visible_to(request.user).select_related("team")
    if "gone" not in request.GET:
        nodes = nodes.present()
    filterset = NodeFilterSet(request.GET, queryset=nodes, request=request)
    page = Paginator(filterset.qs, 50).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    sparks = telemetry.sparklines("node_name", [n.name for n in page.object_list])
    for node in page.object_list:
        node.util_spark = sparks.get(node.name)
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


def _node_chart(request, node: Node, gpus: list[dict]) -> dict:
    """The node page's chart: the node's mean, or one GPU (?gpu=<UUID>) or one MIG instance of it (&gi=<id>)."""
    scope = {"node_name": node.name, "gpu_instance_id__isnull": True}
    title, label = "Utilisation", "Mean utilisation of this node's GPUs"
    wanted, gi = request.GET.get("gpu", ""), request.GET.get("gi", "")
    chosen = next((g for g in gpus if g["gpu"].uuid and g["gpu"].uuid == wanted), None)
    if chosen is not None:
        scope = {"gpu_uuid": wanted, "gpu_instance_id__isnull": True}
        title = label = f"GPU {chosen['gpu'].index} utilisation"
        instance = next((i for i in chosen["instances"] if str(i["gi"]) == gi), None)
        if instance is not None:
            scope = {"gpu_uuid": wanted, "gpu_instance_id": instance["gi"]}
            title = label = f"GPU {chosen['gpu'].index} · MIG {instance['profile']} #{instance['gi']} utilisation"
    context = telemetry.chart_context(request, scope)
    query = {k: v for k, v in (("gpu", wanted if chosen else ""), ("gi", gi if chosen else "")) if v}
    context.update(chart_title=title, chart_label=label, chart_query="&".join(f"{k}={v}" for k, v in query.items()))
    return context


@login_required
def node_detail(request, name: str):
    node = get_object_or_404(
        Node.objects.visible_to(request.user).prefetch_related(
            Prefetch(
                "gpus",
                queryset=GPU.objects.prefetch_related(
                    Prefetch("mig_partitions", MigPartition.objects.order_by("start"))
                ),
            )
        ),
        name=name,
    )
    geometry = product_geometry(node.product)
    slots = geometry.memory_slices if geometry else 8
    gpus = [{"gpu": g, "cells": _slot_rows(g, slots) if g.mig_enabled else []} for g in node.gpus.all()]
    uuids = [g["gpu"].uuid for g in gpus if g["gpu"].uuid]
    sparks = telemetry.sparklines("gpu_uuid", uuids)
    instances = telemetry.instance_sparklines(uuids)
    for g in gpus:
        g["spark"] = sparks.get(g["gpu"].uuid)
        g["instances"] = [
            {"gi": gi, "profile": profile, "values": values}
            for (uuid, gi, profile), values in sorted(instances.items(), key=lambda kv: kv[0][1])
            if uuid == g["gpu"].uuid
        ]
    gpu_resources = sorted(
        (k, v, node.allocatable.get(k, "0"), node.gpu_in_use.get(k, 0))
        for k, v in node.capacity.items()
        if k.startswith("nvidia.com/")
    )
    return render(
        request,
        "gpus/node_detail.html",
        {
            "node": node,
            "gpus": gpus,
            "slot_numbers": list(range(slots)),
            "gpu_resources": gpu_resources,
            "labels": sorted(node.labels.items()),
            **_node_chart(request, node, gpus),
            "classes": ResourceClass.objects.filter(key__endswith="@" + node.product_label)
            if node.product_label
            else [],
        },
    )


@login_required
def resourceclass_list(request):
    classes = ResourceClass.objects.all()
    if not request.user.is_staff:
        classes = classes.filter(hidden=False)
    filterset = ResourceClassFilterSet(request.GET, queryset=classes, request=request)
    return render(request, "gpus/resourceclass_list.html", {"filterset": filterset, "classes": filterset.qs})
