"""Signing the command line in through the browser (device-code style, RFC 8628), for ``gpuportal login``.

The CLI asks the portal for a code (no token needed), the person opens the approval page in a browser where they
are signed in (password or SSO), checks the code and approves, and the CLI, polling meanwhile, receives a token of
the scope it asked for. ``sleep`` is this module's name for the clock, so a test can act between polls."""

from __future__ import annotations

import platform
from collections.abc import Callable
from dataclasses import dataclass
from time import sleep
from typing import Any

from . import transport
from .errors import APIError, PortalError

__all__ = ["DeviceCode", "LoginDenied", "browser_login", "sleep"]


class LoginDenied(PortalError):
    """The sign-in was denied in the browser, or its code expired before anybody approved it."""


@dataclass(frozen=True)
class DeviceCode:
    user_code: str
    verification_uri: str
    verification_uri_complete: str
    expires_in: int
    interval: int


def default_token_name() -> str:
    return f"gpuportal on {platform.node() or 'this machine'}"[:100]


def browser_login(
    url: str,
    *,
    scope: str = "submit",
    days: int | None = None,
    name: str | None = None,
    show: Callable[[DeviceCode], None] = lambda code: None,
    timeout: float = 30.0,
) -> dict[str, Any]:
    """The issued token ({"token", "name", "scope", "expires_at", ...}) once somebody approves; ``show`` is called
    with the code and the address to open before polling starts."""
    link = transport.Transport(url, "", timeout=timeout)
    body: dict[str, Any] = {"scope": scope, "name": name or default_token_name()}
    if days is not None:
        body["days"] = days
    _, started = link.call(transport.DEVICE_START, body=body)
    code = DeviceCode(
        user_code=started["user_code"],
        verification_uri=started["verification_uri"],
        verification_uri_complete=started["verification_uri_complete"],
        expires_in=int(started["expires_in"]),
        interval=int(started["interval"]),
    )
    show(code)
    interval = float(code.interval)
    waited = 0.0
    while waited <= code.expires_in:
        sleep(interval)
        waited += interval
        try:
            _, issued = link.call(transport.DEVICE_TOKEN, body={"device_code": started["device_code"]})
        except APIError as error:
            reason = error.body.get("error") if isinstance(error.body, dict) else None
            if reason == "authorization_pending":
                continue
            if reason == "slow_down" or error.status == 429:
                interval += 5
                continue
            if reason in ("access_denied", "expired_token"):
                raise LoginDenied(f"{error.body.get('detail') or reason} Run `gpuportal login` again.") from None
            raise
        return issued
    raise LoginDenied("Nobody approved the sign-in in time. Run `gpuportal login` again.")
