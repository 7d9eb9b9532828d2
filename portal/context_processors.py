from django.conf import settings


def portal(request):
    return {"cluster_backend": settings.PORTAL_CLUSTER_BACKEND}
