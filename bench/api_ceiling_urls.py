"""The bench's URLconf (bench/api_ceiling.py names it): the portal's URLs plus ``GET /bench/ceiling/``, a bare DRF
APIView that returns a small dict. It goes through the same middleware, the same API-token authentication and
the same permission class as every API endpoint and does nothing else, so the rate it is served at is the
ceiling the framework, the authentication and the machine allow (bench/api_load.py measures it)."""

from django.urls import path
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.permissions import IsAuthenticatedWithTokenScope
from portal.urls import handler404
from portal.urls import urlpatterns as portal_urlpatterns

__all__ = ["handler404", "urlpatterns"]


class CeilingView(APIView):
    """A bare endpoint: the default authentication classes, the API's permission, a small dict."""

    permission_classes = [IsAuthenticatedWithTokenScope]

    def get(self, request):
        return Response({"ok": True, "user": request.user.pk})


urlpatterns = [path("bench/ceiling/", CeilingView.as_view(), name="bench-ceiling"), *portal_urlpatterns]
