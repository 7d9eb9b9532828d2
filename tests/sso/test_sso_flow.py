"""Single sign-on end to end in a real Chromium against a real OpenID provider in its own process (conftest.py):
the button, the provider's sign-in and consent pages, the account made from the claims, the group mapping applied
at every sign-in (granted, changed, removed; admin following its group; a local membership left alone), and sign-out
ending the provider's session too."""

import pytest

from accounts.choices import MembershipRole, MembershipSource, SsoAuditAction
from accounts.models import Membership, SsoGroupMapping, SsoIdentity
from core.models import AuditEvent
from tests.browser.conftest import login
from tests.sso.conftest import OP_PASSWORD

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect


def _sign_in_with_sso(page, username: str) -> bool:
    """From the portal's sign-in page through the provider and back, answering its consent page if it asks
    (returns whether it asked)."""
    page.goto("/login/")
    page.get_by_role("link", name="Sign in with SSO").click()
    page.wait_for_url("**/accounts/login/**")
    expect(page.get_by_role("heading", name="Test identity provider")).to_be_visible()
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(OP_PASSWORD)
    page.get_by_role("button", name="Sign in at the provider").click()
    consent = page.get_by_role("button", name="Authorize")
    signed_in = page.get_by_role("button", name="Log out")
    expect(consent.or_(signed_in)).to_be_visible()
    asked = consent.is_visible()
    if asked:
        consent.click()
    expect(signed_in).to_be_visible()
    return asked


def _sign_out(page) -> None:
    page.goto("/")
    page.get_by_role("button", name="Log out").click()
    page.wait_for_url("**/login/")


def _memberships(user) -> dict[str, tuple[str, str]]:
    return {m.team.slug: (m.role, m.source) for m in Membership.objects.filter(user=user).select_related("team")}


def test_sso_sign_in_applies_the_group_mapping_at_every_sign_in(page, people, openid_provider, sso_settings):
    vision, nlp = people["vision"], people["nlp"]
    SsoGroupMapping.objects.create(group="ml-vision-leads", team=vision, role=MembershipRole.LEAD)
    SsoGroupMapping.objects.create(group="ml-vision", team=vision, role=MembershipRole.MEMBER)
    SsoGroupMapping.objects.create(group="portal-admins", is_admin=True)
    openid_provider.set_user(
        "carol", ["ml-vision-leads", "unmapped"], email="carol@example.org", first_name="Carol", last_name="Chen"
    )

    # First sign-in: an account from the claims, lead of vision by her group, not an admin.
    assert _sign_in_with_sso(page, "carol")  # the provider asked for consent the first time
    expect(page.locator("header")).to_contain_text("carol")
    identity = SsoIdentity.objects.select_related("user").get(user__username="carol")
    carol = identity.user
    assert (carol.email, carol.first_name, carol.last_name) == ("carol@example.org", "Carol", "Chen")
    assert not carol.has_usable_password()
    assert identity.groups == ["ml-vision-leads", "unmapped"]
    assert _memberships(carol) == {"vision": (MembershipRole.LEAD, MembershipSource.SSO)}
    assert not carol.is_staff
    assert page.goto("/sso/mappings/").status == 403  # the mapping page is for admins only
    # A team lead adds her to nlp by hand: single sign-on must never touch that membership.
    Membership.objects.create(user=carol, team=nlp, role=MembershipRole.MEMBER)

    # Second sign-in after her groups changed at the provider: role lowered, admin granted, local kept.
    _sign_out(page)
    openid_provider.set_user("carol", ["ml-vision", "portal-admins"], email="carol@example.org")
    assert not _sign_in_with_sso(page, "carol")  # and remembered it
    carol.refresh_from_db()
    assert _memberships(carol) == {
        "vision": (MembershipRole.MEMBER, MembershipSource.SSO),
        "nlp": (MembershipRole.MEMBER, MembershipSource.LOCAL),
    }
    assert carol.is_staff and carol.is_superuser
    page.goto("/sso/mappings/")
    expect(page.get_by_test_id("sso-people-table")).to_contain_text("portal-admins")

    # Third: no mapped group any more. The SSO membership and admin go; the local membership stays.
    _sign_out(page)
    openid_provider.set_user("carol", [], email="carol@example.org")
    _sign_in_with_sso(page, "carol")
    carol.refresh_from_db()
    assert _memberships(carol) == {"nlp": (MembershipRole.MEMBER, MembershipSource.LOCAL)}
    assert not carol.is_staff and not carol.is_superuser
    assert SsoIdentity.objects.filter(user=carol).count() == 1  # the same account every time

    verbs = list(AuditEvent.objects.filter(actor=carol, action__startswith="sso.").values_list("action", flat=True))
    for verb in (SsoAuditAction.USER_CREATE, SsoAuditAction.MEMBERSHIP_GRANT, SsoAuditAction.MEMBERSHIP_ROLE):
        assert verb in verbs
    assert SsoAuditAction.MEMBERSHIP_REVOKE in verbs and SsoAuditAction.ADMIN_CHANGE in verbs
    assert verbs.count(SsoAuditAction.LOGIN) == 3


def test_sign_out_ends_the_provider_session_too(page, live_server, people, openid_provider, sso_settings):
    openid_provider.set_user("dave", ["unmapped"], email="dave@example.org")
    _sign_in_with_sso(page, "dave")
    expect(page.locator("header")).to_contain_text("dave")
    _sign_out(page)  # through the provider's end-session endpoint and back to the portal's sign-in page
    expect(page.get_by_role("link", name="Sign in with SSO")).to_be_visible()
    # The provider forgot dave too: signing in again asks for his provider password.
    page.get_by_role("link", name="Sign in with SSO").click()
    page.wait_for_url("**/accounts/login/**")


def test_break_glass_local_admin_signs_in_with_a_password_and_maps_a_group(page, people, sso_settings, artifacts):
    page.goto("/login/")
    expect(page.get_by_role("link", name="Sign in with SSO")).to_be_visible()
    page.screenshot(path=artifacts / "sso-login.png")
    login(page, "admin")
    page.get_by_role("link", name="SSO groups").click()
    expect(page.get_by_role("heading", name="Single sign-on groups")).to_be_visible()
    page.get_by_role("button", name="Add mapping").click()
    expect(page.get_by_test_id("sso-mapping-errors")).to_contain_text("Type the group")
    expect(page.get_by_test_id("sso-mapping-errors")).to_contain_text("Choose a team and role")
    page.get_by_label("Group").fill("ml-vision")
    page.get_by_label("Grants").select_option(label="Computer Vision (vision) — Lead")
    page.get_by_role("button", name="Add mapping").click()
    expect(page.get_by_test_id("sso-mapping-table")).to_contain_text("ml-vision")
    page.screenshot(path=artifacts / "sso-mappings.png", full_page=True)
    assert SsoGroupMapping.objects.filter(group="ml-vision", team=people["vision"], role=MembershipRole.LEAD).exists()


def test_a_provider_user_named_like_a_local_account_gets_an_account_of_their_own(
    page, live_server, people, openid_provider, sso_settings
):
    openid_provider.set_user("admin", ["portal-admins"], email="someone@example.org")
    _sign_in_with_sso(page, "admin")
    identity = SsoIdentity.objects.select_related("user").get()
    assert identity.user.username == "admin-2"
    assert identity.user != people["admin"]
    expect(page.locator("header")).to_contain_text("admin-2")
