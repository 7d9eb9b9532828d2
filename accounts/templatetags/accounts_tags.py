from django import template

from ..service_accounts import owner_label as _owner_label

register = template.Library()


@register.filter
def owner_label(user) -> str:
    """A job's owner as people read it: "ci (service account of vision)" for a service account, else the username."""
    return _owner_label(user)
