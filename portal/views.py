from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.db import connection
from django.db.models import Count, Max, Q, Sum
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

from gpus.choices import NodeHealth, ResourceKind
from gpus.models import GPU, Cluster, Node, ResourceClass
from jobs import access
from telemetry import samples


@login_required
def overview(request):
    """Cluster capacity per resource class as bars, node health at a glance."""
    classes = ResourceClass.objects.filter(present=True)
    if not request.user.is_staff:
        classes = classes.filter(hidden=False)
    nodes = Node.objects.visible_to(request.user).present()
    health = dict(nodes.values_list("health").annotate(n=Count("id")).order_by())
    groups = [(kind.label, [c for c in classes if c.kind == kind.value]) for kind in ResourceKind]
    now = timezone.now()
    # Nodes are known by cluster and name (names are unique per cluster only).
    where = None if request.user.is_staff else samples.nodes_q(nodes.values_list("cluster_id", "name"))
    util_step, util_points = samples.series(
        {"gpu_instance_id__isnull": True}, now - timedelta(hours=6), now, where=where
    )
    context = {
        "groups": [(label, items) for label, items in groups if items],
        "node_count": nodes.count(),
        "gpu_count": GPU.objects.filter(node__in=nodes).count(),
        "gpu_nodes": nodes.exclude(health=NodeHealth.NO_GPU).count(),
        "health": [(h, h.label, health.get(h.value, 0)) for h in NodeHealth if h != NodeHealth.GONE],
        "problem_nodes": nodes.filter(health__in=[NodeHealth.ERROR, NodeHealth.WARNING])
        .select_related("cluster")
        .order_by("-health", "name"),
        "last_sync": nodes.aggregate(t=Max("last_seen"))["t"],
        "totals": classes.aggregate(total=Sum("total"), in_use=Sum("in_use"), free=Sum("free")),
        "teams": request.user.memberships.select_related("team"),
        "util_step": util_step,
        "util_points": util_points,
        "util_start": now - timedelta(hours=6),
        "util_end": now,
        "idle_jobs": access.visible_jobs(request.user).filter(idle_since__isnull=False),
        "fleet": fleet_rows(),
    }
    return render(request, "portal/overview.html", context)


def fleet_rows() -> list:
    """Each cluster of the fleet with its health, nodes, GPUs and free units (its share of the classes), one query."""
    present = Q(nodes__gone_at__isnull=True)
    clusters = Cluster.objects.annotate(
        node_total=Count("nodes", filter=present), gpu_total=Sum("nodes__gpu_count", filter=present)
    ).order_by("name")
    rows = list(clusters)
    for cluster in rows:
        cluster.free_units = sum(int(share.get("free") or 0) for share in (cluster.class_totals or {}).values())
    return rows


def healthz(request):
    """Liveness/readiness: the process serves and the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any database failure means not ready
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})


def not_found(request, exception=None):
    """404: in words for the API (JSON, like every other API error), Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"No API endpoint or object at {request.path}."}, status=404)
    from django.views.defaults import page_not_found  # noqa: PLC0415 - Django's own page, only off the API

    return page_not_found(request, exception)
