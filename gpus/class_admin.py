"""Admins give resource classes a friendlier name and a description, and hide the ones researchers should not
see or request (issue 18), on a portal page instead of Django's admin. The page and the API
(gpus.api.views.ResourceClassViewSet) both change a class through ``update_class``, which audits it."""

from __future__ import annotations

import functools

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core import audit

from .choices import InventoryAuditAction
from .models import ResourceClass

CLASS_FIELDS = ["alias", "description", "hidden"]


def update_class(user, resource_class: ResourceClass, **values) -> ResourceClass:
    """Change a class's alias, description or hidden flag (admins); audited with before and after."""
    if not user.is_staff:
        raise PermissionDenied("Only admins can change resource classes.")
    with transaction.atomic():
        rc = ResourceClass.objects.select_for_update().get(pk=resource_class.pk)
        before = audit.snapshot(rc, CLASS_FIELDS)
        for field in CLASS_FIELDS:
            if field in values:
                setattr(rc, field, values[field])
        rc.save(update_fields=[*CLASS_FIELDS, "updated"])
        after = audit.snapshot(rc, CLASS_FIELDS)
        if before != after:
            audit.record(user, InventoryAuditAction.CLASS_UPDATE, rc, object_repr=rc.key, before=before, after=after)
    return rc


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
            or ResourceClassForm(prefix=f"rc-{rc.pk}", initial={f: getattr(rc, f) for f in CLASS_FIELDS}),
        }
        for rc in ResourceClass.objects.order_by("-present", "kind", "product", "profile")
    ]


@_staff_only
def resourceclass_manage(request):
    return render(request, "gpus/resourceclass_manage.html", {"rows": _rows()})


@_staff_only
@require_POST
def resourceclass_update(request, pk: int):
    rc = get_object_or_404(ResourceClass, pk=pk)
    form = ResourceClassForm(request.POST, prefix=f"rc-{rc.pk}")
    if not form.is_valid():
        return render(request, "gpus/resourceclass_manage.html", {"rows": _rows({rc.pk: form})}, status=400)
    rc = update_class(request.user, rc, **form.cleaned_data)
    state = "hidden from researchers" if rc.hidden else "offered to every team with a quota for it"
    messages.success(request, f"{rc.display_name} saved; it is {state}.")
    return redirect(reverse("gpus:resourceclass-manage") + f"#rc-{rc.pk}")
