"""Team administration in a real Chromium (issue 18): an admin creates a team from the Admin area (its namespace
defaults to the short name) and makes alice its lead; alice, from the team page, adds bob as a member and is
told she cannot step down while she is the only lead. Expected values come from the rows the pages wrote."""

import pytest

from accounts.models import Membership, Team
from core.models import AuditEvent

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


def test_admin_creates_a_team_and_its_lead_adds_a_member(new_page, people, artifacts):
    admin = new_page()
    login(admin, "admin")
    admin.get_by_role("navigation", name="Main").get_by_role("link", name="Admin").click()
    with admin.expect_navigation():
        admin.get_by_test_id("new-team").click()
    form = admin.get_by_test_id("team-form")
    form.get_by_label("Short name").fill("speech")
    form.get_by_label("Name", exact=True).fill("Speech Recognition")
    form.get_by_label("Description").fill("ASR models")
    with admin.expect_navigation():
        form.get_by_role("button", name="Create team").click()
    expect(admin.locator(".message-success")).to_contain_text("its workloads run in namespace speech")
    team = Team.objects.get(slug="speech")
    assert (team.name, team.namespace) == ("Speech Recognition", "speech")
    expect(admin.get_by_role("heading", name="Members of Speech Recognition")).to_be_visible()
    adding = admin.get_by_test_id("add-member")
    adding.get_by_label("User name").fill("alice")
    adding.get_by_label("Role").select_option("lead")
    with admin.expect_navigation():
        adding.get_by_role("button", name="Add member").click()
    expect(admin.locator('[data-testid="member-table"] tr[data-user="alice"]')).to_be_visible()
    assert Membership.objects.get(team=team, user=people["alice"]).role == "lead"

    lead = new_page()
    login(lead, "alice")
    lead.goto(f"/teams/{team.slug}/")
    with lead.expect_navigation():
        lead.get_by_test_id("team-members-link").click()
    adding = lead.get_by_test_id("add-member")
    adding.get_by_label("User name").fill("nobody")
    with lead.expect_navigation():
        adding.get_by_role("button", name="Add member").click()
    expect(lead.locator('[data-field="username"]')).to_contain_text("No user 'nobody'")
    adding = lead.get_by_test_id("add-member")
    adding.get_by_label("User name").fill("bob")
    with lead.expect_navigation():
        adding.get_by_role("button", name="Add member").click()
    expect(lead.locator(".message-success")).to_contain_text("bob is now a member of team Speech Recognition")
    bob_row = lead.locator('[data-testid="member-table"] tr[data-user="bob"]')
    expect(bob_row).to_be_visible()
    expect(bob_row.get_by_label("Role of bob", exact=True)).to_have_value("member")

    alice_row = lead.locator('[data-testid="member-table"] tr[data-user="alice"]')
    alice_row.get_by_label("Role of alice", exact=True).select_option("member")
    with lead.expect_navigation():
        alice_row.get_by_role("button", name="Change role").click()
    expect(lead.get_by_test_id("member-error")).to_contain_text("alice is the last lead of speech")
    lead.screenshot(path=str(artifacts / "team-members.png"), full_page=True)
    assert Membership.objects.get(team=team, user=people["alice"]).role == "lead"
    assert list(AuditEvent.objects.filter(team=team).order_by("id").values_list("action", "actor_name")) == [
        ("team.create", "admin"),
        ("team.member_add", "admin"),
        ("team.member_add", "alice"),
    ]
