from datetime import timedelta

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import connection, transaction
from django.db.models import Count, Max, Sum
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from gpus import telemetry
from gpus.choices import NodeHealth, ResourceKind
from gpus.models import GPU, Node, ResourceClass
from jobs.models import Job

from . import audit
from .choices import AuditAction
from .forms import TokenForm
from .models import APIToken, Notification


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
    scope = {"gpu_instance_id__isnull": True}
    if not request.user.is_staff:
        scope["node_name__in"] = list(nodes.values_list("name", flat=True))
    util_step, util_points = telemetry.series(scope, now - timedelta(hours=6), now)
    context = {
        "groups": [(label, items) for label, items in groups if items],
        "node_count": nodes.count(),
        "gpu_count": GPU.objects.filter(node__in=nodes).count(),
        "gpu_nodes": nodes.exclude(health=NodeHealth.NO_GPU).count(),
        "health": [(h, h.label, health.get(h.value, 0)) for h in NodeHealth if h != NodeHealth.GONE],
        "problem_nodes": nodes.filter(health__in=[NodeHealth.ERROR, NodeHealth.WARNING]).order_by("-health", "name"),
        "last_sync": nodes.aggregate(t=Max("last_seen"))["t"],
        "totals": classes.aggregate(total=Sum("total"), in_use=Sum("in_use"), free=Sum("free")),
        "teams": request.user.memberships.select_related("team"),
        "util_step": util_step,
        "util_points": util_points,
        "util_start": now - timedelta(hours=6),
        "util_end": now,
        "idle_jobs": Job.objects.visible_to(request.user).filter(idle_since__isnull=False),
    }
    return render(request, "portal/overview.html", context)


@login_required
def notification_list(request):
    """Your notifications, newest first; opening the page marks them read (the header's count resets)."""
    items = list(request.user.notifications.all()[:100])
    unread = [n.pk for n in items if n.read_at is None]
    if unread:
        Notification.objects.filter(pk__in=unread).update(read_at=timezone.now())
    return render(request, "portal/notifications.html", {"items": items, "unread_ids": set(unread)})


@login_required
def token_list(request):
    """List your API tokens and issue a new one (its secret is shown once, on this response only)."""
    new_token = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            with transaction.atomic():
                token, new_token = APIToken.issue(request.user, data["name"], data["days"], data["read_only"])
                audit.record(
                    request.user,
                    AuditAction.TOKEN_ISSUE,
                    token,
                    after={"name": token.name, "read_only": token.read_only},
                )
            messages.success(request, f"Token '{token.name}' created. Copy it now: it will not be shown again.")
            form = TokenForm()
    else:
        form = TokenForm()
    tokens = APIToken.objects.filter(user=request.user)
    return render(
        request, "portal/tokens.html", {"form": form, "tokens": tokens, "new_token": new_token, "now": timezone.now()}
    )


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(APIToken, pk=pk, user=request.user)
    if token.revoked_at is None:
        with transaction.atomic():
            token.revoked_at = timezone.now()
            token.save(update_fields=["revoked_at"])
            audit.record(request.user, AuditAction.TOKEN_REVOKE, token, before={"revoked_at": None})
        messages.success(request, f"Token '{token.name}' revoked.")
    return redirect("token-list")


def healthz(request):
    """Liveness/readiness: the process serves and the database answers."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception as exc:  # noqa: BLE001 - any database failure means not ready
        return JsonResponse({"status": "error", "database": str(exc)}, status=503)
    return JsonResponse({"status": "ok"})
