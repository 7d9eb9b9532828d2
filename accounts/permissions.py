from rest_framework import permissions

from .models import APIToken


class IsAuthenticatedWithTokenScope(permissions.IsAuthenticated):
    """Signed in (session or token); read-only tokens may only make safe requests."""

    message = "Authentication required: sign in, or send 'Authorization: Bearer <token>'."

    def has_permission(self, request, view):
        if not super().has_permission(request, view):
            return False
        if (
            isinstance(request.auth, APIToken)
            and request.auth.read_only
            and request.method not in permissions.SAFE_METHODS
        ):
            self.message = "This API token is read-only; use a read-write token for changes."
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
