"""Service accounts in a real Chromium: a team lead opens the team's Service accounts page from the team page,
creates one, issues it a token (name, scope, days) and copies the secret shown once; the token works against the
API as the service account, and the page lists it with its scope. The values checked come from the rows."""

import pytest

from accounts.models import APIToken, ServiceAccount

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


def test_a_lead_creates_a_service_account_and_issues_it_a_token(page, live_server, people, artifacts):
    login(page, "alice")
    page.goto("/teams/vision/")
    page.get_by_test_id("team-service-accounts-link").click()
    expect(page.get_by_role("heading", name="Service accounts")).to_be_visible()

    page.get_by_label("Name", exact=True).fill("Bad Name")
    page.get_by_role("button", name="Create service account").click()
    expect(page.locator("#sa-name-errors")).to_contain_text("lowercase letters")
    page.get_by_label("Name", exact=True).fill("nightly-ci")
    page.get_by_label("Description").fill("Nightly training pipeline")
    page.get_by_role("button", name="Create service account").click()
    account = ServiceAccount.objects.get()
    card = page.locator(f'[data-service-account="{account.name}"]')
    expect(card).to_contain_text(account.user.username)

    card.get_by_label("Token name").fill("nightly")
    card.get_by_label("Scope").select_option("submit")
    card.get_by_label("Valid for (days)").fill("30")
    card.get_by_role("button", name="Issue token").click()
    secret_box = page.get_by_test_id("new-token")
    expect(secret_box).to_be_visible()
    expect(secret_box.get_by_role("button", name="Copy")).to_be_visible()
    secret = page.locator("#new-token-value").inner_text().strip()
    token = APIToken.objects.get(user=account.user)
    assert secret.startswith(f"gpp_{token.key_prefix}_") and token.scope == "submit"
    row = page.locator(f'tr[data-token-prefix="{token.key_prefix}"]')
    expect(row).to_contain_text("submit")
    expect(row.locator('[data-role="status"]')).to_contain_text("active")
    page.screenshot(path=str(artifacts / "service-accounts.png"), full_page=True)

    answer = page.request.get(f"{live_server.url}/api/v1/me/", headers={"Authorization": f"Bearer {secret}"})
    assert answer.ok and answer.json()["username"] == account.user.username

    page.goto("/teams/vision/service-accounts/")
    expect(page.locator(f'tr[data-token-prefix="{token.key_prefix}"]')).to_be_visible()
    expect(page.get_by_test_id("new-token")).to_have_count(0)
    assert secret not in page.content()
