"""accounts.roles: a user's role in a team, and whether that role leads it (lead or admin), in one place."""

import pytest
from django.contrib.auth.models import AnonymousUser

from accounts import roles
from accounts.choices import MembershipRole
from accounts.models import Membership


@pytest.mark.django_db
def test_the_role_each_person_holds_in_each_team(people):
    vision, nlp = people["vision"], people["nlp"]
    assert roles.team_role(people["alice"], vision) == MembershipRole.LEAD
    assert roles.team_role(people["alice"], nlp) is None
    assert roles.team_role(people["bob"], nlp) == MembershipRole.MEMBER
    assert roles.team_role(people["admin"], vision) == roles.ADMIN == "admin"
    assert roles.team_role(people["admin"], nlp) == "admin"  # staff hold every team, member or not
    assert roles.team_role(people["outsider"], vision) is None
    assert roles.team_role(AnonymousUser(), vision) is None


def test_only_lead_and_admin_lead():
    assert roles.leads("lead") and roles.leads(MembershipRole.LEAD) and roles.leads("admin")
    assert not roles.leads("member") and not roles.leads(MembershipRole.MEMBER) and not roles.leads(None)


@pytest.mark.django_db
def test_lead_or_admin_of_a_team(people):
    vision, nlp = people["vision"], people["nlp"]
    assert roles.is_lead_or_admin(people["alice"], vision)
    assert not roles.is_lead_or_admin(people["alice"], nlp)
    assert not roles.is_lead_or_admin(people["bob"], nlp)  # a member, not a lead
    assert roles.is_lead_or_admin(people["admin"], nlp)
    assert not roles.is_lead_or_admin(people["outsider"], vision)
    assert not roles.is_lead_or_admin(AnonymousUser(), vision)


@pytest.mark.django_db
def test_the_teams_a_person_leads(people):
    vision, nlp = people["vision"], people["nlp"]
    assert roles.led_team_ids(people["alice"]) == {vision.pk}
    assert list(roles.led_teams(people["alice"])) == [vision]
    assert roles.led_team_ids(people["bob"]) == set()
    assert not roles.led_teams(people["bob"]).exists()
    assert set(roles.led_teams(people["admin"])) == {vision, nlp}
    assert roles.led_team_ids(people["admin"]) == set()  # staff lead every team without a lead membership
    assert roles.led_team_ids(AnonymousUser()) == set() and not roles.led_teams(AnonymousUser()).exists()
    assert roles.is_admin(people["admin"])
    assert not roles.is_admin(people["alice"]) and not roles.is_admin(AnonymousUser())


@pytest.mark.django_db
def test_a_role_change_shows_at_the_next_question(people):
    bob, nlp = people["bob"], people["nlp"]
    Membership.objects.filter(user=bob, team=nlp).update(role=MembershipRole.LEAD)
    assert roles.is_lead_or_admin(bob, nlp)
    Membership.objects.filter(user=bob, team=nlp).delete()
    assert roles.team_role(bob, nlp) is None


@pytest.mark.django_db
def test_roles_remembered_reads_each_role_once_inside_the_block_only(people, django_assert_num_queries):
    alice, vision, nlp = people["alice"], people["vision"], people["nlp"]
    with roles.roles_remembered():
        with django_assert_num_queries(2):  # one read per (user, team), however often asked
            for _ in range(3):
                assert roles.team_role(alice, vision) == "lead"
                assert roles.team_role(alice, nlp) is None
        Membership.objects.filter(user=alice, team=vision).update(role=MembershipRole.MEMBER)
        assert roles.team_role(alice, vision) == "lead"  # remembered for the rest of the block
    with django_assert_num_queries(1):
        assert roles.team_role(alice, vision) == "member"  # outside the block every question reads
    with django_assert_num_queries(0):
        assert roles.team_role(people["admin"], vision) == "admin"
