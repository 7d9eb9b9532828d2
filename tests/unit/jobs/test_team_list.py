"""The teams list counts every member of a team, whoever looks (ux-walk R4: a member saw "1" where the team
page listed 2, because the count ran over the join that picked the viewer's own teams)."""

from __future__ import annotations

import pytest

from accounts.choices import MembershipRole
from tests.factories import MembershipFactory, UserFactory


@pytest.mark.parametrize("viewer", ["alice", "carol", "admin"])
def test_member_count_is_the_whole_team_for_members_and_admins(client, people, viewer):
    carol = UserFactory(username="carol")
    MembershipFactory(user=carol, team=people["vision"], role=MembershipRole.MEMBER)
    user = carol if viewer == "carol" else people[viewer]
    client.force_login(user)
    rows = {row["team"].slug: row for row in client.get("/teams/").context["rows"]}
    assert rows["vision"]["team"].member_count == 2
    assert ("nlp" in rows) == user.is_staff
