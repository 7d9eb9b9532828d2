"""Admin pages acting on a reconfiguration in progress (abort, force its drain) and the node smoke test."""

from django.contrib import messages
from django.shortcuts import get_object_or_404, redirect
from django.views.decorators.http import require_POST

from . import smoketest
from .models import NodeConfigOperation
from .nodeconfig_control import abort_operation, force_drain
from .nodeconfig_plan import ConfigRefused
from .views import _staff_required, present_node_or_404


def _act_on_operation(request, pk: int, act, done: str):
    """abort / force from the operation page: ``act(user, op, reason)``; its refusals become messages."""
    op = get_object_or_404(NodeConfigOperation, pk=pk)
    try:
        act(request.user, op, request.POST.get("reason", ""))
    except ConfigRefused as refused:
        for error in refused.errors:
            messages.error(request, error)
    else:
        messages.success(request, done.format(op=op))
    return redirect(op)


@_staff_required
@require_POST
def nodeconfig_abort(request, pk: int):
    return _act_on_operation(
        request, pk, abort_operation, "Operation #{op.pk} aborted; {op.node.name} takes new work again."
    )


@_staff_required
@require_POST
def nodeconfig_force(request, pk: int):
    done = "Drain forced: the portal's work on the node is stopped now and its owners are told why."
    return _act_on_operation(request, pk, force_drain, done)


@_staff_required
@require_POST
def node_smoke_test(request, name: str):
    node = present_node_or_404(request, name)
    try:
        run = smoketest.request_smoke_test(request.user, node)
    except smoketest.SmokeTestRefused as refused:
        for error in refused.errors:
            messages.error(request, error)
    else:
        messages.success(request, f"Smoke test #{run.pk} started on {node.name}; the result shows here when it ends.")
    return redirect(f"{node.get_absolute_url()}{node.cluster_query}#smoke-test")
