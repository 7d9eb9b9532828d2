"""`gpuportal login --url URL` without --token signs the command line in through the browser, over real HTTP:
the CLI asks the live portal for a code, a person signed in approves it on the approval page (the Django test
client stands in for their browser, between two of the CLI's polls), and the CLI receives a token of the scope it
asked for and stores it."""

from __future__ import annotations

import stat

import pytest
from django.test import Client as BrowserClient
from django.urls import reverse

from accounts.models import APIToken, DeviceAuthorization


@pytest.fixture
def approve_between_polls(portal, people, monkeypatch, settings):
    """The CLI's first pause: alice approves (or, with decision='deny', denies) the pending sign-in."""
    settings.PORTAL_DEVICE_POLL_INTERVAL = 0
    state = {"decision": "approve", "pauses": 0, "seen": None}

    def pause(seconds: float) -> None:
        state["pauses"] += 1
        if state["pauses"] == 2:
            browser = BrowserClient()
            browser.force_login(people["alice"])
            pending = DeviceAuthorization.objects.get()
            state["seen"] = browser.get(reverse("device-approve"), {"code": pending.user_code}).content.decode()
            browser.post(reverse("device-approve"), {"code": pending.user_code, "decision": state["decision"]})

    monkeypatch.setattr("gpuportal.login.sleep", pause)
    return state


def test_login_without_a_token_is_approved_in_the_browser_and_stores_the_token(
    portal, gp, tmp_path, approve_between_polls
):
    result = gp("login", "--url", portal.url, "--no-browser", "--scope", "read", "--days", "3", login=False)
    assert result.exit_code == 0, result.output
    pending = DeviceAuthorization.objects.get()
    assert f"{portal.url}/account/device/?code={pending.user_code}" in result.output
    assert pending.user_code in approve_between_polls["seen"]
    assert "Signed in to" in result.output and "as alice (teams: vision)" in result.output
    token = APIToken.objects.get(user__username="alice", scope="read")
    assert token.name.startswith("gpuportal on ") and pending.token == token
    config = tmp_path / "gpuportal" / "config"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert f"gpp_{token.key_prefix}_" in config.read_text()
    # The stored read-only login lists jobs with no --url/--token, and may not submit.
    assert gp("jobs", "list", login=False).output.strip() == "No jobs."
    assert "read-only" in gp("jobs", "cancel", "1", login=False).output


def test_a_denied_login_stores_nothing(portal, gp, tmp_path, approve_between_polls):
    approve_between_polls["decision"] = "deny"
    result = gp("login", "--url", portal.url, "--no-browser", login=False)
    assert result.exit_code == 4
    assert "denied in the browser" in result.output
    assert not (tmp_path / "gpuportal" / "config").exists()
    assert not APIToken.objects.filter(user__username="alice", name__startswith="gpuportal on").exists()
