"""Reading the portal's pages in tests: what the main navigation marks as the section shown."""

from __future__ import annotations

import re

MAIN_NAV = re.compile(r'<nav class="mainnav" aria-label="Main">(.*?)</nav>', re.S)
CURRENT = re.compile(r'<a href="[^"]*" aria-current="page">([^<]+)</a>')


def current_sections(html: str) -> list[str]:
    """The links of the page's main navigation marked aria-current="page" (base.html), by their text."""
    nav = MAIN_NAV.search(html)
    assert nav, "no main navigation on the page"
    return CURRENT.findall(nav.group(1))
