from django.conf import settings


def portal(request):
    context = {"cluster_backend": settings.PORTAL_CLUSTER_BACKEND}
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        context["unread_notifications"] = user.notifications.unread().count()
    return context
