"""The team's Secrets page: its secrets and registry credentials (names, keys, who and when), and for leads and
admins the forms that create, rotate and delete them. A value typed here goes to jobs.storage.secrets and on to the
cluster; no page ever renders one back (the forms are not re-filled with values after an error)."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from jobs import access
from jobs.models import RegistryCredential, TeamSecret
from jobs.storage import secrets
from jobs.teams.forms import RegistryCredentialForm, RegistryRotateForm, SecretForm, SecretRotateForm
from jobs.teams.views import visible_team


def _page(request, team, status: int = 200, **forms):
    can_manage = access.can_manage_secrets(request.user, team)
    context = {
        "team": team,
        "can_manage": can_manage,
        "secrets": TeamSecret.objects.filter(team=team).select_related("created_by", "rotated_by"),
        "credentials": RegistryCredential.objects.filter(team=team).select_related("created_by", "rotated_by"),
        "secret_form": forms.get("secret_form") or (SecretForm(prefix="secret") if can_manage else None),
        "registry_form": forms.get("registry_form")
        or (RegistryCredentialForm(prefix="registry") if can_manage else None),
        "rotate_forms": forms.get("rotate_forms") or {},
    }
    return render(request, "jobs/team_secrets.html", context, status=status)


def _strip_values(form) -> None:
    """After an error the page shows the form again without what was typed into value fields."""
    form.data = form.data.copy()
    for name in ("values", "token"):
        form.data.pop(f"{form.prefix}-{name}" if form.prefix else name, None)


def _run(request, form, call, success: str):
    """Call a jobs.storage.secrets service with a valid form; True when it worked (errors land on the form)."""
    try:
        call()
    except PermissionDenied as error:
        raise PermissionDenied(str(error)) from None
    except ValidationError as error:
        form.add_service_errors(error)
    except secrets.ClusterUnavailable as error:
        form.add_error(None, str(error))
    else:
        messages.success(request, success)
        return True
    _strip_values(form)
    return False


@login_required
def team_secrets(request, slug: str):
    return _page(request, visible_team(request, slug))


@login_required
@require_POST
def secret_create(request, slug: str):
    team = visible_team(request, slug)
    form = SecretForm(request.POST, prefix="secret")
    if form.is_valid():
        data = form.cleaned_data
        call = lambda: secrets.create_secret(  # noqa: E731 - a deferred call, run by _run
            request.user, team, data["name"], data["values"], data["description"]
        )
        if _run(request, form, call, f"Secret {data['name']} stored in namespace {team.namespace}."):
            return redirect("jobs:team-secrets", slug=team.slug)
    else:
        _strip_values(form)
    return _page(request, team, status=400, secret_form=form)


@login_required
@require_POST
def secret_rotate(request, slug: str, pk: int):
    team = visible_team(request, slug)
    secret = get_object_or_404(TeamSecret, pk=pk, team=team)
    form = SecretRotateForm(request.POST, prefix=f"rotate-{secret.pk}")
    if form.is_valid():
        call = lambda: secrets.rotate_secret(request.user, secret, form.cleaned_data["values"])  # noqa: E731
        if _run(request, form, call, f"Secret {secret.name} rotated: jobs that start from now on get the new values."):
            return redirect("jobs:team-secrets", slug=team.slug)
    else:
        _strip_values(form)
    return _page(request, team, status=400, rotate_forms={f"secret-{secret.pk}": form})


@login_required
@require_POST
def secret_delete(request, slug: str, pk: int):
    team = visible_team(request, slug)
    secret = get_object_or_404(TeamSecret, pk=pk, team=team)
    try:
        secrets.delete_secret(request.user, secret)
    except secrets.ClusterUnavailable as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Secret {secret.name} deleted. Jobs that still name it will wait and say why.")
    return redirect("jobs:team-secrets", slug=team.slug)


@login_required
@require_POST
def registry_create(request, slug: str):
    team = visible_team(request, slug)
    form = RegistryCredentialForm(request.POST, prefix="registry")
    if form.is_valid():
        data = form.cleaned_data
        call = lambda: secrets.create_registry_credential(  # noqa: E731
            request.user, team, data["registry"], data["username"], data["token"]
        )
        if _run(request, form, call, f"Credential for {data['registry']} stored; the team's jobs pull with it."):
            return redirect("jobs:team-secrets", slug=team.slug)
    else:
        _strip_values(form)
    return _page(request, team, status=400, registry_form=form)


@login_required
@require_POST
def registry_rotate(request, slug: str, pk: int):
    team = visible_team(request, slug)
    credential = get_object_or_404(RegistryCredential, pk=pk, team=team)
    form = RegistryRotateForm(request.POST, prefix=f"rotate-registry-{credential.pk}")
    if form.is_valid():
        data = form.cleaned_data
        call = lambda: secrets.rotate_registry_credential(  # noqa: E731
            request.user, credential, data["token"], data["username"] or None
        )
        if _run(request, form, call, f"Credential for {credential.registry} rotated."):
            return redirect("jobs:team-secrets", slug=team.slug)
    else:
        _strip_values(form)
    return _page(request, team, status=400, rotate_forms={f"registry-{credential.pk}": form})


@login_required
@require_POST
def registry_delete(request, slug: str, pk: int):
    team = visible_team(request, slug)
    credential = get_object_or_404(RegistryCredential, pk=pk, team=team)
    try:
        secrets.delete_registry_credential(request.user, credential)
    except secrets.ClusterUnavailable as error:
        messages.error(request, str(error))
    else:
        messages.success(request, f"Credential for {credential.registry} deleted.")
    return redirect("jobs:team-secrets", slug=team.slug)
