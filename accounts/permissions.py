"""The API's permission base: signed in, and within the scope of the API token the request carries.

Token scopes are enforced here and only here (every API view's permission is this class or a subclass):
- read: safe methods (GET, HEAD, OPTIONS) only;
- submit: read, plus the actions a view lists in ``submit_scope_actions`` (submitting, cancelling and resubmitting
  jobs, starting, stopping and extending notebooks, running one's services), and those only on the token's own
  user's work (an object whose ``owner`` is that user): a lead's submit token does not act on the members' work;
- manage: everything the identity's role allows.
A browser session has no scope: it is the person themselves.
"""

from rest_framework import permissions

from .choices import TokenScope
from .models import APIToken


def scope_allows(scope: str, method: str, view) -> bool:
    if method in permissions.SAFE_METHODS or scope == TokenScope.MANAGE:
        return True
    if scope == TokenScope.SUBMIT:
        return getattr(view, "action", None) in getattr(view, "submit_scope_actions", ())
    return False


class IsAuthenticatedWithTokenScope(permissions.IsAuthenticated):
    """Signed in (session or token); a token may only do what its scope allows."""

    message = "Authentication required: sign in, or send 'Authorization: Bearer <token>'."

    def has_permission(self, request, view):
        if not super().has_permission(request, view):
            return False
        token = request.auth
        if isinstance(token, APIToken) and not scope_allows(token.scope, request.method, view):
            if token.scope == TokenScope.READ:
                self.message = "This API token is read-only; use a token of scope 'submit' or 'manage' for changes."
            else:
                self.message = (
                    f"This API token has scope '{token.scope}', which covers submitting and managing your own "
                    "work only; use a token of scope 'manage' for this."
                )
            return False
        return True

    def has_object_permission(self, request, view, obj):
        token = request.auth
        if (
            isinstance(token, APIToken)
            and token.scope == TokenScope.SUBMIT
            and request.method not in permissions.SAFE_METHODS
            and getattr(obj, "owner_id", None) != request.user.pk
        ):
            self.message = (
                "This API token has scope 'submit', which acts on your own work only, and this belongs to someone "
                "else; use a token of scope 'manage', or the browser, to act on your team's work."
            )
            return False
        return True


class IsAdminOrReadOnly(IsAuthenticatedWithTokenScope):
    """Everybody signed in may read; only staff (admins) may change."""

    def has_permission(self, request, view):
        if not super().has_permission(request, view):
            return False
        if request.method in permissions.SAFE_METHODS:
            return True
        self.message = "Only portal admins can change this."
        return bool(request.user.is_staff)
