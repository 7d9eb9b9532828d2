"""Single sign-on's pages without a provider: off by default (demo unchanged), the sign-in button and the request
sent to the provider, break-glass password sign-in that never waits on the provider, and the admins' mapping page
(admin only, every problem listed at once, audited)."""

from urllib.parse import parse_qs, urlsplit

import pytest

from accounts import sso
from accounts.choices import SsoAuditAction
from accounts.models import SsoGroupMapping
from core.models import AuditEvent
from tests.conftest import PASSWORD

pytestmark = pytest.mark.django_db
UNREACHABLE = "http://127.0.0.1:9/.well-known/openid-configuration"  # discard port: nothing answers


@pytest.fixture
def sso_on(settings):
    settings.OIDC_RP_CLIENT_ID = "portal"
    settings.OIDC_RP_CLIENT_SECRET = "secret"
    settings.PORTAL_SSO_PROVIDER_NAME = "Example ID"
    settings.AUTHENTICATION_BACKENDS = [*settings.AUTHENTICATION_BACKENDS, "accounts.sso.PortalOIDCBackend"]
    sso._discovery_cache.clear()
    yield settings
    sso._discovery_cache.clear()


def test_sso_is_off_by_default_no_button_and_its_urls_are_not_found(client):
    assert not sso.enabled()
    page = client.get("/login/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404


def test_the_button_sends_the_browser_to_the_provider_with_groups_pkce_state_and_nonce(client, sso_on):
    sso_on.OIDC_OP_AUTHORIZATION_ENDPOINT = "https://id.example.org/authorize"
    page = client.get("/login/?next=/jobs/").content.decode()
    assert "Sign in with Example ID" in page and 'name="password"' in page  # break-glass form stays
    assert 'href="/oidc/authenticate/?next=/jobs/"' in page
    response = client.get("/oidc/authenticate/?next=/jobs/")
    assert response.status_code == 302
    url = urlsplit(response["Location"])
    assert f"{url.scheme}://{url.netloc}{url.path}" == "https://id.example.org/authorize"
    query = {k: v[0] for k, v in parse_qs(url.query).items()}
    assert query["client_id"] == "portal" and query["response_type"] == "code"
    assert set(query["scope"].split()) == {"openid", "email", "profile", "groups"}
    assert query["code_challenge_method"] == "S256" and query["nonce"] and query["state"]
    assert query["state"] in client.session["oidc_states"]


def test_an_unreachable_provider_sends_people_back_to_sign_in_with_a_password(client, sso_on):
    sso_on.OIDC_OP_DISCOVERY_URL = UNREACHABLE
    response = client.get("/oidc/authenticate/", follow=True)
    assert response.redirect_chain[-1][0].startswith("/login/")
    assert "Single sign-on is unavailable" in response.content.decode()


def test_break_glass_password_sign_in_works_while_the_provider_is_down(client, people, sso_on, monkeypatch):
    sso_on.OIDC_OP_DISCOVERY_URL = UNREACHABLE

    def provider_asked(*args, **kwargs):
        raise AssertionError("a password sign-in asked the provider")

    monkeypatch.setattr(sso.requests, "get", provider_asked)
    response = client.post("/login/", {"username": "admin", "password": PASSWORD})
    assert response.status_code == 302 and client.session["_auth_user_id"] == str(people["admin"].pk)


def test_password_sign_in_may_be_kept_for_break_glass_admins(client, people, sso_on):
    sso_on.PORTAL_SSO_PASSWORD_SIGN_IN = "admins"
    page = client.post("/login/", {"username": "alice", "password": PASSWORD}).content.decode()
    assert "Sign in with Example ID (the button above): password sign-in is kept for break-glass admins." in page
    assert "_auth_user_id" not in client.session
    client.post("/login/", {"username": "admin", "password": PASSWORD})
    assert client.session["_auth_user_id"] == str(people["admin"].pk)


def test_the_admins_only_rule_needs_sso_on(client, people, settings):
    settings.PORTAL_SSO_PASSWORD_SIGN_IN = "admins"
    client.post("/login/", {"username": "alice", "password": PASSWORD})
    assert client.session["_auth_user_id"] == str(people["alice"].pk)


def test_a_callback_with_an_unknown_state_signs_nobody_in(client, sso_on):
    sso_on.OIDC_OP_DISCOVERY_URL = UNREACHABLE
    response = client.get("/oidc/callback/?code=abc&state=forged", follow=True)
    assert "_auth_user_id" not in client.session
    assert "did not complete" in response.content.decode()


def test_sign_out_without_an_sso_session_stays_in_the_portal(client, people, sso_on):
    sso_on.OIDC_OP_LOGOUT_URL = "https://id.example.org/logout"
    client.force_login(people["alice"])
    response = client.post("/logout/")
    assert response["Location"] == "/login/"


def test_sign_out_after_sso_also_ends_the_provider_session(client, people, sso_on):
    sso_on.OIDC_OP_LOGOUT_URL = "https://id.example.org/logout"
    client.force_login(people["alice"])
    session = client.session
    session["oidc_id_token"] = "id.token.value"
    session.save()
    response = client.post("/logout/")
    url = urlsplit(response["Location"])
    assert (url.netloc, url.path) == ("id.example.org", "/logout")
    assert parse_qs(url.query) == {
        "id_token_hint": ["id.token.value"],
        "post_logout_redirect_uri": ["http://testserver/login/"],
    }
    assert "_auth_user_id" not in client.session


# --- the mapping page --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["alice", "bob", "outsider"])
def test_only_admins_see_or_change_the_mapping(client, people, who):
    mapping = SsoGroupMapping.objects.create(group="g", team=people["vision"], role="member")
    client.force_login(people[who])
    assert client.get("/sso/mappings/").status_code == 403
    assert client.post("/sso/mappings/", {"group": "x", "grants": "admin"}).status_code == 403
    assert client.post(f"/sso/mappings/{mapping.pk}/delete/").status_code == 403
    assert SsoGroupMapping.objects.count() == 1 and not AuditEvent.objects.exists()


def test_anonymous_people_are_sent_to_sign_in(client):
    assert client.get("/sso/mappings/")["Location"].startswith("/login/")


def test_an_empty_form_lists_every_problem_at_once(client, people):
    client.force_login(people["admin"])
    page = client.post("/sso/mappings/", {"group": "  ", "grants": ""}).content.decode()
    assert "Type the group&#x27;s name" in page and "Choose a team and role, or portal admin." in page
    assert not SsoGroupMapping.objects.exists()


def test_admins_add_and_delete_mappings_and_each_change_is_audited(client, people):
    client.force_login(people["admin"])
    vision = people["vision"]
    response = client.post("/sso/mappings/", {"group": "cv-leads", "grants": f"{vision.pk}:lead"}, follow=True)
    assert "Added: cv-leads → Computer Vision (lead)" in response.content.decode()
    client.post("/sso/mappings/", {"group": "ops", "grants": "admin"})
    assert set(SsoGroupMapping.objects.values_list("group", "team__slug", "role", "is_admin")) == {
        ("cv-leads", "vision", "lead", False),
        ("ops", None, "", True),
    }
    duplicate = client.post("/sso/mappings/", {"group": "cv-leads", "grants": f"{vision.pk}:member"}).content.decode()
    assert "already grants Lead in Computer Vision; delete that mapping first" in duplicate
    assert SsoGroupMapping.objects.count() == 2
    page = client.get("/sso/mappings/").content.decode()
    assert "cv-leads" in page and "portal admin" in page

    ops = SsoGroupMapping.objects.get(group="ops")
    assert client.get(f"/sso/mappings/{ops.pk}/delete/").status_code == 405
    client.post(f"/sso/mappings/{ops.pk}/delete/")
    assert not SsoGroupMapping.objects.filter(group="ops").exists()
    events = list(AuditEvent.objects.order_by("id").values_list("action", "actor__username", "team__slug"))
    assert events == [
        (SsoAuditAction.MAPPING_CREATE, "admin", "vision"),
        (SsoAuditAction.MAPPING_CREATE, "admin", None),
        (SsoAuditAction.MAPPING_DELETE, "admin", None),
    ]


def test_a_deactivated_sso_account_is_signed_out_of_its_open_session(client, people, sso_on):
    user = sso.sign_in("https://id.example.org", {"sub": "s-1", "preferred_username": "erin"})
    client.force_login(user, backend="accounts.sso.PortalOIDCBackend")
    assert client.get("/").status_code == 200
    type(user).objects.filter(pk=user.pk).update(is_active=False)
    assert client.get("/")["Location"].startswith("/login/")


def test_the_main_menu_shows_sso_groups_to_admins_only_and_marks_it_current(client, people):
    client.force_login(people["admin"])
    page = client.get("/sso/mappings/").content.decode()
    assert '<a href="/sso/mappings/" aria-current="page">SSO groups</a>' in page
    client.force_login(people["alice"])
    assert "/sso/mappings/" not in client.get("/").content.decode()


def test_the_members_page_says_which_memberships_come_from_sso(client, people):
    SsoGroupMapping.objects.create(group="cv", team=people["vision"], role="member")
    sso.apply_groups(people["outsider"], ["cv"])
    client.force_login(people["admin"])
    page = client.get("/teams/vision/members/").content.decode()
    rows = {name: page.split(f"{name}", 1)[1].split("</th>", 1)[0] for name in ("alice", "outsider")}
    assert ">Local</span>" in rows["alice"] and ">SSO group</span>" in rows["outsider"]
