"""``{% sso_provider as sso %}``: the sign-in page's "Sign in with …" button, only when single sign-on is set up."""

from django import template

from .. import sso

register = template.Library()


@register.simple_tag
def sso_provider():
    """The provider's display name when SSO is configured, else an empty string."""
    return sso.provider_name() if sso.enabled() else ""
