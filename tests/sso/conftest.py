"""A real OpenID provider for the single sign-on tests, in its own process, and the portal configured to use it.

The provider is the small Django project in tests/sso/op/ (django-oidc-provider): its own SQLite database in a
temporary directory (it never shares the portal's), an RSA signing key made at start-up, the portal registered as
a confidential client, served by gunicorn on a free port. People and their groups are changed between sign-ins with
its management command op_user, in a separate process, as an identity-provider admin would.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.browser.conftest import artifacts, browser, new_page, page  # noqa: F401 - the browser fixtures
from tests.conftest import REPO

CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "test-client-secret-0123456789"
OP_PASSWORD = "provider-password-42"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Provider:
    url: str
    env: dict
    log: Path

    @property
    def discovery_url(self) -> str:
        return f"{self.url}/openid/.well-known/openid-configuration"

    def manage(self, *args: str) -> None:
        """Run one of the provider's management commands in its own process (its database, not the portal's)."""
        result = subprocess.run(
            [sys.executable, "-m", "django", *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=120
        )
        if result.returncode != 0:
            raise RuntimeError(f"provider command {args} failed:\n{result.stdout}\n{result.stderr}")

    def set_user(self, username: str, groups: list[str], **profile: str) -> None:
        """Create or update ``username`` at the provider with exactly ``groups``."""
        extra = [f"--{k.replace('_', '-')}={v}" for k, v in profile.items()]
        self.manage("op_user", username, f"--password={OP_PASSWORD}", *extra, "--groups", *groups)


@pytest.fixture(scope="session")
def openid_provider(live_server, tmp_path_factory):
    """The provider, started once for the session with the live server registered as its client."""
    data = tmp_path_factory.mktemp("openid-provider")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DATABASE_", "OIDC_"))},
        "DJANGO_SETTINGS_MODULE": "tests.sso.op.settings",
        "PYTHONPATH": str(REPO),
        "OP_DATA_DIR": str(data),
        "OP_SITE_URL": url,
    }
    provider = Provider(url=url, env=env, log=data / "gunicorn.log")
    provider.manage("migrate", "--noinput")
    provider.manage(
        "op_client",
        f"--client-id={CLIENT_ID}",
        f"--client-secret={CLIENT_SECRET}",
        f"--redirect-uri={live_server.url}/oidc/callback/",
        f"--post-logout-uri={live_server.url}/login/",
    )
    with provider.log.open("w") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "tests.sso.op.wsgi:application", "--bind", f"127.0.0.1:{port}"]
            + ["--workers", "1", "--threads", "4", "--access-logfile", "-"],
            env=env,
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(provider.discovery_url, timeout=5) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the test OpenID provider did not start:\n{provider.log.read_text()}")
            time.sleep(0.2)
        yield provider
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.fixture
def sso_settings(settings, openid_provider):
    """The portal configured for the provider, as an operator would through the environment (discovery only)."""
    from accounts import sso

    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.OIDC_OP_DISCOVERY_URL = openid_provider.discovery_url
    settings.OIDC_RP_SIGN_ALGO = "RS256"
    settings.PORTAL_SSO_PROVIDER_NAME = "SSO"
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "accounts.sso.PortalOIDCBackend"]
    sso._discovery_cache.clear()
    yield settings
    sso._discovery_cache.clear()
