"""Helpers shared by the real-apiserver tests (kept out of conftest.py so test modules can import them)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import NoReturn, TypeVar

import pytest

T = TypeVar("T")

#: Label on every cluster-scoped object a test creates, so a test sees (and cleans up) only its own.
TEST_RUN_LABEL = "portal-test/run"
#: The identity the portal has in a cluster (deploy/10-rbac.yaml's ServiceAccount), as a static-token user, so
#: tests can check that the RBAC in deploy/ lets the backend do its job and nothing more.
PORTAL_SERVICE_ACCOUNT_USER = "system:serviceaccount:gpu-portal:gpu-portal"
PORTAL_SERVICE_ACCOUNT_GROUPS = ["system:serviceaccounts", "system:serviceaccounts:gpu-portal"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


def unavailable(reason: str) -> NoReturn:
    """Fail in CI, skip elsewhere: never let CI pass with the real-cluster tests silently missing."""
    if in_ci():
        pytest.fail(f"The real-apiserver tests cannot run (CI=true, so this is a failure): {reason}", pytrace=False)
    pytest.skip(f"real kube-apiserver unavailable: {reason}")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.1) -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"Timed out after {timeout:.0f}s waiting for {what} (last value: {last!r})")
