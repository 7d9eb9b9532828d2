from django.conf import settings

from planner import access as planner_access


def portal(request):
    context = {"cluster_backend": settings.PORTAL_CLUSTER_BACKEND}
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        context["unread_notifications"] = user.notifications.unread().count()
        # The planner's nav link (admins and team leads); asked only when the navigation is drawn.
        context["planner_reader"] = lambda: planner_access.can_read(user)
    return context
