"""Admins give resource classes a friendlier name and a description, and hide the ones researchers should not
see or request (issue 18), on a portal page instead of Django's admin. The page and the API
(gpus.api.views.ResourceClassViewSet) both change a class through ``update_class``, which audits it.

An admin also shares a DRA class (issue 33): a whole-GPU class with time-slicing or MPS, a MIG class with MPS, and
how many users share one device (``sharing_strategy``, ``replicas``). The class then counts units of 1/replicas of a
device, as a device plugin's time-sliced class does (the inventory keeps the admin's sharing and scales the amounts:
gpus.reconcile.write_fleet_classes), and its work shares devices through ResourceClaims with NVIDIA's sharing config
(jobs.dra_claims). What the driver refuses is refused here first (gpus.dra_requests.sharing_offer_problems)."""

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
from vocab.names import SHARING_MPS, SHARING_NONE, SHARING_TIME_SLICING

from .choices import InventoryAuditAction
from .dra_inventory import CLASS_KEY_PREFIX
from .dra_requests import MAX_SHARING_REPLICAS, dra_class_problems, sharing_offer_problems
from .models import Cluster, ResourceClass
from .reconcile import write_fleet_classes
from .resources import scoped_class_key

CLASS_FIELDS = ["alias", "description", "hidden"]
#: How a DRA class's devices are shared (an admin's choice; device-plugin classes follow their nodes).
SHARING_FIELDS = ["sharing_strategy", "replicas"]
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
        sharing = values.get("sharing_strategy", rc.sharing_strategy)
        replicas = values.get("replicas", rc.replicas if sharing != SHARING_NONE else 1)
        reshared = (sharing, replicas) != (rc.sharing_strategy, rc.replicas)
        if reshared:
            before |= audit.snapshot(rc, SHARING_FIELDS)
        errors = {}
        if rescoped and (problems := scope_problems(rc, cluster)):
            errors["cluster"] = problems
        if (reshared or "sharing_strategy" in values) and (problems := sharing_offer_problems(rc, sharing, replicas)):
            errors["sharing_strategy"] = problems
        if errors:  # the sharing's own rules already ask whether the class can be claimed with it
            raise ValidationError(errors)
        if reshared:
            rc.sharing_strategy, rc.replicas = sharing, replicas
        if rescoped:
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
        moved = (["cluster", "key"] if rescoped else []) + (SHARING_FIELDS if reshared else [])
        rc.save(update_fields=[*CLASS_FIELDS, "updated", *moved])
        after = audit.snapshot(rc, CLASS_FIELDS)
        if rescoped:
            after |= {"cluster": getattr(rc.cluster, "name", None), "key": rc.key}
        if reshared:
            after |= audit.snapshot(rc, SHARING_FIELDS)
        if before != after:
            audit.record(user, InventoryAuditAction.CLASS_UPDATE, rc, object_repr=rc.key, before=before, after=after)
        if rescoped or reshared:  # the class's amounts (and a shared class's kind and units) follow at once
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
    sharing_strategy = forms.ChoiceField(
        choices=[
            (SHARING_NONE, "None: one user per device"),
            (SHARING_TIME_SLICING, "Time-slicing (take turns; whole GPUs only)"),
            (SHARING_MPS, "MPS (run at once, memory and compute split)"),
        ],
        required=False,
        label="Sharing (DRA classes)",
        help_text="How users share one device of a DRA class, through NVIDIA's DRA driver. A device-plugin class "
        "follows its nodes' time-slicing (the node's carving page).",
    )
    replicas = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_SHARING_REPLICAS,
        label="Users per device",
        help_text="With a sharing mode, 2 or more: the class then counts units of 1/N of a device.",
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


def class_form(rc: ResourceClass, data=None) -> ResourceClassForm:
    """The class's form, filled in with what it is now; sharing is a DRA class's only (disabled for the others, so
    their nodes' sharing is never posted back)."""
    form = ResourceClassForm(
        data,
        prefix=f"rc-{rc.pk}",
        initial={f: getattr(rc, f) for f in CLASS_FIELDS + SHARING_FIELDS}
        | {"cluster": rc.cluster.name if rc.cluster else None},
    )
    if not rc.key.startswith(CLASS_KEY_PREFIX):
        for name in SHARING_FIELDS:
            form.fields[name].disabled = True
    return form


def form_values(form: ResourceClassForm) -> dict:
    """What ``update_class`` takes from a valid form: sharing only when the admin changed it (blank keeps it)."""
    values = dict(form.cleaned_data)
    for name in SHARING_FIELDS:
        if values.get(name) in (None, "") or form.fields[name].disabled:
            values.pop(name, None)
    return values


def _rows(forms_by_pk=None):
    forms_by_pk = forms_by_pk or {}
    return [
        {"rc": rc, "form": forms_by_pk.get(rc.pk) or class_form(rc)}
        for rc in ResourceClass.objects.select_related("cluster").order_by("-present", "kind", "product", "profile")
    ]


@_staff_only
def resourceclass_manage(request):
    return render(request, "gpus/resourceclass_manage.html", {"rows": _rows()})


@_staff_only
@require_POST
def resourceclass_update(request, pk: int):
    rc = get_object_or_404(ResourceClass, pk=pk)
    form = class_form(rc, request.POST)
    if form.is_valid():
        try:
            rc = update_class(request.user, rc, **form_values(form))
        except ValidationError as error:
            for key, problems in error.message_dict.items():
                form.add_error(key if key in form.fields else None, problems)
    if not form.is_valid():
        return render(request, "gpus/resourceclass_manage.html", {"rows": _rows({rc.pk: form})}, status=400)
    state = "hidden from researchers" if rc.hidden else "offered to every team with a quota for it"
    shared = f", and {rc.replicas} users share each device ({rc.sharing_strategy})" if rc.replicas > 1 else ""
    messages.success(request, f"{rc.display_name} saved; it is {state}{shared}.")
    return redirect(reverse("gpus:resourceclass-manage") + f"#rc-{rc.pk}")
