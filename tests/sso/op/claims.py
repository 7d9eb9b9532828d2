"""What the test provider says about a person: profile claims from the Django user, and a ``groups`` claim (scope
"groups") from the user's Django groups, which the tests change between sign-ins (manage.py op_user)."""

from django.utils.translation import gettext_lazy as _
from oidc_provider.lib.claims import ScopeClaims


def userinfo(claims, user):
    claims["name"] = user.get_full_name()
    claims["given_name"] = user.first_name
    claims["family_name"] = user.last_name
    claims["preferred_username"] = user.username
    claims["email"] = user.email
    claims["email_verified"] = True
    return claims


class GroupsScopeClaims(ScopeClaims):
    info_groups = (_("Groups"), _("The groups you belong to."))

    def scope_groups(self):
        return {"groups": list(self.user.groups.order_by("name").values_list("name", flat=True))}
