"""Admin pages acting on a reconfiguration in progress (abort, force its drain) and the node smoke test."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from . import smoketest
from .models import Node, NodeConfigOperation
from .nodeconfig import ConfigRefused
from .nodeconfig_control import abort_operation, force_drain
from .views import _staff_required


@_staff_required
@require_POST
def nodeconfig_abort(request, pk: int):
    op = get_object_or_404(NodeConfigOperation, pk=pk)
    try:
        abort_operation(request.user, op, request.POST.get("reason", ""))
    except ConfigRefused as refused:
        for error in refused.errors:
            messages.error(request, error)
    else:
        messages.success(request, f"Operation #{op.pk} aborted; {op.node.name} takes new work again.")
    return redirect(op)


@_staff_required
@require_POST
def nodeconfig_force(request, pk: int):
    op = get_object_or_404(NodeConfigOperation, pk=pk)
    try:
        force_drain(request.user, op, request.POST.get("reason", ""))
    except ConfigRefused as refused:
        for error in refused.errors:
            messages.error(request, error)
    else:
        messages.success(
            request, "Drain forced: the portal's work on the node is stopped now and its owners are told why."
        )
    return redirect(op)


@_staff_required
@require_POST
def node_smoke_test(request, name: str):
    node = get_object_or_404(Node.objects.present(), name=name)
    try:
        run = smoketest.request_smoke_test(request.user, node)
    except smoketest.SmokeTestRefused as refused:
        for error in refused.errors:
            messages.error(request, error)
    else:
        messages.success(request, f"Smoke test #{run.pk} started on {node.name}; the result shows here when it ends.")
    return redirect(f"{node.get_absolute_url()}#smoke-test")
