"""Every page names the portal's icon, so browsers stop asking for a /favicon.ico that is not there (ux-walk R15)."""

from django.contrib.staticfiles import finders


def test_pages_link_an_icon_that_exists(client, people):
    client.force_login(people["alice"])
    html = client.get("/").content.decode()
    assert 'rel="icon" href="/static/portal/favicon.svg"' in html
    assert finders.find("portal/favicon.svg")
