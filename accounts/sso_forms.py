"""Single sign-on's forms: the admins' group mapping (every problem listed at once, each saying what to change),
and the password sign-in form, which may be kept for break-glass admins once SSO is on."""

from django import forms
from django.conf import settings
from django.contrib.auth.forms import AuthenticationForm

from . import sso
from .choices import MembershipRole
from .models import Team
from .sso_models import SsoGroupMapping

ADMIN_CHOICE = "admin"


class SsoGroupMappingForm(forms.Form):
    group = forms.CharField(
        max_length=200,
        required=False,
        help_text="The group exactly as the identity provider sends it in the groups claim, e.g. ml-vision.",
    )
    grants = forms.ChoiceField(
        required=False,
        help_text="A role in a team, or portal admin (every team, every admin page).",
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        choices = [("", "Choose what the group grants")]
        for team in Team.objects.order_by("slug"):
            for role in MembershipRole:
                choices.append((f"{team.pk}:{role.value}", f"{team.name} ({team.slug}) — {role.label}"))
        choices.append((ADMIN_CHOICE, "Portal admin"))
        self.fields["grants"].choices = choices

    def clean(self):
        data = super().clean()
        problems = {}
        group = (data.get("group") or "").strip()
        grants = data.get("grants") or ""
        if not group:
            problems["group"] = "Type the group's name as the identity provider sends it."
        if not grants:
            problems["grants"] = "Choose a team and role, or portal admin."
        team_id, role, is_admin = None, "", grants == ADMIN_CHOICE
        if grants and not is_admin:
            team_id, _, role = grants.partition(":")
            team_id = int(team_id)
        if group and grants:
            taken = SsoGroupMapping.objects.filter(group=group)
            taken = taken.filter(is_admin=True) if is_admin else taken.filter(team_id=team_id)
            if taken.exists():
                existing = taken.first()
                problems["group"] = (
                    f"Group {group!r} already grants {'portal admin' if is_admin else existing.get_role_display()}"
                    f"{'' if is_admin else f' in {existing.team}'}; delete that mapping first to change it."
                )
        for name, message in problems.items():
            self.add_error(name, message)
        data.update(group=group, team_id=team_id, role=role, is_admin=is_admin)
        return data


class PortalAuthenticationForm(AuthenticationForm):
    """Django's sign-in form; with SSO on and PORTAL_SSO_PASSWORD_SIGN_IN=admins, only admins may use a password."""

    def confirm_login_allowed(self, user):
        super().confirm_login_allowed(user)
        admins_only = getattr(settings, "PORTAL_SSO_PASSWORD_SIGN_IN", "everyone") == "admins"
        if sso.enabled() and admins_only and not user.is_staff:
            raise forms.ValidationError(
                f"Sign in with {sso.provider_name()} (the button above): password sign-in is kept for break-glass "
                "admins.",
                code="sso_only",
            )
