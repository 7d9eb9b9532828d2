"""The team's Webhooks page (leads and admins; others get a 404, as if it did not exist): create one (its secret
shown once), ping, rotate the secret, disable or enable, delete, and each webhook's delivery log with redeliver.
Every action goes through accounts.webhook_ops (permission, validation, audit)."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.models import Delivery, Webhook

from . import webhook_ops
from .models import Team
from .webhook_forms import WebhookForm


def _team(request, slug: str) -> Team:
    team = get_object_or_404(Team, slug=slug)
    if not webhook_ops.manages(request.user, team):
        raise Http404("No such page.")
    return team


def _webhook(request, slug: str, pk: int) -> Webhook:
    return get_object_or_404(Webhook.objects.select_related("team"), pk=pk, team=_team(request, slug))


@login_required
def webhook_list(request, slug: str):
    team = _team(request, slug)
    new_secret, created = None, None
    if request.method == "POST":
        form = WebhookForm(request.POST)
        if form.is_valid():
            try:
                created, new_secret = webhook_ops.create(request.user, team, dict(form.cleaned_data))
            except ValidationError as error:
                for field, problems in error.message_dict.items():
                    for problem in problems:
                        form.add_error(field if field in form.fields else None, problem)
            else:
                messages.success(request, f"Webhook '{created.name}' created. Copy its secret now: it is shown once.")
                form = WebhookForm()
    else:
        form = WebhookForm()
    hooks = team.webhooks.select_related("created_by").order_by("name", "id")
    return render(request, "accounts/webhooks.html", {"team": team, "form": form, "webhooks": hooks,
                                                      "new_secret": new_secret, "created": created})  # fmt: skip


@login_required
def webhook_detail(request, slug: str, pk: int):
    webhook = _webhook(request, slug, pk)
    deliveries = list(webhook.deliveries.order_by("-id")[:100])
    return render(request, "accounts/webhook_detail.html",
                  {"team": webhook.team, "webhook": webhook, "deliveries": deliveries})  # fmt: skip


@login_required
@require_POST
def webhook_action(request, slug: str, pk: int, what: str):
    """ping | rotate | enable | disable | delete."""
    webhook = _webhook(request, slug, pk)
    if what == "ping":
        try:
            webhook_ops.ping(request.user, webhook)
        except ValidationError as error:
            messages.error(request, " ".join(error.messages))
        else:
            messages.success(request, "A ping is on its way; its delivery is at the top of the log.")
        return redirect("webhook-detail", slug=slug, pk=pk)
    if what == "rotate":
        secret = webhook_ops.rotate(request.user, webhook)
        messages.success(request, "New secret made; the old one no longer verifies. Copy it now: it is shown once.")
        deliveries = list(webhook.deliveries.order_by("-id")[:100])
        context = {"team": webhook.team, "webhook": webhook, "deliveries": deliveries, "new_secret": secret}
        return render(request, "accounts/webhook_detail.html", context)
    if what in ("enable", "disable"):
        webhook_ops.update(request.user, webhook, {"active": what == "enable"})
        messages.success(request, f"Webhook '{webhook.name}' {what}d.")
        return redirect("webhook-detail", slug=slug, pk=pk)
    if what == "delete":
        name = webhook.name
        webhook_ops.delete(request.user, webhook)
        messages.success(request, f"Webhook '{name}' deleted, with its delivery log.")
        return redirect("team-webhooks", slug=slug)
    raise Http404("No such action.")


@login_required
@require_POST
def delivery_redeliver(request, slug: str, pk: int, delivery_id: int):
    webhook = _webhook(request, slug, pk)
    delivery = get_object_or_404(Delivery, pk=delivery_id, webhook=webhook)
    try:
        again = webhook_ops.redeliver(request.user, delivery)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, f"Delivery #{delivery.pk} queued again as #{again.pk}.")
    return redirect("webhook-detail", slug=slug, pk=pk)
