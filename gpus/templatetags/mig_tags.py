"""``{{ profile|mig_profile_breaks }}``: a MIG profile name that a narrow slot cell breaks only after its compute
part ("1g." / "10gb"), never inside a number ("1g.1" / "0gb", ux-walk 2's A09)."""

from django import template
from django.utils.html import escape
from django.utils.safestring import mark_safe

register = template.Library()


@register.filter
def mig_profile_breaks(profile) -> str:
    head, dot, tail = str(profile or "").partition(".")
    if not dot:
        return escape(head)
    return mark_safe(f'<span class="mig-name">{escape(head)}.<wbr>{escape(tail)}</span>')  # noqa: S308 - escaped
