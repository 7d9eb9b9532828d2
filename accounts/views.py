"""Your account's pages (notifications, API tokens, approving a command-line sign-in) and a team's service
accounts."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.throttles import TokenCreateThrottle

from . import device_login, service_accounts, tokens
from .forms import RotateForm, ServiceAccountForm, TokenForm
from .models import APIToken, ServiceAccount


@login_required
def notification_list(request):
    """Your notifications, newest first. Reading the page changes nothing (a GET is safe: a prefetch or an
    image tag pointing here marks nothing read); "Mark all read" is a POST (audit finding 11)."""
    items = list(request.user.notifications.all()[:100])
    unread = {n.pk for n in items if n.read_at is None}
    return render(request, "accounts/notifications.html", {"items": items, "unread_ids": unread})


@login_required
@require_POST
def notification_mark_read(request):
    """Mark every unread notification of yours read (the header's count resets); back to the list."""
    request.user.notifications.filter(read_at__isnull=True).update(read_at=timezone.now())
    return redirect("notification-list")


def _throttled(request) -> bool:
    """Token creation in the browser counts against the same per-user limit as the API's."""
    throttle = TokenCreateThrottle()
    if throttle.allow_request(request, None):
        return False
    messages.error(request, f"You issued many tokens recently; try again in {int(throttle.wait() or 60)} seconds.")
    return True


def _secret(issued: tokens.Issued) -> dict:
    """The secret, for this one response (never stored, never put in a session or a redirect)."""
    return {"secret": issued.secret, "name": issued.token.name}


@login_required
def token_list(request):
    """List your API tokens and issue a new one (its secret is shown once, on this response only)."""
    new_token = None
    if request.method == "POST":
        form = TokenForm(request.POST)
        if form.is_valid() and not _throttled(request):
            data = form.cleaned_data
            try:
                issued = tokens.issue(request.user, request.user, data["name"], data["scope"], data["days"])
            except tokens.TokenLimitError as error:
                for field, problems in error.problems.items():
                    for problem in problems:
                        form.add_error(field if field in form.fields else None, problem)
            else:
                new_token = _secret(issued)
                messages.success(request, f"Token '{issued.token.name}' created. Copy it now: it is shown this once.")
                form = TokenForm()
    else:
        form = TokenForm()
    return _token_page(request, form, new_token)


def _token_page(request, form, new_token=None):
    return render(
        request,
        "accounts/tokens.html",
        {
            "form": form,
            "tokens": APIToken.objects.filter(user=request.user),
            "new_token": new_token,
            "now": timezone.now(),
            "rotate_url": "token-rotate",
            "revoke_url": "token-revoke",
        },
    )


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = get_object_or_404(APIToken, pk=pk, user=request.user)
    if tokens.revoke(request.user, token):
        messages.success(request, f"Token '{token.name}' revoked.")
    return redirect("token-list")


def _rotate(request, token, team=None) -> dict | None:
    """The new secret (for this response), or None with the reason in messages."""
    form = RotateForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Give the overlap as a whole number of hours from 0 to 168.")
        return None
    if _throttled(request):
        return None
    try:
        issued = tokens.rotate(request.user, token, form.cleaned_data.get("overlap_hours") or 0, team=team)
    except tokens.TokenLimitError as error:
        messages.error(request, " ".join(m for ms in error.problems.values() for m in ms))
        return None
    when = "now" if token.revoked_at <= timezone.now() else f"at {token.revoked_at:%Y-%m-%d %H:%M} UTC"
    messages.success(request, f"Token '{token.name}' rotated: copy the new secret now; the old one stops {when}.")
    return _secret(issued)


@login_required
@require_POST
def token_rotate(request, pk: int):
    new_token = _rotate(request, get_object_or_404(APIToken, pk=pk, user=request.user))
    return _token_page(request, TokenForm(), new_token) if new_token else redirect("token-list")


@login_required
def device_approve(request):
    """Approve or deny a command-line sign-in (`gpuportal login`): the CLI receives a token of yours."""
    code = request.POST.get("code") or request.GET.get("code") or ""
    auth = device_login.pending(code) if code else None
    if request.method == "POST" and auth is not None and request.POST.get("decision") in ("approve", "deny"):
        approve = request.POST["decision"] == "approve"
        device_login.decide(request.user, auth, approve)
        if approve:
            messages.success(request, f"Signed in the command line ({auth.user_code}). You can close this page.")
        else:
            messages.info(request, f"Sign-in {auth.user_code} denied; the command line gets no token.")
        return redirect("device-approve")
    error = "No pending sign-in has this code; check it, or run the login again." if code and auth is None else ""
    return render(request, "accounts/device_approve.html", {"auth": auth, "code": code, "error": error})


def _team_for(request, slug):
    """The team, if the person is a member or an admin; anybody else gets 404 (they do not learn it exists)."""
    return get_object_or_404(service_accounts.visible_teams(request.user), slug=slug)


@login_required
def service_account_list(request, slug):
    """A team's service accounts; leads and admins create and disable them and issue, rotate and revoke tokens."""
    team = _team_for(request, slug)
    can_manage = service_accounts.can_manage(request.user, team)
    form = ServiceAccountForm()
    if request.method == "POST":
        if not can_manage:
            raise PermissionDenied("Only leads of this team and portal admins can create its service accounts.")
        form = ServiceAccountForm(request.POST)
        if form.is_valid():
            try:
                account = service_accounts.create(
                    request.user, team, form.cleaned_data["name"], form.cleaned_data["description"]
                )
            except service_accounts.ServiceAccountError as error:
                for field, problems in error.problems.items():
                    for problem in problems:
                        form.add_error(field, problem)
            else:
                messages.success(request, f"Service account '{account.name}' created; issue it a token below.")
                return redirect("service-account-list", slug=team.slug)
    return _service_account_page(request, team, form)


def _service_account_page(request, team, form=None, new_token=None):
    can_manage = service_accounts.can_manage(request.user, team)
    accounts = list(team.service_accounts.select_related("user", "created_by"))
    by_user = {}
    if can_manage:
        for token in APIToken.objects.filter(user__in=[a.user for a in accounts]):
            by_user.setdefault(token.user_id, []).append(token)
    for account in accounts:
        account.token_list = by_user.get(account.user_id, [])
    return render(
        request,
        "accounts/service_accounts.html",
        {
            "team": team,
            "accounts": accounts,
            "can_manage": can_manage,
            "form": form or ServiceAccountForm(),
            "token_form": TokenForm(),
            "new_token": new_token,
            "now": timezone.now(),
        },
    )


def _managed_account(request, slug, pk):
    team = _team_for(request, slug)
    account = get_object_or_404(ServiceAccount.objects.select_related("team", "user"), pk=pk, team=team)
    if not service_accounts.can_manage(request.user, team):
        raise PermissionDenied("Only leads of this team and portal admins can manage its service accounts.")
    return account


@login_required
@require_POST
def service_account_disable(request, slug, pk):
    account = _managed_account(request, slug, pk)
    if service_accounts.disable(request.user, account):
        messages.success(request, f"Service account '{account.name}' disabled and its tokens revoked.")
    return redirect("service-account-list", slug=slug)


@login_required
@require_POST
def service_account_token_issue(request, slug, pk):
    account = _managed_account(request, slug, pk)
    form = TokenForm(request.POST)
    if not account.is_active:
        messages.error(request, f"Service account '{account.name}' is disabled; create another.")
    elif not form.is_valid():
        problems = [f"{form.fields[f].label or f}: {' '.join(e)}" for f, e in form.errors.items()]
        messages.error(request, "The token was not issued. " + " ".join(problems))
    elif not _throttled(request):
        data = form.cleaned_data
        try:
            issued = tokens.issue(
                request.user, account.user, data["name"], data["scope"], data["days"], team=account.team
            )
        except tokens.TokenLimitError as error:
            messages.error(request, " ".join(m for ms in error.problems.values() for m in ms))
        else:
            messages.success(request, f"Token '{issued.token.name}' issued to {account.name}. Copy it now.")
            return _service_account_page(request, account.team, new_token=_secret(issued))
    return redirect("service-account-list", slug=slug)


@login_required
@require_POST
def service_account_token_rotate(request, slug, pk, token_pk):
    account = _managed_account(request, slug, pk)
    new_token = _rotate(request, get_object_or_404(APIToken, pk=token_pk, user=account.user), team=account.team)
    if new_token:
        return _service_account_page(request, account.team, new_token=new_token)
    return redirect("service-account-list", slug=slug)


@login_required
@require_POST
def service_account_token_revoke(request, slug, pk, token_pk):
    account = _managed_account(request, slug, pk)
    token = get_object_or_404(APIToken, pk=token_pk, user=account.user)
    if tokens.revoke(request.user, token, team=account.team):
        messages.success(request, f"Token '{token.name}' of {account.name} revoked.")
    return redirect("service-account-list", slug=slug)
