"""Fixtures for the browser tests: Debian's Chromium driven through Playwright's sync API against pytest-django's
live_server, with the demo inventory and the people from tests/conftest.py.

Playwright's sync API keeps an asyncio loop running in the test thread, which makes Django refuse ORM calls there
("SynchronousOnlyOperation"). The loop only dispatches Playwright's own messages while a Playwright call is in
progress, never at the same time as a query, so while the browser is up the check is switched off
(DJANGO_ALLOW_ASYNC_UNSAFE) and switched back on when the browser tests are done.
"""

import os
from pathlib import Path

import pytest

from tests.conftest import PASSWORD, REPO

#: Debian's build of Chromium's headless shell (package chromium-headless-shell, the same source and version as its
#: chromium package): what Playwright itself runs for headless Chromium. Against the full browser in its new headless
#: mode it took about a quarter less CPU on the same browser tests (docs/operator-guide.md, "Tests and the real
#: control plane").
CHROMIUM = Path("/usr/bin/chromium-headless-shell")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "test-artifacts"


@pytest.fixture(scope="package")
def browser():
    """One Chromium for all browser tests (closed when they are done, so later tests get Django's checks back)."""
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is not installed (apt-get install chromium-headless-shell)")
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    playwright = sync_api.sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()
    finally:
        playwright.stop()
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


@pytest.fixture
def new_page(browser, live_server, transactional_db):
    """Factory for pages in fresh browser contexts (own cookies) whose relative URLs go to the live server."""
    contexts = []

    def make(width: int = 1280, height: int = 900):
        context = browser.new_context(base_url=live_server.url, viewport={"width": width, "height": height})
        context.set_default_timeout(15_000)
        contexts.append(context)
        return context.new_page()

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def page(new_page):
    return new_page()


@pytest.fixture
def artifacts() -> Path:
    """Where tests save screenshots (git-ignored)."""
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS


def login(page, username: str, password: str = PASSWORD) -> None:
    """Log in through the real login form, as a person would."""
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    with page.expect_navigation():
        page.get_by_role("button", name="Log in").click()
