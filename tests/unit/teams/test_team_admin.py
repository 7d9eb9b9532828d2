"""Team administration in the portal (issue 18): admins create teams (the namespace fixed at creation) and change
their name; a team's leads and admins manage its members; every change is audited with before and after."""

from __future__ import annotations

import pytest

from accounts.choices import MembershipRole
from accounts.models import Membership, Team
from core.models import AuditEvent
from tests.factories import UserFactory, member


@pytest.fixture
def carol(people):
    """A plain member of vision (alice is its only lead)."""
    carol = member(people["vision"])
    return carol


# -- creating and changing teams ------------------------------------------------------------------------------


def test_an_admin_creates_a_team_whose_namespace_defaults_to_its_slug_and_it_is_audited(client, people):
    client.force_login(people["admin"])
    assert client.get("/teams/new/").status_code == 200
    response = client.post("/teams/new/", {"slug": "speech", "name": "Speech", "namespace": "", "description": "ASR"})
    assert response.status_code == 302 and response["Location"] == "/teams/speech/members/"
    team = Team.objects.get(slug="speech")
    assert (team.name, team.namespace, team.description) == ("Speech", "speech", "ASR")
    event = AuditEvent.objects.get(action="team.create")
    assert event.actor == people["admin"] and event.team == team
    assert event.after == {"slug": "speech", "name": "Speech", "namespace": "speech", "description": "ASR"}


def test_a_new_team_lists_every_problem_at_once(client, people):
    client.force_login(people["admin"])
    response = client.post("/teams/new/", {"slug": "Bad_Slug", "name": " ", "namespace": "team-vision"})
    assert response.status_code == 400
    errors = response.context["form"].errors
    assert "lowercase" in errors["slug"][0]
    assert "Give the team a name" in errors["name"][0]
    assert "Team vision runs in 'team-vision' already" in errors["namespace"][0]
    response = client.post("/teams/new/", {"slug": "vision", "name": "Again", "namespace": "kube-system"})
    errors = response.context["form"].errors
    assert "exists already" in errors["slug"][0] and "system namespace" in errors["namespace"][0]
    response = client.post("/teams/new/", {"slug": "new", "name": "New"})
    assert "names a portal page" in response.context["form"].errors["slug"][0]
    assert Team.objects.count() == 2 and not AuditEvent.objects.filter(action="team.create").exists()


@pytest.mark.parametrize("who", ["alice", "bob", "outsider"])
def test_only_admins_create_or_change_teams(client, people, who):
    client.force_login(people[who])
    assert client.get("/teams/new/").status_code == 404
    assert client.post("/teams/new/", {"slug": "x", "name": "X"}).status_code == 404
    assert client.post("/teams/vision/edit/", {"name": "Hijacked"}).status_code == 404
    assert client.get("/teams/vision/notebook-policy/").status_code == 404
    assert client.get("/manage/").status_code == 404
    assert not Team.objects.filter(slug="x").exists() and Team.objects.get(slug="vision").name == "Computer Vision"


def test_the_edit_form_shows_the_namespace_as_text_and_never_changes_it(client, people):
    client.force_login(people["admin"])
    page = client.get("/teams/vision/edit/").content.decode()
    assert '<code data-testid="team-namespace">team-vision</code>' in page
    assert 'name="namespace"' not in page and 'name="slug"' not in page
    response = client.post(
        "/teams/vision/edit/", {"name": "Vision", "description": "Pixels", "namespace": "elsewhere", "slug": "v2"}
    )
    assert response.status_code == 302
    team = Team.objects.get(pk=people["vision"].pk)
    assert (team.slug, team.name, team.namespace, team.description) == ("vision", "Vision", "team-vision", "Pixels")
    event = AuditEvent.objects.get(action="team.update")
    assert event.before == {"name": "Computer Vision", "description": ""}
    assert event.after == {"name": "Vision", "description": "Pixels"}


# -- members --------------------------------------------------------------------------------------------------


def test_a_lead_adds_a_member_by_user_name_and_it_is_audited(client, people, carol):
    UserFactory(username="dave")
    client.force_login(people["alice"])
    assert client.get("/teams/vision/members/").status_code == 200
    response = client.post("/teams/vision/members/", {"username": "dave", "role": "member"})
    assert response.status_code == 302
    assert Membership.objects.get(team=people["vision"], user__username="dave").role == "member"
    event = AuditEvent.objects.get(action="team.member_add")
    assert event.actor == people["alice"] and event.team == people["vision"]
    assert event.before is None and event.after == {"user": "dave", "role": "member"}


def test_adding_an_unknown_or_present_user_says_what_to_do(client, people, carol):
    client.force_login(people["alice"])
    response = client.post("/teams/vision/members/", {"username": "nobody", "role": "admin"})
    assert response.status_code == 400
    errors = response.context["add_form"].errors
    assert "No user 'nobody'" in errors["username"][0] and "sign in to the portal once" in errors["username"][0]
    assert "role" in errors, "admin is no role a lead can give"
    response = client.post("/teams/vision/members/", {"username": "carol", "role": "lead"})
    assert "carol is in team vision already" in response.context["add_form"].errors["username"][0]
    assert not AuditEvent.objects.filter(action="team.member_add").exists()


def test_nobody_escalates_to_admin_on_the_members_page(client, people, carol):
    client.force_login(people["alice"])
    membership = Membership.objects.get(user=carol)
    response = client.post(f"/teams/vision/members/{membership.pk}/role/", {"role": "admin"})
    assert response.status_code == 400
    carol.refresh_from_db()
    assert not carol.is_staff and Membership.objects.get(user=carol).role == "member"


@pytest.mark.parametrize(("who", "status"), [("carol", 403), ("bob", 404), ("outsider", 404)])
def test_members_and_other_teams_cannot_manage_members(client, people, carol, who, status):
    user = carol if who == "carol" else people[who]
    target = Membership.objects.get(user=people["alice"])
    client.force_login(user)
    assert client.get("/teams/vision/members/").status_code == status
    assert client.post("/teams/vision/members/", {"username": "bob", "role": "lead"}).status_code == status
    assert client.post(f"/teams/vision/members/{target.pk}/role/", {"role": "member"}).status_code == status
    assert client.post(f"/teams/vision/members/{target.pk}/remove/").status_code == status
    assert Membership.objects.get(pk=target.pk).role == "lead"
    assert not AuditEvent.objects.filter(action__startswith="team.member").exists()


def test_the_team_page_links_leads_and_admins_to_the_members_page_only(client, people, carol):
    for user, shown in ((people["alice"], True), (carol, False), (people["admin"], True)):
        client.force_login(user)
        page = client.get("/teams/vision/").content.decode()
        assert ('data-testid="team-members-link"' in page) is shown


def test_a_lead_changes_roles_with_before_and_after_in_the_log(client, people, carol):
    client.force_login(people["alice"])
    membership = Membership.objects.get(user=carol)
    assert client.post(f"/teams/vision/members/{membership.pk}/role/", {"role": "lead"}).status_code == 302
    assert Membership.objects.get(pk=membership.pk).role == "lead"
    event = AuditEvent.objects.get(action="team.member_role")
    assert event.before == {"user": "carol", "role": "member"} and event.after == {"user": "carol", "role": "lead"}
    # With two leads, alice may step down.
    alice = Membership.objects.get(user=people["alice"])
    assert client.post(f"/teams/vision/members/{alice.pk}/role/", {"role": "member"}).status_code == 302


def test_a_lead_cannot_demote_or_remove_the_last_lead(client, people, carol):
    client.force_login(people["alice"])
    alice = Membership.objects.get(user=people["alice"])
    response = client.post(f"/teams/vision/members/{alice.pk}/role/", {"role": "member"})
    assert response.status_code == 400
    assert "alice is the last lead of vision; make someone else a lead first." in response.content.decode()
    response = client.post(f"/teams/vision/members/{alice.pk}/remove/")
    assert response.status_code == 400 and "last lead" in response.content.decode()
    assert Membership.objects.get(pk=alice.pk).role == "lead"
    assert not AuditEvent.objects.filter(action__startswith="team.member").exists()


def test_a_lead_removes_a_member_and_an_admin_may_remove_the_last_lead(client, people, carol):
    client.force_login(people["alice"])
    membership = Membership.objects.get(user=carol)
    assert client.post(f"/teams/vision/members/{membership.pk}/remove/").status_code == 302
    assert not Membership.objects.filter(pk=membership.pk).exists()
    event = AuditEvent.objects.get(action="team.member_remove")
    assert event.before == {"user": "carol", "role": "member"} and event.after is None
    client.force_login(people["admin"])
    alice = Membership.objects.get(user=people["alice"])
    assert client.post(f"/teams/vision/members/{alice.pk}/remove/").status_code == 302
    assert not people["vision"].memberships.exists()


def test_a_membership_of_another_team_is_not_found_through_this_team(client, people, carol):
    client.force_login(people["alice"])
    bobs = Membership.objects.get(user=people["bob"])
    assert client.post(f"/teams/vision/members/{bobs.pk}/remove/").status_code == 404
    assert Membership.objects.filter(pk=bobs.pk).exists()


def test_service_accounts_are_not_members_a_lead_can_change_or_take_elsewhere(client, people):
    from django.core.exceptions import ValidationError

    from accounts import service_accounts, teams

    robot = service_accounts.create(people["alice"], people["vision"], "nightly")
    membership = Membership.objects.get(user=robot.user, team=people["vision"])
    with pytest.raises(ValidationError, match="Service accounts page"):
        teams.set_role(people["alice"], membership, MembershipRole.LEAD)
    with pytest.raises(ValidationError, match="Service accounts page"):
        teams.remove_member(people["alice"], membership)
    with pytest.raises(ValidationError, match="belongs to that team alone"):
        teams.add_member(people["admin"], people["nlp"], robot.user.username)
    client.force_login(people["alice"])
    page = client.get("/teams/vision/members/").content.decode()
    assert robot.user.username not in page
    assert Membership.objects.filter(user=robot.user).count() == 1
