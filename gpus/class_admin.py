"""Admins give resource classes a friendlier name and a description, and hide the ones researchers should not
see or request (issue 18), on a portal page instead of Django's admin. The page and the API
(gpus.api.views.ResourceClassViewSet) both change a class through ``update_class``, which audits it."""

from __future__ import annotations

import functools

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core import audit

from .choices import InventoryAuditAction
from .dra_requests import dra_class_problems
from .models import Cluster, ResourceClass
from .reconcile import write_fleet_classes
from .resources import scoped_class_key

CLASS_FIELDS = ["alias", "description", "hidden"]
#: ``update_class``'s value that leaves the class's scope as it is.
KEEP = object()


def update_class(user, resource_class: ResourceClass, cluster=KEEP, **values) -> ResourceClass:
    """Change a class's alias, description or hidden flag, or its scope (admins); audited with before and after.

    ``cluster``: a Cluster scopes the class to that cluster's nodes, None makes it fleet-wide again (its key follows:
    ``resources.scoped_class_key``); the fleet's class totals are summed again at once (gpus.reconcile), so the
    nodes of the same resource and product on the other clusters fall to the fleet-wide class, made if needed. Two
    classes of the same resource and product on the same scope are a clash, refused with every problem at once. A DRA
    class is offered (shown, or rescoped while shown) only where it can be claimed (gpus.dra_requests)."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can change resource classes.")
    with transaction.atomic():
        rc = ResourceClass.objects.select_for_update(of=("self",)).select_related("cluster").get(pk=resource_class.pk)
        before = audit.snapshot(rc, CLASS_FIELDS)
        rescoped = cluster is not KEEP and cluster != rc.cluster
        if rescoped:  # the scope and the key it changes are in the record only when they change
            before |= {"cluster": getattr(rc.cluster, "name", None), "key": rc.key}
        if rescoped:
            if problems := scope_problems(rc, cluster):
                raise ValidationError({"cluster": problems})
            base = rc.fleet_key
            rc.cluster = cluster
            rc.key = scoped_class_key(base, cluster.name) if cluster is not None else base
        for field in CLASS_FIELDS:
            if field in values:
                setattr(rc, field, values[field])
        # A DRA class offered to teams (shown, or moved to another cluster while shown) must be claimable where it
        # counts: its cluster serves the API and the device class, and some device matches it (gpus.dra_requests).
        if not rc.hidden and (rescoped or before["hidden"]) and (problems := dra_class_problems(rc)):
            raise ValidationError({"cluster" if rescoped else "hidden": problems})
        rc.save(update_fields=[*CLASS_FIELDS, "updated", *(["cluster", "key"] if rescoped else [])])
        after = audit.snapshot(rc, CLASS_FIELDS)
        if rescoped:
            after |= {"cluster": getattr(rc.cluster, "name", None), "key": rc.key}
        if before != after:
            audit.record(user, InventoryAuditAction.CLASS_UPDATE, rc, object_repr=rc.key, before=before, after=after)
        if rescoped:
            write_fleet_classes()
            rc.refresh_from_db()
    return rc


def scope_problems(rc: ResourceClass, cluster) -> list[str]:
    """What stops scoping ``rc`` to ``cluster`` (None: fleet-wide): another class of the same resource and product
    on that scope (a clash). A quota's cap on a cluster the class no longer counts is left alone: it bars nothing."""
    problems = []
    base = rc.fleet_key
    key = scoped_class_key(base, cluster.name) if cluster is not None else base
    clash = ResourceClass.objects.filter(key=key).exclude(pk=rc.pk).first()
    if clash is not None:
        where = f"on cluster {cluster.name}" if cluster is not None else "fleet-wide"
        problems.append(
            f"{clash.display_name} ({clash.key}) already counts {rc.resource_name} on {rc.product_label} nodes "
            f"{where}: two classes of the same resource and product on the same scope would clash. Scope one of "
            "them to another cluster first (an alias such as 'H100 on-prem' tells them apart)."
        )
    return problems


class ResourceClassForm(forms.Form):
    alias = forms.CharField(
        max_length=100, required=False, help_text="A friendlier name shown to users instead of the product name."
    )
    description = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2}),
        help_text="What it is good for, e.g. 'Small MIG slices for notebooks and debugging'.",
    )
    hidden = forms.BooleanField(
        required=False,
        label="Hidden: researchers do not see or request it",
        help_text="Only admins see a hidden class. Work already running on it goes on.",
    )
    cluster = forms.ModelChoiceField(
        queryset=Cluster.objects.all(),
        required=False,
        to_field_name="name",
        label="Counts the nodes of",
        empty_label="Every cluster (fleet-wide)",
        help_text="One cluster splits the class: it counts that cluster's nodes only, and the same GPUs elsewhere "
        "become a fleet-wide class of their own, with their own quotas. Its key gains @<cluster>.",
    )


def _staff_only(view):
    @functools.wraps(view)
    @login_required
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def _rows(forms_by_pk=None):
    forms_by_pk = forms_by_pk or {}
    return [
        {
            "rc": rc,
            "form": forms_by_pk.get(rc.pk)
            or ResourceClassForm(
                prefix=f"rc-{rc.pk}",
                initial={f: getattr(rc, f) for f in CLASS_FIELDS}
                | {"cluster": rc.cluster.name if rc.cluster else None},
            ),
        }
        for rc in ResourceClass.objects.select_related("cluster").order_by("-present", "kind", "product", "profile")
    ]


@_staff_only
def resourceclass_manage(request):
    return render(request, "gpus/resourceclass_manage.html", {"rows": _rows()})


@_staff_only
@require_POST
def resourceclass_update(request, pk: int):
    rc = get_object_or_404(ResourceClass, pk=pk)
    form = ResourceClassForm(request.POST, prefix=f"rc-{rc.pk}")
    if form.is_valid():
        try:
            rc = update_class(request.user, rc, **form.cleaned_data)
        except ValidationError as error:
            for key, problems in error.message_dict.items():
                form.add_error(key if key in form.fields else None, problems)
    if not form.is_valid():
        return render(request, "gpus/resourceclass_manage.html", {"rows": _rows({rc.pk: form})}, status=400)
    state = "hidden from researchers" if rc.hidden else "offered to every team with a quota for it"
    messages.success(request, f"{rc.display_name} saved; it is {state}.")
    return redirect(reverse("gpus:resourceclass-manage") + f"#rc-{rc.pk}")
