"""Admins give resource classes a friendlier name and a description, and hide the ones researchers should not
see or request (issue 18), on a portal page instead of Django's admin. The page and the API
(gpus.api.views.ResourceClassViewSet) both change a class through ``update_class``, which audits it.

An admin also shares a DRA class (issue 33): a whole-GPU class with time-slicing or MPS, a MIG class with MPS, and
how many users share one device (``sharing_strategy``, ``replicas``). The class then counts units of 1/replicas of a
device, as a device plugin's time-sliced class does (the inventory keeps the admin's sharing and scales the amounts:
gpus.reconcile.write_fleet_classes), and its work shares devices through ResourceClaims with NVIDIA's sharing config
(jobs.dra_claims). What the driver refuses is refused here first (gpus.dra_requests.sharing_offer_problems).

A DRA class may also allow alternatives (issue 33, item 3): other DRA classes that may serve a request of it when it
cannot start, in priority order ("a 2g.20gb slice, else a 3g.40gb"; "an H100, else an A100"). Each alternative is a
DRA class of the same cluster (or fleet-wide like it), the same device class, kind and sharing, so a unit of one is a
unit of the other; never the class itself, and never one whose own alternatives lead back to it (a cycle). Admission
tries them in order (jobs.scheduling.decide) and charges the quota of the one a job gets."""

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

from .choices import InventoryAuditAction, ResourceKind
from .dra_inventory import CLASS_KEY_PREFIX
from .dra_requests import MAX_SHARING_REPLICAS, dra_class_problems, sharing_offer_problems
from .models import Cluster, ResourceClass
from .reconcile import write_fleet_classes
from .resources import scoped_class_key

CLASS_FIELDS = ["alias", "description", "hidden"]
#: How a DRA class's devices are shared (an admin's choice; device-plugin classes follow their nodes).
SHARING_FIELDS = ["sharing_strategy", "replicas"]
#: ``update_class``'s value that leaves the class's scope (or its alternatives) as it is.
KEEP = object()


def update_class(user, resource_class: ResourceClass, cluster=KEEP, alternatives=KEEP, **values) -> ResourceClass:
    """Change a class's alias, description or hidden flag, its scope or its alternatives (admins); audited with
    before and after.

    ``alternatives``: the keys of the classes that may serve a request of this one, in priority order ([] for none);
    refused with every problem at once (``resolve_alternatives``).

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
        if reshared:
            rc.sharing_strategy, rc.replicas = sharing, replicas
        if rescoped and "cluster" not in errors:
            base = rc.fleet_key
            rc.cluster = cluster
            rc.key = scoped_class_key(base, cluster.name) if cluster is not None else base
        for field in CLASS_FIELDS:
            if field in values:
                setattr(rc, field, values[field])
        # A DRA class offered to teams (shown, or moved to another cluster while shown) must be claimable where it
        # counts: its cluster serves the API and the device class, and some device matches it (gpus.dra_requests).
        # The sharing's own rules already ask that of a class shared anew.
        if not errors and not rc.hidden and (rescoped or before["hidden"]) and (problems := dra_class_problems(rc)):
            errors["cluster" if rescoped else "hidden"] = problems
        # The alternatives are checked against the class as it is now (a rescoped class against its new cluster),
        # and so are those it already had when its scope changed.
        chosen = list(alternatives) if alternatives is not KEEP else (alternative_keys(rc) if rescoped else None)
        old_alternatives = list(rc.alternatives or [])
        if chosen is not None and "cluster" not in errors:
            ids, problems = resolve_alternatives(rc, chosen)
            if problems:
                errors["alternatives"] = problems
            rc.alternatives = ids
        if errors:  # every problem at once; nothing is saved
            raise ValidationError(errors)
        changed_alternatives = rc.alternatives != old_alternatives
        if changed_alternatives:
            before |= {"alternatives": _keys_of(old_alternatives)}
        moved = (
            (["cluster", "key"] if rescoped else [])
            + (SHARING_FIELDS if reshared else [])
            + (["alternatives"] if changed_alternatives else [])
        )
        rc.save(update_fields=[*CLASS_FIELDS, "updated", *moved])
        after = audit.snapshot(rc, CLASS_FIELDS)
        if rescoped:
            after |= {"cluster": getattr(rc.cluster, "name", None), "key": rc.key}
        if reshared:
            after |= audit.snapshot(rc, SHARING_FIELDS)
        if changed_alternatives:
            after |= {"alternatives": _keys_of(rc.alternatives)}
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


def _keys_of(ids: list[int]) -> list[str]:
    keys = dict(ResourceClass.objects.filter(pk__in=ids).values_list("pk", "key"))
    return [keys.get(pk, f"#{pk}") for pk in ids]


def alternative_keys(rc: ResourceClass) -> list[str]:
    """The keys of ``rc``'s alternatives, in priority order (one query)."""
    return _keys_of(list(rc.alternatives or []))


def _unit(rc: ResourceClass) -> tuple[str, str, str]:
    """What a unit of the class is: its device class, kind and sharing (a product or a MIG profile may differ)."""
    return (rc.resource_name, rc.kind, rc.sharing_strategy)


def _unit_words(rc: ResourceClass) -> str:
    kind = ResourceKind(rc.kind).label if rc.kind in ResourceKind.values else rc.kind
    sharing = "" if rc.sharing_strategy in ("", SHARING_NONE) else f", shared by {rc.sharing_strategy}"
    return f"{kind.lower()} of {rc.resource_name}{sharing}"


def resolve_alternatives(rc: ResourceClass, keys: list[str]) -> tuple[list[int], list[str]]:
    """The ids of the classes ``keys`` name, in their order, and every problem with them at once: an unknown key, a
    repeated one, the class itself, a class that is not DRA (or ``rc`` not being one), one that counts another
    cluster's nodes, one whose unit differs (device class, kind, sharing), and one whose alternatives lead back to
    ``rc`` (a cycle). A constant number of queries."""
    problems: list[str] = []
    keys = [str(key).strip() for key in keys if str(key).strip()]
    if keys and not rc.key.startswith(CLASS_KEY_PREFIX):
        problems.append(
            f"{rc.display_name} ({rc.key}) is a device-plugin class: only a DRA class can allow alternatives (a "
            "device-plugin limit names one resource). Leave its alternatives empty."
        )
    found = {c.key: c for c in ResourceClass.objects.select_related("cluster").filter(key__in=keys)}
    ids: list[int] = []
    seen: set[str] = set()
    for key in keys:
        other = found.get(key)
        if key in seen:
            problems.append(f"{key} is listed twice; list each alternative once, in the order to try them.")
            continue
        seen.add(key)
        if other is None:
            problems.append(f"No resource class {key}. GET /api/v1/resource-classes/ lists them.")
            continue
        if other.pk == rc.pk:
            problems.append(f"{key} is the class itself; its alternatives are the other classes to try after it.")
            continue
        if not other.key.startswith(CLASS_KEY_PREFIX):
            problems.append(
                f"{other.display_name} ({key}) is a device-plugin class; an alternative must be a DRA class, "
                "claimed through the same ResourceClaim."
            )
            continue
        if other.cluster_id != rc.cluster_id:
            mine = f"cluster {rc.cluster.name}" if rc.cluster_id else "every cluster (fleet-wide)"
            theirs = f"cluster {other.cluster.name}" if other.cluster_id else "every cluster (fleet-wide)"
            problems.append(
                f"{other.display_name} ({key}) counts the nodes of {theirs}, {rc.display_name} those of {mine}: a "
                "pod claims its devices on the node it runs on, so an alternative must count the same cluster's."
            )
            continue
        if _unit(other) != _unit(rc):
            problems.append(
                f"{other.display_name} ({key}) is a {_unit_words(other)}, {rc.display_name} a {_unit_words(rc)}: "
                "an alternative must be the same kind of unit (another product, or another MIG profile)."
            )
            continue
        ids.append(other.pk)
    if ids and (cycle := _cycle(rc.pk, ids)):
        problems.append(
            f"{' → '.join(cycle)} leads back to {rc.key}: a class cannot be an alternative of its own alternative. "
            "Remove it from one of the lists."
        )
    return ids, problems


def _cycle(start: int, ids: list[int]) -> list[str]:
    """The keys of a chain of alternatives from ``ids`` back to class ``start``, or [] when there is none (the graph
    of every class's alternatives: one query)."""
    graph = {
        pk: list(alts or [])
        for pk, alts in ResourceClass.objects.exclude(alternatives=[]).values_list("pk", "alternatives")
    }
    graph[start] = list(ids)
    keys = dict(
        ResourceClass.objects.filter(pk__in={start, *graph, *(a for v in graph.values() for a in v)}).values_list(
            "pk", "key"
        )
    )
    stack = [(pk, [pk]) for pk in reversed(ids)]
    visited: set[int] = set()
    while stack:
        pk, path = stack.pop()
        if pk == start:
            return [keys.get(p, str(p)) for p in path[:-1]]
        if pk in visited:
            continue
        visited.add(pk)
        stack.extend((nxt, [*path, nxt]) for nxt in reversed(graph.get(pk, [])))
    return []


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
    alternatives = forms.CharField(
        required=False,
        max_length=2000,
        label="Alternatives (DRA)",
        help_text="Keys of other DRA classes of the same cluster and kind of unit that may serve a request of this "
        "one when it cannot start, first choice first, separated by commas. Their quotas are charged when used.",
    )

    def clean_alternatives(self) -> list[str]:
        return [key.strip() for key in self.cleaned_data["alternatives"].split(",") if key.strip()]


def _staff_only(view):
    @functools.wraps(view)
    @login_required
    def wrapper(request, *args, **kwargs):
        if not request.user.is_staff:
            raise Http404("No such page.")
        return view(request, *args, **kwargs)

    return wrapper


def class_form(rc: ResourceClass, data=None, alternatives: str = "") -> ResourceClassForm:
    """The class's form, filled in with what it is now; sharing is a DRA class's only (disabled for the others, so
    their nodes' sharing is never posted back)."""
    form = ResourceClassForm(
        data,
        prefix=f"rc-{rc.pk}",
        initial={f: getattr(rc, f) for f in CLASS_FIELDS + SHARING_FIELDS}
        | {"cluster": rc.cluster.name if rc.cluster else None, "alternatives": alternatives},
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
    classes = list(ResourceClass.objects.select_related("cluster").order_by("-present", "kind", "product", "profile"))
    key_of = {rc.pk: rc.key for rc in classes}
    keys = {rc.pk: [key_of[pk] for pk in rc.alternatives or [] if pk in key_of] for rc in classes}
    return [
        {"rc": rc, "form": forms_by_pk.get(rc.pk) or class_form(rc, alternatives=", ".join(keys.get(rc.pk, [])))}
        for rc in classes
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
