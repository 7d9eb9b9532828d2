"""Single sign-on's pages: start and finish an OpenID Connect sign-in, sign out of both, and the admins' group
mapping page (list, add, delete; every change audited)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Count
from django.http import Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View
from django.views.decorators.http import require_POST
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from core import audit

from . import sso
from .choices import MembershipSource, SsoAuditAction
from .models import Membership
from .sso_forms import SsoGroupMappingForm
from .sso_models import SsoGroupMapping, SsoIdentity


class SsoStartView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider's sign-in page (404 while SSO is not configured)."""

    def __init__(self, *args, **kwargs):
        # Skips the parent's __init__, which reads the endpoint from settings at once; here it is looked up per
        # request (explicit setting or discovery) and only while SSO is configured.
        View.__init__(self, *args, **kwargs)

    def get(self, request):
        if not sso.enabled():
            raise Http404("Single sign-on is not configured.")
        self.OIDC_RP_CLIENT_ID = settings.OIDC_RP_CLIENT_ID
        try:
            self.OIDC_OP_AUTH_ENDPOINT = sso.endpoint("OIDC_OP_AUTHORIZATION_ENDPOINT")
        except sso.SsoUnavailable as exc:
            messages.error(
                request, f"Single sign-on is unavailable: {exc} Sign in with your portal password, or try later."
            )
            return redirect("login")
        return super().get(request)


class SsoCallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back; signs the person in (accounts.sso.PortalOIDCBackend)."""

    def get(self, request):
        if not sso.enabled():
            raise Http404("Single sign-on is not configured.")
        return super().get(request)

    def login_failure(self):
        messages.error(
            self.request,
            f"Signing in with {sso.provider_name()} did not complete. Try again; if it keeps failing, ask an admin "
            "to check the portal's single sign-on settings.",
        )
        return redirect("login")


class PortalLogoutView(auth_views.LogoutView):
    """Ends the portal session and, after an SSO sign-in, the provider's session too (its end-session endpoint)."""

    def post(self, request, *args, **kwargs):
        provider_logout = sso.logout_url(request)  # read before the session (and its ID token) is gone
        response = super().post(request, *args, **kwargs)
        return HttpResponseRedirect(provider_logout) if provider_logout else response


def _admin_only(request):
    if not request.user.is_staff:
        raise PermissionDenied("Only portal admins may change how single sign-on groups map to teams.")


@login_required
def mapping_list(request):
    """Every group mapping, with a form to add one; people signed in by SSO with their last groups."""
    _admin_only(request)
    if request.method == "POST":
        form = SsoGroupMappingForm(request.POST)
        if form.is_valid():
            data = form.cleaned_data
            with transaction.atomic():
                mapping = SsoGroupMapping.objects.create(
                    group=data["group"], team_id=data["team_id"], role=data["role"], is_admin=data["is_admin"]
                )
                audit.record(
                    request.user,
                    SsoAuditAction.MAPPING_CREATE,
                    mapping,
                    team=mapping.team,
                    after=audit.snapshot(mapping, ["group", "team_id", "role", "is_admin"]),
                )
            messages.success(request, f"Added: {mapping}. It applies at each person's next sign-in.")
            return redirect("sso-mapping-list")
    else:
        form = SsoGroupMappingForm()
    mappings = list(SsoGroupMapping.objects.select_related("team"))
    identities = SsoIdentity.objects.select_related("user").order_by("-last_sign_in")[:200]
    sso_members = dict(
        Membership.objects.filter(source=MembershipSource.SSO).values_list("team_id").annotate(n=Count("id")).order_by()
    )
    for mapping in mappings:
        mapping.sso_member_count = sso_members.get(mapping.team_id, 0)
    return render(
        request,
        "accounts/sso_mappings.html",
        {
            "form": form,
            "mappings": mappings,
            "identities": identities,
            "sso_enabled": sso.enabled(),
            "provider_name": sso.provider_name(),
        },
    )


@login_required
@require_POST
def mapping_delete(request, pk: int):
    _admin_only(request)
    mapping = get_object_or_404(SsoGroupMapping.objects.select_related("team"), pk=pk)
    with transaction.atomic():
        audit.record(
            request.user,
            SsoAuditAction.MAPPING_DELETE,
            mapping,
            team=mapping.team,
            before=audit.snapshot(mapping, ["group", "team_id", "role", "is_admin"]),
        )
        label = str(mapping)
        mapping.delete()
    messages.success(request, f"Deleted: {label}. Memberships it granted are removed at each person's next sign-in.")
    return redirect("sso-mapping-list")
