"""Production security settings (audit finding 11): outside the demo (the simulated cluster) cookies are secure
and HSTS is on by default, and the demo secret key cannot be used however DEBUG or the key are set. Each case
loads portal.settings in a fresh interpreter with its own environment, as a deployment would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
REAL_KEY = "k" * 20 + "-a-real-secret-key-for-this-test-0123456789"
PROBE = (
    "import json, django; from django.conf import settings; django.setup(); "
    "print(json.dumps({k: getattr(settings, k) for k in ('SESSION_COOKIE_SECURE', 'CSRF_COOKIE_SECURE', "
    "'SECURE_HSTS_SECONDS', 'PORTAL_DEMO')}))"
)


def load(**environment: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_"))}
    env |= {"DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": "/tmp/portal-settings-test"}
    env |= environment
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def settings_of(**environment: str) -> dict:
    done = load(**environment)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_demo_keeps_plain_http_cookies_and_no_hsts():
    values = settings_of()
    assert values == {
        "SESSION_COOKIE_SECURE": False, "CSRF_COOKIE_SECURE": False, "SECURE_HSTS_SECONDS": 0, "PORTAL_DEMO": True,
    }  # fmt: skip


def test_a_real_cluster_gets_secure_cookies_and_hsts_by_default():
    values = settings_of(PORTAL_CLUSTER_BACKEND="kubernetes", DJANGO_SECRET_KEY=REAL_KEY)
    assert values["SESSION_COOKIE_SECURE"] is True and values["CSRF_COOKIE_SECURE"] is True
    assert values["SECURE_HSTS_SECONDS"] >= 31536000 and values["PORTAL_DEMO"] is False


@pytest.mark.parametrize(
    "environment",
    [
        {},  # no key at all: the demo's default
        {"DJANGO_DEBUG": "true"},  # DEBUG used to skip the guard
        {"DJANGO_SECRET_KEY": "insecure-CHANGE-ME"},  # the example Secret's placeholder
        {"DJANGO_SECRET_KEY": "insecure-embedded-demo-key-change-me-0123456789abcdef", "DJANGO_DEBUG": "1"},
        {"DJANGO_SECRET_KEY": "insecure-compose-key-change-me"},  # the old compose fallback
        {"DJANGO_SECRET_KEY": "short"},
        {"DJANGO_SECRET_KEY": "   "},
    ],
)
def test_the_demo_key_guard_cannot_be_bypassed_outside_the_demo(environment):
    done = load(PORTAL_CLUSTER_BACKEND="kubernetes", **environment)
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY" in done.stderr


def test_every_backend_but_the_simulated_one_is_outside_the_demo():
    done = load(PORTAL_CLUSTER_BACKEND="Kubernetes")
    assert done.returncode != 0 and "DJANGO_SECRET_KEY" in done.stderr


def test_old_keys_in_the_fallbacks_are_read_for_a_rotation():
    """Issue 31, item 9: DJANGO_SECRET_KEY_FALLBACKS (comma-separated) becomes Django's SECRET_KEY_FALLBACKS."""
    old = "o" * 20 + "-the-previous-key-of-this-portal-0123"
    done = subprocess.run(
        [sys.executable, "-c", "import django; from django.conf import settings; django.setup(); "
         "print(settings.SECRET_KEY_FALLBACKS)"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_"))}
        | {"DJANGO_SETTINGS_MODULE": "portal.settings", "PORTAL_DATA_DIR": "/tmp/portal-settings-test",
           "PORTAL_CLUSTER_BACKEND": "kubernetes", "DJANGO_SECRET_KEY": REAL_KEY,
           "DJANGO_SECRET_KEY_FALLBACKS": f"{old}, {old[::-1]},"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == repr([old, old[::-1]])


def test_a_weak_fallback_key_is_refused_outside_the_demo_naming_every_weak_one():
    """A fallback still verifies sessions and signed values, so the demo key or a short key there would let anyone
    who knows it forge them: refused like a weak DJANGO_SECRET_KEY, every one named at once."""
    done = load(PORTAL_CLUSTER_BACKEND="kubernetes", DJANGO_SECRET_KEY=REAL_KEY,
                DJANGO_SECRET_KEY_FALLBACKS="insecure-embedded-demo-key-change-me-0123456789abcdef,short")  # fmt: skip
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY_FALLBACKS item 1" in done.stderr and "DJANGO_SECRET_KEY_FALLBACKS item 2" in done.stderr


def test_an_empty_fallback_list_is_no_fallback():
    """docker-compose passes DJANGO_SECRET_KEY_FALLBACKS empty when unset: that is no fallback, not a weak one."""
    assert settings_of(PORTAL_CLUSTER_BACKEND="kubernetes", DJANGO_SECRET_KEY=REAL_KEY, DJANGO_SECRET_KEY_FALLBACKS="")
