"""The SSO group mapping and account rules (accounts/sso.py) without a provider: what groups grant, how a sign-in
applies it (SSO memberships follow the groups, local ones are never touched, admin only when a mapping decides it),
how accounts are found (by issuer and subject, never by name), and the migration that marks existing memberships
local."""

import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from accounts import sso
from accounts.choices import MembershipRole, MembershipSource, SsoAuditAction
from accounts.models import Membership, SsoGroupMapping, SsoIdentity
from accounts.sso_models import SsoGroupMapping as Mapping
from core.models import AuditEvent

LEAD, MEMBER = MembershipRole.LEAD.value, MembershipRole.MEMBER.value


def _m(group, team_id=None, role="", is_admin=False):
    return Mapping(group=group, team_id=team_id, role=role, is_admin=is_admin)


# --- grants_for (pure) -------------------------------------------------------------------------------------------


def test_groups_grant_the_union_of_their_mappings_and_the_higher_role_wins():
    mappings = [_m("a", 1, MEMBER), _m("b", 1, LEAD), _m("c", 2, MEMBER), _m("d", 3, LEAD)]
    assert sso.grants_for(["a", "b", "c"], mappings).teams == {1: LEAD, 2: MEMBER}
    assert sso.grants_for(["b", "a"], mappings).teams == {1: LEAD}  # order does not matter
    assert sso.grants_for(["x"], mappings).teams == {}


def test_admin_is_decided_only_when_some_mapping_grants_admin():
    assert sso.grants_for(["ops"], [_m("a", 1, MEMBER)]).admin is None
    with_admin = [_m("a", 1, MEMBER), _m("ops", is_admin=True)]
    assert sso.grants_for(["ops"], with_admin).admin is True
    assert sso.grants_for(["a"], with_admin).admin is False


def test_groups_claim_is_read_as_a_list_whatever_shape_the_provider_sends(settings):
    assert sso.groups_from_claims({"groups": ["a", "b"]}) == ["a", "b"]
    assert sso.groups_from_claims({"groups": "a"}) == ["a"]
    assert sso.groups_from_claims({}) == []
    assert sso.groups_from_claims({"groups": {"a": 1}}) == []
    settings.PORTAL_SSO_GROUPS_CLAIM = "roles"
    assert sso.groups_from_claims({"groups": ["a"], "roles": ["r"]}) == ["r"]


def test_username_comes_from_preferred_username_then_email_then_subject():
    assert sso.username_from_claims({"preferred_username": "carol", "email": "c@x.org"}) == "carol"
    assert sso.username_from_claims({"email": "c@x.org"}) == "c@x.org"
    assert sso.username_from_claims({"sub": "42"}) == "sso-42"
    assert sso.username_from_claims({"preferred_username": "Carol Chen/ops"}) == "Carol-Chen-ops"


# --- apply_groups ------------------------------------------------------------------------------------------------


@pytest.fixture
def mapped(people):
    vision, nlp = people["vision"], people["nlp"]
    SsoGroupMapping.objects.create(group="cv", team=vision, role=MEMBER)
    SsoGroupMapping.objects.create(group="cv-leads", team=vision, role=LEAD)
    SsoGroupMapping.objects.create(group="nlp", team=nlp, role=MEMBER)
    return people


def _state(user):
    return {m.team.slug: (m.role, m.source) for m in Membership.objects.filter(user=user).select_related("team")}


@pytest.mark.django_db
def test_sign_ins_grant_change_and_remove_sso_memberships_and_leave_local_ones(mapped):
    bob = mapped["bob"]  # a local member of nlp (tests/conftest.py)
    sso.apply_groups(bob, ["cv-leads", "nlp"])
    assert _state(bob) == {"vision": (LEAD, "sso"), "nlp": (MEMBER, "local")}
    sso.apply_groups(bob, ["cv"])
    assert _state(bob) == {"vision": (MEMBER, "sso"), "nlp": (MEMBER, "local")}
    sso.apply_groups(bob, [])
    assert _state(bob) == {"nlp": (MEMBER, "local")}
    verbs = list(AuditEvent.objects.filter(actor=bob).order_by("id").values_list("action", "team__slug"))
    assert verbs == [
        (SsoAuditAction.MEMBERSHIP_GRANT, "vision"),
        (SsoAuditAction.MEMBERSHIP_ROLE, "vision"),
        (SsoAuditAction.MEMBERSHIP_REVOKE, "vision"),
    ]


@pytest.mark.django_db
def test_a_local_membership_keeps_its_role_even_where_a_group_grants_another(mapped):
    alice = mapped["alice"]  # local lead of vision
    sso.apply_groups(alice, ["cv"])
    assert _state(alice) == {"vision": (LEAD, "local")}
    assert not AuditEvent.objects.exists()


@pytest.mark.django_db
def test_an_unchanged_sign_in_changes_and_records_nothing(mapped):
    outsider = mapped["outsider"]
    sso.apply_groups(outsider, ["cv"])
    count = AuditEvent.objects.count()
    sso.apply_groups(outsider, ["cv", "unmapped"])
    assert AuditEvent.objects.count() == count


@pytest.mark.django_db
def test_admin_follows_its_group_only_once_an_admin_mapping_exists(mapped):
    bob, admin = mapped["bob"], mapped["admin"]
    sso.apply_groups(admin, [])
    admin.refresh_from_db()
    assert admin.is_staff and admin.is_superuser  # no admin mapping: set by hand, left alone
    SsoGroupMapping.objects.create(group="ops", is_admin=True)
    sso.apply_groups(bob, ["ops"])
    bob.refresh_from_db()
    assert bob.is_staff and bob.is_superuser
    sso.apply_groups(bob, ["nlp"])
    bob.refresh_from_db()
    assert not bob.is_staff and not bob.is_superuser
    assert AuditEvent.objects.filter(actor=bob, action=SsoAuditAction.ADMIN_CHANGE).count() == 2


# --- sign_in: accounts by issuer and subject -----------------------------------------------------------------------

ISS = "https://idp.example.org"


@pytest.mark.django_db
def test_a_first_sign_in_makes_an_account_without_a_password_and_later_ones_find_it(mapped):
    claims = {"sub": "s-1", "preferred_username": "erin", "email": "erin@x.org", "given_name": "Erin", "groups": ["cv"]}
    erin = sso.sign_in(ISS, claims)
    assert (erin.username, erin.email, erin.first_name) == ("erin", "erin@x.org", "Erin")
    assert not erin.has_usable_password()
    assert _state(erin) == {"vision": (MEMBER, "sso")}
    again = sso.sign_in(ISS, {**claims, "preferred_username": "erin.renamed", "email": "e@y.org", "groups": []})
    assert again.pk == erin.pk
    again.refresh_from_db()
    assert again.username == "erin" and again.email == "e@y.org"  # the username stays; e-mail follows the provider
    assert _state(again) == {}
    identity = SsoIdentity.objects.get(user=erin)
    assert identity.groups == [] and identity.last_sign_in is not None
    actions = set(AuditEvent.objects.filter(actor=erin).values_list("action", flat=True))
    assert {SsoAuditAction.USER_CREATE, SsoAuditAction.LOGIN} <= actions


@pytest.mark.django_db
def test_a_provider_user_never_takes_over_a_local_account_with_the_same_name(mapped):
    user = sso.sign_in(ISS, {"sub": "s-9", "preferred_username": "admin", "email": "x@x.org", "groups": []})
    assert user.username == "admin-2" and user.pk != mapped["admin"].pk
    other_issuer = sso.sign_in("https://other.example.org", {"sub": "s-9", "preferred_username": "admin"})
    assert other_issuer.username == "admin-3"


@pytest.mark.django_db
def test_a_deactivated_account_keeps_its_memberships_and_no_account_is_made_when_creation_is_off(mapped, settings):
    erin = sso.sign_in(ISS, {"sub": "s-1", "preferred_username": "erin", "groups": ["cv"]})
    get_user_model().objects.filter(pk=erin.pk).update(is_active=False)
    assert not sso.sign_in(ISS, {"sub": "s-1", "preferred_username": "erin", "groups": []}).is_active
    assert _state(erin) == {"vision": (MEMBER, "sso")}
    settings.OIDC_CREATE_USER = False
    assert sso.sign_in(ISS, {"sub": "s-2", "preferred_username": "frank"}) is None


@pytest.mark.django_db
def test_linking_takes_over_a_pre_sso_account_only_when_asked_and_the_provider_verified_its_email(mapped, settings):
    bob = mapped["bob"]  # local member of nlp, e-mail set below
    bob.email = "bob@example.org"
    bob.save()
    claims = {"sub": "s-bob", "preferred_username": "bob", "email": "bob@example.org", "email_verified": True}
    assert sso.sign_in(ISS, claims).username == "bob-2"  # off by default: a new account
    settings.PORTAL_SSO_LINK_LOCAL_ACCOUNTS = True
    assert sso.sign_in(ISS, {**claims, "sub": "s-unverified", "email_verified": False}).username == "bob-3"
    linked = sso.sign_in(ISS, {**claims, "sub": "s-linked"})
    assert linked.pk == bob.pk and not linked.has_usable_password()
    assert _state(linked) == {"nlp": (MEMBER, "local")}  # what bob had stays
    assert AuditEvent.objects.filter(actor=bob, action=SsoAuditAction.USER_LINK).count() == 1
    assert sso.sign_in(ISS, {**claims, "sub": "s-again"}).username == "bob-4"  # linked once, never twice


@pytest.mark.django_db
def test_linking_never_takes_over_an_admin_account(mapped, settings):
    settings.PORTAL_SSO_LINK_LOCAL_ACCOUNTS = True
    admin = mapped["admin"]
    admin.email = "root@example.org"
    admin.save()
    claims = {"sub": "s-root", "preferred_username": "admin", "email": "root@example.org", "email_verified": True}
    assert sso.sign_in(ISS, claims).pk != admin.pk


# --- the migration ---------------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_migration_marks_every_existing_membership_local():
    executor = MigrationExecutor(connection)
    # Found by what it does, not its name: the lead may renumber it when merging other branches' migrations.
    (after,) = [
        key
        for key, migration in executor.loader.disk_migrations.items()
        if key[0] == "portal"
        and any(getattr(op, "name", "") == "source" and getattr(op, "model_name", "") == "membership"
                for op in migration.operations)
    ]  # fmt: skip
    before = [p for p in executor.loader.graph.node_map[after].parents if p.key[0] == "portal"]
    before, after = [before[0].key], [after]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    team = old.get_model("portal", "Team").objects.create(slug="t", name="T", namespace="team-t")
    user = old.get_model("auth", "User").objects.create(username="old-member")
    old.get_model("portal", "Membership").objects.create(team=team, user=user, role="lead")
    executor = MigrationExecutor(connection)
    executor.migrate(after)
    executor.loader.build_graph()
    new = executor.loader.project_state(after).apps
    rows = list(new.get_model("portal", "Membership").objects.values_list("user__username", "role", "source"))
    assert rows == [("old-member", "lead", MembershipSource.LOCAL)]
    executor.migrate(executor.loader.graph.leaf_nodes())


# --- ID token checks the library leaves out ---------------------------------------------------------------------------


@pytest.fixture
def signing_key(settings):
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    settings.OIDC_RP_CLIENT_ID = "portal"
    settings.OIDC_RP_IDP_SIGN_KEY = public.decode()
    settings.OIDC_OP_DISCOVERY_URL = "https://id.example.org/.well-known/openid-configuration"
    sso._discovery_cache[settings.OIDC_OP_DISCOVERY_URL] = (float("inf"), {"issuer": "https://id.example.org"})
    yield key
    sso._discovery_cache.clear()


def _token(key, **claims):
    base = {"iss": "https://id.example.org", "aud": "portal", "sub": "s-1", "nonce": "n", "exp": time.time() + 60}
    return jwt.encode({**base, **claims}, key, algorithm="RS256")


@pytest.mark.parametrize(
    ("claims", "accepted"),
    [
        ({}, True),
        ({"aud": ["other", "portal"]}, True),
        ({"aud": "another-client"}, False),
        ({"iss": "https://evil.example.org"}, False),
        ({"nonce": "replayed"}, False),
    ],
)
def test_id_tokens_for_another_client_or_from_another_issuer_are_refused(signing_key, claims, accepted):
    backend = sso.PortalOIDCBackend()
    token = _token(signing_key, **claims)
    if accepted:
        assert backend.verify_token(token, nonce="n")["sub"] == "s-1"
    else:
        with pytest.raises(SuspiciousOperation):
            backend.verify_token(token, nonce="n")
