"""PORTAL_TRUSTED_PROXIES as portal/settings.py reads it from the environment: a number of proxy hops, the proxies'
networks, or a start-up error that says what to give; django-axes asks core.client_address for the address too.
Each case loads the settings in a fresh interpreter with its own environment, as a deployment would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROBE = (
    "import json; from portal import settings; "
    "print(json.dumps([settings.PORTAL_TRUSTED_PROXIES, settings.AXES_CLIENT_IP_CALLABLE]))"
)


def load(value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "PORTAL_"))}
    env |= {"PORTAL_DATA_DIR": "/tmp/portal-settings-test"}
    env |= {"PORTAL_TRUSTED_PROXIES": value} if value is not None else {}
    return subprocess.run(
        [sys.executable, "-c", PROBE], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def trusted(value: str | None):
    done = load(value)
    assert done.returncode == 0, done.stderr[-2000:]
    proxies, callable_name = json.loads(done.stdout.strip().splitlines()[-1])
    assert callable_name == "core.client_address.client_address"
    return proxies


def test_none_trusted_by_default_a_count_or_networks():
    assert trusted(None) == 0
    assert trusted("1") == 1
    assert trusted(" 10.0.0.0/8, 192.0.2.7 ,2001:db8::/32") == ["10.0.0.0/8", "192.0.2.7", "2001:db8::/32"]


def test_anything_else_stops_the_start_with_what_to_give():
    done = load("nginx")
    assert done.returncode != 0
    assert "PORTAL_TRUSTED_PROXIES='nginx': 'nginx' is not a network. Give the number of proxy hops" in done.stderr
