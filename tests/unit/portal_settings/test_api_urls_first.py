"""The URLconf resolves the API before the pages' includes (portal/urls.py), which is only right while none of the
patterns it now skips for an API request could have answered a path under api/v1/."""

from __future__ import annotations

from django.urls import URLResolver, get_resolver


def routes(pattern, prefix=""):
    text = prefix + str(pattern.pattern)
    if isinstance(pattern, URLResolver):
        for inner in pattern.url_patterns:
            yield from routes(inner, text)
    else:
        yield text


def test_no_page_url_lies_under_the_api_which_is_resolved_first():
    top = get_resolver().url_patterns
    api = next(i for i, p in enumerate(top) if isinstance(p, URLResolver) and str(p.pattern) == "api/v1/")
    before = [route for pattern in top[:api] for route in routes(pattern) if route.startswith("api/")]
    assert before == ["api/v1/telemetry/samples/", "api/v1/utilisation/", "api/v1/usage/", "api/v1/usage/people/"]
    after = [route for pattern in top[api + 1 :] for route in routes(pattern)]
    # Every pattern after the API (the pages, admin, the schema): none starts with api/v1 or with a converter or
    # regular expression that could match it.
    assert after and not [route for route in after if route.startswith(("api/v1", "<", "^"))]
