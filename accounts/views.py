"""Your account's pages: notifications and API tokens."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db import transaction
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from . import audit
from .choices import AuditAction
from .forms import TokenForm
from .models import APIToken


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
        request, "accounts/tokens.html", {"form": form, "tokens": tokens, "new_token": new_token, "now": timezone.now()}
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
